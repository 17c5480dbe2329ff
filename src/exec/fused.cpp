// run_fused: chunked evaluation of a fused pointwise body (see fused.hpp).
//
// Note [fused executor: kernels over chunks]. The body is compiled once per call into a list of
// instructions (op, bound argument template, which argument slots take which body value). Each
// body value lives in a fixed place: a caller's input, a caller's output (results are written
// straight there, so a symmetric output buffer needs no staging copy), or a chunk-sized scratch
// tensor taken from a per-dtype free list by liveness. For each chunk of `chunk_elems` elements
// every value gets a 1-d view at the chunk's offset and each instruction runs its registry
// kernel through call_bound_into with the output view preset. Running the very kernels eager
// execution runs, in the same op order, makes fused results bitwise equal to eager ones (16-bit
// floats round after each op in both). Only tensor metadata (views) is made per chunk.
#include "symmflow/exec/fused.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <unordered_map>

#include <fmt/format.h>

#include "symmflow/ops/call.hpp"

namespace symmflow::exec {

namespace {

struct Instruction {
  const OpDef* op = nullptr;
  std::vector<Value> bound;                    // literals filled; tensor slots set per chunk
  std::vector<std::pair<size_t, int>> slots;   // (argument index, value id)
  int out = -1;                                // value id of the result
};

}  // namespace

void run_fused(const ir::Graph& body, std::span<const Tensor> inputs, std::span<const Tensor> outputs,
               int64_t chunk_elems) {
  SF_CHECK(chunk_elems > 0, "run_fused: chunk size {} must be positive", chunk_elems);
  SF_CHECK(inputs.size() == body.inputs().size(), "run_fused: body '{}' takes {} inputs but {} were given",
           body.name(), body.inputs().size(), inputs.size());
  SF_CHECK(outputs.size() == body.outputs().size(),
           "run_fused: body '{}' returns {} values but {} outputs were given", body.name(),
           body.outputs().size(), outputs.size());
  std::unordered_map<const ir::Value*, int> id;
  std::vector<const ir::Value*> values;
  auto define = [&](const ir::Value* v) {
    id[v] = int(values.size());
    values.push_back(v);
  };
  for (const ir::Value* v : body.inputs()) define(v);
  for (const ir::Node* n : body.nodes()) {
    SF_CHECK(n->kind() == ir::NodeKind::op && n->outputs().size() == 1 &&
                 n->op()->aliases().returns_alias.size() == 1 && n->op()->aliases().returns_alias[0] < 0 &&
                 !n->op()->aliases().is_mutable(),
             "run_fused: body node {} must be an op with one fresh result", n->display_name());
    define(n->output());
  }
  const int64_t numel = values.empty() ? 0 : values[0]->type().bytes() / dtype_size(values[0]->type().dtype);
  for (const ir::Value* v : values) {
    SF_CHECK(symmflow::numel(v->type().shape) == numel,
             "run_fused: body value '{}' is {} but the region is elementwise over {} elements",
             v->name(), v->type().str(), numel);
  }
  auto check_tensor = [&](const Tensor& t, const ir::Value* v, const char* what) {
    SF_CHECK(t.defined() && !t.is_meta() && t.is_contiguous(),
             "run_fused: {} '{}' must be a contiguous tensor with memory", what, v->name());
    SF_CHECK(t.dtype() == v->type().dtype && t.numel() == numel,
             "run_fused: {} '{}' is {} but the body expects {}", what, v->name(), t.str(), v->type().str());
  };
  // Where each value lives: its flat base tensor (inputs, outputs) or its scratch tensor.
  std::vector<Tensor> base(values.size());
  std::vector<bool> is_scratch(values.size(), false);
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_tensor(inputs[i], body.inputs()[i], "input");
    base[i] = inputs[i].as_strided({numel}, {1}, 0);
  }
  std::vector<std::pair<int, int>> identity_outputs;  // (output index, value id) to copy per chunk
  for (size_t r = 0; r < outputs.size(); ++r) {
    const ir::Value* v = body.outputs()[r];
    check_tensor(outputs[r], v, "output");
    int vid = id.at(v);
    if (v->is_input() || base[size_t(vid)].defined()) {
      identity_outputs.emplace_back(int(r), vid);
    } else {
      base[size_t(vid)] = outputs[r].as_strided({numel}, {1}, 0);
    }
  }
  // Instructions, with scratch assigned by liveness.
  std::vector<size_t> last_use(values.size(), 0);
  for (size_t k = 0; k < body.nodes().size(); ++k) {
    for (const ir::Value* v : body.nodes()[k]->inputs()) last_use[size_t(id.at(v))] = k;
  }
  const int64_t chunk = std::min(chunk_elems, std::max<int64_t>(numel, 1));
  std::map<DType, std::vector<Tensor>> free_scratch;
  std::vector<Instruction> program;
  program.reserve(body.nodes().size());
  for (size_t k = 0; k < body.nodes().size(); ++k) {
    const ir::Node* n = body.nodes()[k];
    Instruction ins;
    ins.op = n->op();
    for (size_t a = 0; a < n->args().size(); ++a) {
      const ir::Arg& arg = n->args()[a];
      SF_CHECK(arg.kind != ir::Arg::Kind::value_list, "run_fused: {} takes a tensor list", n->display_name());
      if (arg.kind == ir::Arg::Kind::value) {
        ins.bound.emplace_back();
        ins.slots.emplace_back(a, id.at(arg.value));
      } else {
        ins.bound.push_back(arg.literal);
      }
    }
    ins.out = id.at(n->output());
    size_t out = size_t(ins.out);
    if (!base[out].defined()) {
      std::vector<Tensor>& pool = free_scratch[n->output()->type().dtype];
      if (pool.empty()) {
        base[out] = Tensor::empty({chunk}, n->output()->type().dtype);
      } else {
        base[out] = pool.back();
        pool.pop_back();
      }
      is_scratch[out] = true;
    }
    for (const auto& [a, vid] : ins.slots) {
      size_t v = size_t(vid);
      bool dies = is_scratch[v] && last_use[v] == k;
      if (dies) {
        is_scratch[v] = false;  // released once even when used twice by this node
        free_scratch[values[v]->type().dtype].push_back(base[v]);
      }
    }
    program.push_back(std::move(ins));
  }
  std::vector<bool> is_output(values.size(), false);
  for (size_t r = 0; r < outputs.size(); ++r) {
    int vid = id.at(body.outputs()[r]);
    if (!body.outputs()[r]->is_input()) is_output[size_t(vid)] = true;
  }
  std::vector<Tensor> view(values.size());
  std::vector<Value> outs(1);
  for (int64_t off = 0; off < numel; off += chunk) {
    const int64_t len = std::min(chunk, numel - off);
    for (size_t v = 0; v < values.size(); ++v) {
      bool flat = v < inputs.size() || is_output[v];
      if (flat) {
        view[v] = base[v].as_strided({len}, {1}, off);
      } else if (len == chunk) {
        view[v] = base[v];
      } else {
        view[v] = base[v].as_strided({len}, {1}, 0);
      }
    }
    for (Instruction& ins : program) {
      for (const auto& [a, vid] : ins.slots) ins.bound[a] = view[size_t(vid)];
      outs[0] = view[size_t(ins.out)];
      call_bound_into(*ins.op, ins.bound, outs);
    }
    for (const auto& [r, vid] : identity_outputs) {
      size_t bytes = size_t(len) * dtype_size(outputs[size_t(r)].dtype());
      std::memcpy(static_cast<char*>(outputs[size_t(r)].raw_data()) + size_t(off) * dtype_size(outputs[size_t(r)].dtype()),
                  view[size_t(vid)].raw_data(), bytes);
    }
  }
}

}  // namespace symmflow::exec
