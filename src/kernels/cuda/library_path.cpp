// beside_cublas (library_path.hpp): dladdr of a cuBLAS function gives the loaded library's path.
#include "kernels/cuda/library_path.hpp"

#include <cublas_v2.h>
#include <dlfcn.h>

#include <filesystem>

namespace symmflow::cuda {

std::string beside_cublas(std::string_view relative) {
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&cublasCreate_v2), &info) || !info.dli_fname) return "";
  for (std::filesystem::path p = info.dli_fname; p.has_parent_path() && p != p.parent_path();
       p = p.parent_path()) {
    if (p.filename() == "nvidia") return (p / std::filesystem::path(relative)).string();
  }
  return "";
}

}  // namespace symmflow::cuda
