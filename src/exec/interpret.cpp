// The eager reference interpreter. Contract: see include/symmflow/exec/interpret.hpp. It plans
// nothing and shares no code path with the Executable beyond the registry's kernels, so the two
// can check each other (`symmflow run --check`).
//
// Note [eager staging of symm args]: a symm arg that is not symmetric in the node's group is
// copied into a fresh empty_symmetric tensor S, and every rank then passes a barrier of the group
// before the call, so no peer reads or writes S (get, put_signal) before its owner filled it. S
// stays alive until the end (a peer may read it after the call returns, as `get` does). When the
// op writes the argument in place, S becomes the value from then on (a wait_signal after a
// put_signal must find the data peers put into S), and is copied into the original tensor at the
// end, latest staging first (so a graph input the program mutates ends with its final value).
#include "symmflow/exec/interpret.hpp"

#include <unordered_map>

#include "exec/util.hpp"
#include "symmflow/exec/groups.hpp"
#include "symmflow/ops/call.hpp"
#include "symmflow/runtime/heap.hpp"
#include "symmflow/runtime/runtime.hpp"

namespace symmflow::exec {

namespace {

bool communicates(const ir::Graph& graph) {
  for (const ir::Node* n : graph.nodes()) {
    if (!n->group().empty() || (n->op() && !n->op()->symm_args().empty())) return true;
  }
  return false;
}

bool symmetric_in(const Tensor& t, const std::string& group) {
  if (!t.is_symmetric()) return false;
  const auto* s = dynamic_cast<const SymmetricStorage*>(t.storage().get());
  return s && s->heap()->group()->name() == group;
}

// The group each value is a symm arg in (its first such use), so that its producer can make it
// in symmetric memory: a buffer peers write (put_signal's dst) must be the very tensor the later
// ops read, not a copy made per call (Note [eager symm results]).
std::unordered_map<const ir::Value*, std::string> symm_uses(const ir::Graph& graph) {
  std::unordered_map<const ir::Value*, std::string> out;
  for (const ir::Node* n : graph.nodes()) {
    if (!n->op() || n->group().empty()) continue;
    for (const std::string& name : n->op()->symm_args()) {
      const ir::Arg& a = n->args()[size_t(n->op()->schema().arg_index(name))];
      if (a.kind == ir::Arg::Kind::value) out.emplace(a.value, n->group());
      for (const ir::Value* v : a.values) out.emplace(v, n->group());
    }
  }
  return out;
}

// One run of interpret() over a graph (the steps of interpret, named).
class Interpreter {
 public:
  Interpreter(const ir::Graph& graph, std::vector<Tensor> inputs)
      : graph_(graph), inputs_(std::move(inputs)), symm_group_(symm_uses(graph)) {
    for (size_t i = 0; i < inputs_.size(); ++i) env_[graph.inputs()[i]] = inputs_[i];
  }

  std::vector<Tensor> run() {
    for (const ir::Node* n : graph_.nodes()) {
      switch (n->kind()) {
        case ir::NodeKind::copy:
          env_[n->output()] = clone_for(n->output(), tensor_of(n->args()[0].value));
          break;
        case ir::NodeKind::fused: {
          std::vector<Tensor> ins;
          for (const ir::Arg& a : n->args()) ins.push_back(tensor_of(a.value));
          std::vector<Tensor> outs = interpret(*n->body(), std::move(ins));
          for (size_t r = 0; r < outs.size(); ++r) env_[n->output(r)] = outs[r];
          break;
        }
        case ir::NodeKind::op:
        case ir::NodeKind::functional:
          run_op(*n);
          break;
      }
    }
    for (auto it = write_back_.rbegin(); it != write_back_.rend(); ++it)
      detail::copy_tensor(it->first, it->second);
    for (const auto& w : graph_.writebacks()) {
      const Tensor& value = tensor_of(w.value);
      const Tensor& input = inputs_[size_t(w.input->index())];
      if (!detail::same_memory(value, input)) detail::copy_tensor(input, value);
    }
    std::vector<Tensor> results;
    for (const ir::Value* v : graph_.outputs()) results.push_back(tensor_of(v));
    return results;
  }

 private:
  const Tensor& tensor_of(const ir::Value* v) const {
    auto it = env_.find(v);
    SF_CHECK(it != env_.end(), "interpret: value '{}' is used before it is defined", v->name());
    return it->second;
  }

  // Note [eager symm results]: a value used as a symm arg of group g is made in symm[g] by its
  // producer (op results that do not alias an argument, functional new values, copies), as the
  // compiler places it; values made otherwise (views, graph inputs) are copied per call.
  Tensor fresh(const ir::Value* v) const {
    auto it = symm_group_.find(v);
    if (it == symm_group_.end()) return Tensor();
    return empty_symmetric(v->type().shape, v->type().dtype, it->second);
  }

  Tensor clone_for(const ir::Value* v, const Tensor& t) const {
    Tensor c = fresh(v);
    if (!c.defined()) return detail::clone_tensor(t);
    detail::copy_tensor(c, t);
    return c;
  }

  Value bind(const ir::Node& n, const ir::Arg& a) const {
    switch (a.kind) {
      case ir::Arg::Kind::literal:
        return a.literal;
      case ir::Arg::Kind::rank_relative: {  // Note [rank-relative arguments]
        SF_CHECK(!n.group().empty(), "interpret: {} has a rank-relative argument but no group",
                 n.display_name());
        const Group& g = *Runtime::current().group(n.group());
        return ir::resolve_rank_relative(a.rank_offset, g.rank(), g.size());
      }
      case ir::Arg::Kind::value:
        return tensor_of(a.value);
      case ir::Arg::Kind::value_list:
        break;
    }
    std::vector<Tensor> ts;
    for (const ir::Value* v : a.values) ts.push_back(tensor_of(v));
    return ts;
  }

  // Symm args (Note [eager staging of symm args]); returns whether any was staged.
  bool stage_symm_args(const ir::Node& n, std::vector<Value>& bound,
                       std::vector<Tensor>& new_values) {
    const OpDef& op = *n.op();
    const bool functional = n.kind() == ir::NodeKind::functional;
    const std::string& group = n.group();
    bool staged = false;
    for (const std::string& name : op.symm_args()) {
      int i = op.schema().arg_index(name);
      const ir::Arg& arg = n.args()[size_t(i)];
      const bool written = op.schema().args[size_t(i)].is_written();
      auto symm_copy = [&](const Tensor& t, const ir::Value* v) {
        if (symmetric_in(t, group) && t.is_contiguous()) return t;
        Tensor s = empty_symmetric(t.shape(), t.dtype(), group);
        detail::copy_tensor(s, t);
        staged = true;
        keep_alive_.push_back(s);
        if (written && functional) {
          for (Tensor& nv : new_values) nv = nv.raw_data() == t.raw_data() ? s : nv;
        } else if (written && v) {
          write_back_.push_back({t, s});
          env_[v] = s;
        }
        return s;
      };
      Value& b = bound[size_t(i)];
      if (b.is_tensor()) {
        b = symm_copy(b.to_tensor(), arg.kind == ir::Arg::Kind::value ? arg.value : nullptr);
      } else if (b.is_tensor_list()) {
        std::vector<Tensor> ts = b.to_tensor_list();
        for (size_t k = 0; k < ts.size(); ++k) ts[k] = symm_copy(ts[k], arg.values[k]);
        b = std::move(ts);
      }
    }
    return staged;
  }

  void run_op(const ir::Node& n) {
    const OpDef& op = *n.op();
    std::vector<Value> bound;
    bound.reserve(n.args().size());
    for (const ir::Arg& a : n.args()) bound.push_back(bind(n, a));
    // functional<op>: the op writes copies; the copies are the new values.
    std::vector<Tensor> new_values;
    size_t new_index = n.result_count();
    if (n.kind() == ir::NodeKind::functional) {
      for (int w : op.aliases().written_args) {
        SF_CHECK(bound[size_t(w)].is_tensor(), "interpret: {} writes a tensor list (unsupported)",
                 n.display_name());
        Tensor c = clone_for(n.output(new_index++), bound[size_t(w)].to_tensor());
        bound[size_t(w)] = c;
        new_values.push_back(c);
      }
    }
    if (stage_symm_args(n, bound, new_values))
      Runtime::current().group(n.group())->barrier(0, "interpret: staged symm args");
    std::vector<Value> outs(n.result_count());
    for (size_t r = 0; r < outs.size(); ++r) {
      if (op.aliases().output_alias(r) >= 0) continue;
      if (Tensor t = fresh(n.output(r)); t.defined()) outs[r] = t;
    }
    call_bound_into(op, bound, outs);
    size_t r = 0;
    for (; r < outs.size(); ++r) env_[n.output(r)] = outs[r].to_tensor();
    for (const Tensor& t : new_values) env_[n.output(r++)] = t;
  }

  const ir::Graph& graph_;
  std::vector<Tensor> inputs_;
  const std::unordered_map<const ir::Value*, std::string> symm_group_;
  std::unordered_map<const ir::Value*, Tensor> env_;
  std::vector<Tensor> keep_alive_;                     // staged symm args: peers may read them
  std::vector<std::pair<Tensor, Tensor>> write_back_;  // (original, its staged symm copy)
};

}  // namespace

std::vector<Tensor> interpret(const ir::Graph& graph, std::vector<Tensor> inputs) {
  detail::check_inputs(graph, inputs, "interpret");
  // Ops without tensors (symm_mem::barrier) run where the inputs live.
  ThreadDeviceGuard device(!inputs.empty() && inputs[0].device().type == DeviceType::cuda
                               ? inputs[0].device()
                               : Device::cpu());
  if (communicates(graph)) {
    Runtime& rt = Runtime::current();
    detail::check_world(graph, rt.world_size(), "interpret");
    ensure_groups(graph, rt);
  }
  return Interpreter(graph, std::move(inputs)).run();
}

}  // namespace symmflow::exec
