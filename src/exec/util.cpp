#include "exec/util.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "symmflow/ops/aten.hpp"

namespace symmflow::exec::detail {

void check_inputs(const ir::Graph& graph, const std::vector<Tensor>& inputs, std::string_view who) {
  const auto& want = graph.inputs();
  if (inputs.size() != want.size()) {
    std::vector<std::string> names;
    for (const ir::Value* v : want) names.push_back(v->name());
    invalid_usage("{}: graph '{}' takes {} inputs ({}) but got {}", who, graph.name(), want.size(),
                  fmt::join(names, ", "), inputs.size());
  }
  for (size_t i = 0; i < want.size(); ++i) {
    const ir::Value* v = want[i];
    const Tensor& t = inputs[i];
    SF_CHECK(t.defined(), "{}: input '{}' (#{}) is an undefined tensor; expected {}", who, v->name(), i,
             v->type().str());
    SF_CHECK(!t.is_meta(), "{}: input '{}' (#{}) is a meta tensor without memory", who, v->name(), i);
    SF_CHECK(t.dtype() == v->type().dtype && t.shape() == v->type().shape,
             "{}: input '{}' (#{}) expects {} but got {}", who, v->name(), i, v->type().str(), t.str());
  }
}

void check_world(const ir::Graph& graph, int world_size, std::string_view who) {
  SF_CHECK(graph.world_size() == world_size,
           "{}: graph '{}' was built for a world of {} ranks but runs on {} (parse or build it with "
           "world_size {})",
           who, graph.name(), graph.world_size(), world_size, world_size);
}

void copy_tensor(const Tensor& dst, const Tensor& src) { aten::copy_(dst, src); }

Tensor clone_tensor(const Tensor& src) {
  Tensor out = Tensor::uninitialized(src.shape(), src.dtype(), src.device());
  if (src.numel() > 0) copy_tensor(out, src);
  return out;
}

bool same_memory(const Tensor& a, const Tensor& b) {
  return a.defined() && b.defined() && !a.is_meta() && !b.is_meta() && a.raw_data() == b.raw_data() &&
         a.dtype() == b.dtype() && a.shape() == b.shape() && a.strides() == b.strides();
}

}  // namespace symmflow::exec::detail
