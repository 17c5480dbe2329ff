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
//
// Values may have different dtypes (a region with casts: each value has its own, and its scratch
// comes from that dtype's free list), and a region input may be smaller than the region and
// broadcast to its shape, or be a strided view (Note [fused casts and broadcasts],
// passes/fuse_pointwise.cpp). Such an input is gathered at the start of each chunk into a
// chunk-sized buffer of its own, reading it by its strides and with stride 0 on its broadcast dims
// (gather): one pass over cache-resident memory, after which every kernel sees same-shaped 1-d
// chunks as before.
#include "symmflow/exec/fused.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
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

// A region input read by strides: the body value, its data and its element strides over the
// region's shape (0 on broadcast dims).
struct Gathered {
  int vid = -1;
  const char* data = nullptr;
  size_t esize = 0;
  Strides strides;
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
  // The next call's tensors in place of the last one's, when their layout is the one this run
  // was prepared for (each input flat or gathered as before); false, binding nothing, otherwise.
  bool rebind(std::span<const Tensor> inputs, std::span<const Tensor> outputs);
  // Drops the views of the call's tensors (Note [fused programs prepared once]).
  void release();

 private:
  void bind_gathered(Gathered& b, size_t i);
  void gather(const Gathered& b, const Tensor& dst, int64_t off, int64_t len) const;
  void index_values();
  void place_inputs_and_outputs();
  void compile();
  // Whether input tensor t is read flat (else gathered: strided, or broadcast to the region).
  bool flat_input(const Tensor& t) const { return t.is_contiguous() && t.numel() == numel_; }
  void check_tensor(const Tensor& t, const ir::Value* v, bool input) const {
    const char* what = input ? "input" : "output";
    SF_CHECK(t.defined() && !t.is_meta() && (input || t.is_contiguous()),
             "run_fused: {} '{}' must be a {}tensor with memory", what, v->name(),
             input ? "" : "contiguous ");
    SF_CHECK(t.dtype() == v->type().dtype &&
                 (input && !flat_input(t) ? t.shape() == v->type().shape : t.numel() == numel_),
             "run_fused: {} '{}' is {} but the body expects {}", what, v->name(), t.str(),
             v->type().str());
  }

  const ir::Graph& body_;
  std::span<const Tensor> inputs_, outputs_;
  std::unordered_map<const ir::Value*, int> id_;
  std::vector<const ir::Value*> values_;
  int64_t numel_ = 0, chunk_ = 0;
  Shape shape_;                        // the region's: its first output's
  std::vector<Gathered> gathered_inputs_;  // strided or broadcast inputs
  // Where each value lives: its flat base tensor (inputs, outputs) or its scratch tensor.
  std::vector<Tensor> base_;
  std::vector<bool> is_scratch_, is_output_;
  std::vector<bool> gathered_;  // a gathered input: base_ is its chunk-sized buffer
  std::vector<std::pair<int, int>> identity_outputs_;  // (output index, value id) copied per chunk
  std::vector<bool> output_is_identity_;               // per output: in identity_outputs_
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
  const ir::Value* whole = !body_.outputs().empty() ? body_.outputs()[0]
                           : values_.empty()         ? nullptr
                                                     : values_[0];
  if (whole) shape_ = whole->type().shape;
  numel_ = symmflow::numel(shape_);
  for (const ir::Value* v : values_) {
    if (symmflow::numel(v->type().shape) == numel_) continue;
    SF_CHECK(v->is_input() && broadcasts_to(v->type().shape, shape_),
             "run_fused: body value '{}' is {} but the region is elementwise over {} elements{}",
             v->name(), v->type().str(), numel_,
             v->is_input() ? fmt::format(" (shape {}, to which it does not broadcast)",
                                         shape_str(shape_))
                           : "");
  }
}

void FusedRun::place_inputs_and_outputs() {
  base_.assign(values_.size(), Tensor());
  is_scratch_.assign(values_.size(), false);
  is_output_.assign(values_.size(), false);
  gathered_.assign(values_.size(), false);
  for (size_t i = 0; i < inputs_.size(); ++i) {
    const ir::Value* v = body_.inputs()[i];
    check_tensor(inputs_[i], v, true);
    if (flat_input(inputs_[i])) {
      base_[i] = inputs_[i].as_strided({numel_}, {1}, 0);
      continue;
    }
    Gathered b{int(i), nullptr, dtype_size(v->type().dtype), Strides(shape_.size(), 0)};
    bind_gathered(b, i);
    gathered_inputs_.push_back(std::move(b));
    base_[i] = Tensor::empty({chunk_}, v->type().dtype);  // refilled per chunk; never pooled
    gathered_[i] = true;
  }
  for (size_t r = 0; r < outputs_.size(); ++r) {
    const ir::Value* v = body_.outputs()[r];
    check_tensor(outputs_[r], v, false);
    int vid = id_.at(v);
    const bool identity = v->is_input() || base_[size_t(vid)].defined();
    output_is_identity_.push_back(identity);
    if (identity) {
      identity_outputs_.emplace_back(int(r), vid);
    } else {
      base_[size_t(vid)] = outputs_[r].as_strided({numel_}, {1}, 0);
    }
    if (!v->is_input()) is_output_[size_t(vid)] = true;
  }
}

// Input i's address and strides over the region (0 on broadcast dims) into b.
void FusedRun::bind_gathered(Gathered& b, size_t i) {
  b.data = static_cast<const char*>(inputs_[i].raw_data());
  const Shape& from = body_.inputs()[i]->type().shape;
  const size_t lead = shape_.size() - from.size();
  for (size_t d = 0; d < from.size(); ++d) {
    b.strides[lead + d] = from[d] == shape_[lead + d] ? inputs_[i].strides()[d] : 0;
  }
}

bool FusedRun::rebind(std::span<const Tensor> inputs, std::span<const Tensor> outputs) {
  if (inputs.size() != body_.inputs().size() || outputs.size() != body_.outputs().size())
    return false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined() || inputs[i].is_meta() || flat_input(inputs[i]) == gathered_[i])
      return false;
  }
  inputs_ = inputs;
  outputs_ = outputs;
  size_t g = 0;
  for (size_t i = 0; i < inputs_.size(); ++i) {
    check_tensor(inputs_[i], body_.inputs()[i], true);
    if (gathered_[i]) {
      bind_gathered(gathered_inputs_[g++], i);
    } else {
      base_[i] = inputs_[i].as_strided({numel_}, {1}, 0);
    }
  }
  for (size_t r = 0; r < outputs_.size(); ++r) {
    const ir::Value* v = body_.outputs()[r];
    check_tensor(outputs_[r], v, false);
    if (!output_is_identity_[r]) base_[size_t(id_.at(v))] = outputs_[r].as_strided({numel_}, {1}, 0);
  }
  return true;
}

void FusedRun::release() {
  for (size_t v = 0; v < values_.size(); ++v) {
    if ((v < inputs_.size() && !gathered_[v]) || is_output_[v]) base_[v] = Tensor();
  }
  for (Instruction& ins : program_) {  // the last chunk's views
    for (const auto& [a, vid] : ins.slots) ins.bound[a] = Value();
  }
  for (Gathered& b : gathered_inputs_) b.data = nullptr;
  inputs_ = {};
  outputs_ = {};
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
      bool flat = (v < inputs_.size() && !gathered_[v]) || is_output_[v];
      if (flat) {
        view[v] = base_[v].as_strided({len}, {1}, off);
      } else if (len == chunk_) {
        view[v] = base_[v];
      } else {
        view[v] = base_[v].as_strided({len}, {1}, 0);
      }
    }
    for (const Gathered& b : gathered_inputs_) gather(b, view[size_t(b.vid)], off, len);
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

// Note [gathered runs]: to[j] = src[j * stride] for j < run, elements of esize bytes: a broadcast
// (stride 0: RMSNorm's per-row scale over a row of 512) is a fill of one value, any other stride a
// typed loop. It was a memcpy call per element, which cost more than the region's kernels together
// (a training step's RMSNorm region over 2 MiB took 1.30 ms a call, 0.65 after).
template <typename E>
void gather_typed(char* to, const char* src, int64_t run, int64_t stride) {
  E* __restrict o = reinterpret_cast<E*>(to);
  const E* s = reinterpret_cast<const E*>(src);
  if (stride == 0) {
    std::fill(o, o + run, *s);
  } else {
    for (int64_t j = 0; j < run; ++j) o[j] = s[j * stride];
  }
}

void gather_run(char* to, const char* src, int64_t run, int64_t stride, size_t esize) {
  switch (esize) {
    case 1: return gather_typed<uint8_t>(to, src, run, stride);
    case 2: return gather_typed<uint16_t>(to, src, run, stride);
    case 4: return gather_typed<uint32_t>(to, src, run, stride);
    default: SF_ASSERT(esize == 8); return gather_typed<uint64_t>(to, src, run, stride);
  }
}

// dst[j] = the input at the region's flat index off + j, for j < len: whole runs along the last
// dim (a memcpy where its stride is 1, else element by element at its stride, 0 included), the
// outer index advanced like an odometer.
void FusedRun::gather(const Gathered& b, const Tensor& dst, int64_t off, int64_t len) const {
  const size_t nd = shape_.size();
  char* out = static_cast<char*>(dst.raw_data());
  if (nd == 0) {
    std::memcpy(out, b.data, b.esize);
    return;
  }
  std::vector<int64_t> idx(nd);
  int64_t rest = off;
  for (size_t d = nd; d-- > 0;) {
    idx[d] = rest % shape_[d];
    rest /= shape_[d];
  }
  const int64_t inner = shape_[nd - 1], inner_stride = b.strides[nd - 1];
  for (int64_t done = 0; done < len;) {
    int64_t at = 0;
    for (size_t d = 0; d < nd; ++d) at += idx[d] * b.strides[d];
    const int64_t run = std::min(inner - idx[nd - 1], len - done);
    const char* src = b.data + ptrdiff_t(at) * ptrdiff_t(b.esize);
    char* to = out + size_t(done) * b.esize;
    if (inner_stride == 1) {
      std::memcpy(to, src, size_t(run) * b.esize);
    } else {
      gather_run(to, src, run, inner_stride, b.esize);
    }
    done += run;
    idx[nd - 1] = 0;  // the next run starts a row
    for (size_t d = nd - 1; d-- > 0;) {
      if (++idx[d] < shape_[d]) break;
      idx[d] = 0;
    }
  }
}

}  // namespace

void run_fused(const ir::Graph& body, std::span<const Tensor> inputs, std::span<const Tensor> outputs,
               int64_t chunk_elems) {
  FusedRun(body, inputs, outputs, chunk_elems).run_chunks();
}

struct FusedProgram::Prepared {
  std::unique_ptr<FusedRun> run;
};

FusedProgram::FusedProgram(const ir::Graph& body, int64_t chunk_elems)
    : body_(&body), chunk_elems_(chunk_elems), prepared_(std::make_unique<Prepared>()) {}

FusedProgram::~FusedProgram() = default;

bool FusedProgram::run(std::span<const Tensor> inputs, std::span<const Tensor> outputs) {
  std::unique_ptr<FusedRun>& r = prepared_->run;
  bool reused = false;
  try {
    reused = r && r->rebind(inputs, outputs);
  } catch (...) {
    r.reset();  // half bound: holds the call's tensors
    throw;
  }
  if (!reused) {
    r.reset();  // a failed preparation leaves nothing half-bound behind
    r = std::make_unique<FusedRun>(*body_, inputs, outputs, chunk_elems_);
    ++preparations_;
  }
  struct Release {
    FusedRun& r;
    ~Release() { r.release(); }
  } release{*r};
  r->run_chunks();
  return reused;
}

}  // namespace symmflow::exec
