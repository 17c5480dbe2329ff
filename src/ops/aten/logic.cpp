// The aten comparisons and bitwise/logical ops that Hugging Face models' masks use:
// eq/ne/lt/le/gt/ge (.Tensor and .Scalar), bitwise_and/or/xor (.Tensor), bitwise_and/or
// (.Scalar), bitwise_not and logical_or, with PyTorch's schemas, broadcasting and type promotion
// (meta_logic.cpp). Kernels: kernels/cpu/logic.cpp and kernels/cuda/pointwise/aten_logic.cpp.
#include "ops/aten/meta.hpp"

namespace symmflow {

SYMMFLOW_LIBRARY(aten, m) {
  using aten_meta::Args;
  for (const char* name : {"eq", "ne", "lt", "le", "gt", "ge"}) {
    for (const char* overload : {"Tensor", "Scalar"}) {
      aten_meta::def(m,
                     fmt::format("{}.{}(Tensor self, {} other) -> Tensor", name, overload,
                                 overload),
                     [](const Args& a) {
                       return std::vector<TensorSpec>{
                           aten_meta::compare_info(a.op(), a.tensor("self"), a["other"]).spec};
                     });
    }
  }
  auto bitwise = [](const Args& a) {
    return std::vector<TensorSpec>{aten_meta::bitwise_spec(a.op(), a.tensor("self"), a["other"])};
  };
  for (const char* name : {"bitwise_and", "bitwise_or", "bitwise_xor"}) {
    aten_meta::def(m, fmt::format("{}.Tensor(Tensor self, Tensor other) -> Tensor", name),
                   bitwise);
  }
  for (const char* name : {"bitwise_and", "bitwise_or"}) {
    aten_meta::def(m, fmt::format("{}.Scalar(Tensor self, Scalar other) -> Tensor", name),
                   bitwise);
  }
  aten_meta::def(m, "bitwise_not(Tensor self) -> Tensor", [](const Args& a) {
    return std::vector<TensorSpec>{aten_meta::bitwise_spec(a.op(), a.tensor("self"), Value())};
  });
  aten_meta::def(m, "logical_or(Tensor self, Tensor other) -> Tensor", [](const Args& a) {
    return std::vector<TensorSpec>{
        aten_meta::logical_spec(a.op(), a.tensor("self"), &a.tensor("other"))};
  });
}

}  // namespace symmflow
