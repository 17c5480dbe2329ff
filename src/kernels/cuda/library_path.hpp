// Where the NVIDIA libraries opened on first use (cuDNN, NCCL) may lie: the `nvidia` folder of
// the pip wheels that holds the cuBLAS this module loaded (site-packages/nvidia/...). Private to
// the cuda backend.
#pragma once

#include <string>
#include <string_view>

namespace symmflow::cuda {

// `<that nvidia folder>/<relative>` ("cudnn/lib/libcudnn.so.9"), or "" when the loaded cuBLAS
// is not under such a folder.
std::string beside_cublas(std::string_view relative);

}  // namespace symmflow::cuda
