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

// One call of run_fused, in three named steps: index and check the body's values
// (index_values), place them and compile the instructions (compile), run them chunk by chunk
// (run_chunks).
class FusedRun {
 public:
  FusedRun(const ir::Graph& body, std::span<const Tensor> inputs, std::span<const Tensor> outputs,
           int64_t chunk_elems)
      : body_(body), inputs_(inputs), outputs_(outputs) {
    SF_CHECK(chunk_elems > 0, "run_fused: chunk size {} must be positive", chunk_elems);
    SF_CHECK(inputs.size() == body.inputs().size(),
             "run_fused: body '{}' takes {} inputs but {} were given", body.name(),
             body.inputs().size(), inputs.size());
    SF_CHECK(outputs.size() == body.outputs().size(),
             "run_fused: body '{}' returns {} values but {} outputs were given", body.name(),
             body.outputs().size(), outputs.size());
    index_values();
    chunk_ = std::min(chunk_elems, std::max<int64_t>(numel_, 1));
    place_inputs_and_outputs();
    compile();
  }

  void run_chunks();

 private:
  void index_values();
  void place_inputs_and_outputs();
  void compile();
  void check_tensor(const Tensor& t, const ir::Value* v, const char* what) const {
    SF_CHECK(t.defined() && !t.is_meta() && t.is_contiguous(),
             "run_fused: {} '{}' must be a contiguous tensor with memory", what, v->name());
    SF_CHECK(t.dtype() == v->type().dtype && t.numel() == numel_,
             "run_fused: {} '{}' is {} but the body expects {}", what, v->name(), t.str(),
             v->type().str());
  }

  const ir::Graph& body_;
  std::span<const Tensor> inputs_, outputs_;
  std::unordered_map<const ir::Value*, int> id_;
  std::vector<const ir::Value*> values_;
  int64_t numel_ = 0, chunk_ = 0;
  // Where each value lives: its flat base tensor (inputs, outputs) or its scratch tensor.
  std::vector<Tensor> base_;
  std::vector<bool> is_scratch_, is_output_;
  std::vector<std::pair<int, int>> identity_outputs_;  // (output index, value id) copied per chunk
  std::vector<Instruction> program_;
};

void FusedRun::index_values() {
  auto define = [&](const ir::Value* v) {
    id_[v] = int(values_.size());
    values_.push_back(v);
  };
  for (const ir::Value* v : body_.inputs()) define(v);
  for (const ir::Node* n : body_.nodes()) {
    SF_CHECK(n->kind() == ir::NodeKind::op && n->outputs().size() == 1 &&
                 !n->op()->aliases().list_return && n->op()->aliases().returns_alias.size() == 1 &&
                 n->op()->aliases().output_alias(0) < 0 && !n->op()->aliases().is_mutable(),
             "run_fused: body node {} must be an op with one fresh result", n->display_name());
    define(n->output());
  }
  numel_ = values_.empty() ? 0 : values_[0]->type().bytes() / dtype_size(values_[0]->type().dtype);
  for (const ir::Value* v : values_) {
    SF_CHECK(symmflow::numel(v->type().shape) == numel_,
             "run_fused: body value '{}' is {} but the region is elementwise over {} elements",
             v->name(), v->type().str(), numel_);
  }
}

void FusedRun::place_inputs_and_outputs() {
  base_.assign(values_.size(), Tensor());
  is_scratch_.assign(values_.size(), false);
  is_output_.assign(values_.size(), false);
  for (size_t i = 0; i < inputs_.size(); ++i) {
    check_tensor(inputs_[i], body_.inputs()[i], "input");
    base_[i] = inputs_[i].as_strided({numel_}, {1}, 0);
  }
  for (size_t r = 0; r < outputs_.size(); ++r) {
    const ir::Value* v = body_.outputs()[r];
    check_tensor(outputs_[r], v, "output");
    int vid = id_.at(v);
    if (v->is_input() || base_[size_t(vid)].defined()) {
      identity_outputs_.emplace_back(int(r), vid);
    } else {
      base_[size_t(vid)] = outputs_[r].as_strided({numel_}, {1}, 0);
    }
    if (!v->is_input()) is_output_[size_t(vid)] = true;
  }
}

// Instructions, with scratch assigned by liveness.
void FusedRun::compile() {
  std::vector<size_t> last_use(values_.size(), 0);
  for (size_t k = 0; k < body_.nodes().size(); ++k) {
    for (const ir::Value* v : body_.nodes()[k]->inputs()) last_use[size_t(id_.at(v))] = k;
  }
  std::map<DType, std::vector<Tensor>> free_scratch;
  program_.reserve(body_.nodes().size());
  for (size_t k = 0; k < body_.nodes().size(); ++k) {
    const ir::Node* n = body_.nodes()[k];
    Instruction ins;
    ins.op = n->op();
    for (size_t a = 0; a < n->args().size(); ++a) {
      const ir::Arg& arg = n->args()[a];
      SF_CHECK(arg.kind != ir::Arg::Kind::value_list, "run_fused: {} takes a tensor list",
               n->display_name());
      if (arg.kind == ir::Arg::Kind::value) {
        ins.bound.emplace_back();
        ins.slots.emplace_back(a, id_.at(arg.value));
      } else {
        ins.bound.push_back(arg.literal);
      }
    }
    ins.out = id_.at(n->output());
    size_t out = size_t(ins.out);
    if (!base_[out].defined()) {
      std::vector<Tensor>& pool = free_scratch[n->output()->type().dtype];
      if (pool.empty()) {
        base_[out] = Tensor::empty({chunk_}, n->output()->type().dtype);
      } else {
        base_[out] = pool.back();
        pool.pop_back();
      }
      is_scratch_[out] = true;
    }
    for (const auto& [a, vid] : ins.slots) {
      size_t v = size_t(vid);
      if (is_scratch_[v] && last_use[v] == k) {
        is_scratch_[v] = false;  // released once even when used twice by this node
        free_scratch[values_[v]->type().dtype].push_back(base_[v]);
      }
    }
    program_.push_back(std::move(ins));
  }
}

void FusedRun::run_chunks() {
  std::vector<Tensor> view(values_.size());
  std::vector<Value> outs(1);
  for (int64_t off = 0; off < numel_; off += chunk_) {
    const int64_t len = std::min(chunk_, numel_ - off);
    for (size_t v = 0; v < values_.size(); ++v) {
      bool flat = v < inputs_.size() || is_output_[v];
      if (flat) {
        view[v] = base_[v].as_strided({len}, {1}, off);
      } else if (len == chunk_) {
        view[v] = base_[v];
      } else {
        view[v] = base_[v].as_strided({len}, {1}, 0);
      }
    }
    for (Instruction& ins : program_) {
      for (const auto& [a, vid] : ins.slots) ins.bound[a] = view[size_t(vid)];
      outs[0] = view[size_t(ins.out)];
      call_bound_into(*ins.op, ins.bound, outs);
    }
    for (const auto& [r, vid] : identity_outputs_) {
      const Tensor& out = outputs_[size_t(r)];
      size_t esize = dtype_size(out.dtype());
      std::memcpy(static_cast<char*>(out.raw_data()) + size_t(off) * esize,
                  view[size_t(vid)].raw_data(), size_t(len) * esize);
    }
  }
}

}  // namespace

void run_fused(const ir::Graph& body, std::span<const Tensor> inputs, std::span<const Tensor> outputs,
               int64_t chunk_elems) {
  FusedRun(body, inputs, outputs, chunk_elems).run_chunks();
}

}  // namespace symmflow::exec
