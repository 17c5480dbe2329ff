// A tiny test-local interpreter of graphs: runs each node through the registry like eager code.
//   - op nodes call symmflow::call_bound; mutating ops mutate their argument tensors;
//   - functional<op> nodes copy their written args, then call the op on the copies;
//   - fused nodes run through exec::run_fused; copy nodes clone;
//   - writebacks copy their value into the caller's input tensor at the end.
#pragma once

#include <cstring>
#include <unordered_map>
#include <vector>

#include "support/tensors.hpp"
#include "symmflow/exec/fused.hpp"
#include "symmflow/ir/graph.hpp"
#include "symmflow/ops/call.hpp"

namespace symmflow::testing {

// Runs `g` on `inputs` (the caller's buffers: mutated in place, writebacks included) and returns
// copies of the outputs.
inline std::vector<Tensor> interpret(const ir::Graph& g, std::vector<Tensor>& inputs) {
  std::unordered_map<const ir::Value*, Tensor> env;
  for (size_t i = 0; i < g.inputs().size(); ++i) env[g.inputs()[i]] = inputs.at(i);
  auto bind = [&](const ir::Node& n) {
    std::vector<Value> bound;
    for (const ir::Arg& a : n.args()) {
      if (a.kind == ir::Arg::Kind::value) {
        bound.emplace_back(env.at(a.value));
      } else if (a.kind == ir::Arg::Kind::value_list) {
        std::vector<Tensor> ts;
        for (const ir::Value* v : a.values) ts.push_back(env.at(v));
        bound.emplace_back(ts);
      } else {
        bound.push_back(a.literal);
      }
    }
    return bound;
  };
  for (const ir::Node* n : g.nodes()) {
    switch (n->kind()) {
      case ir::NodeKind::op: {
        std::vector<Value> outs = call_bound(*n->op(), bind(*n));
        for (size_t r = 0; r < n->outputs().size(); ++r) env[n->output(r)] = outs.at(r).to_tensor();
        break;
      }
      case ir::NodeKind::functional: {
        std::vector<Value> bound = bind(*n);
        const auto& written = n->op()->aliases().written_args;
        for (int w : written) bound[size_t(w)] = clone_tensor(bound[size_t(w)].to_tensor());
        std::vector<Value> outs = call_bound(*n->op(), bound);
        size_t nret = outs.size();
        for (size_t r = 0; r < nret; ++r) env[n->output(r)] = outs[r].to_tensor();
        for (size_t k = 0; k < written.size(); ++k)
          env[n->output(nret + k)] = bound[size_t(written[k])].to_tensor();
        break;
      }
      case ir::NodeKind::fused: {
        std::vector<Tensor> ins, outs;
        for (const ir::Value* v : n->inputs()) ins.push_back(env.at(v).contiguous());
        for (const ir::Value* v : n->outputs()) outs.push_back(Tensor::empty(v->type().shape, v->type().dtype));
        exec::run_fused(*n->body(), ins, outs);
        for (size_t r = 0; r < outs.size(); ++r) env[n->output(r)] = outs[r];
        break;
      }
      case ir::NodeKind::copy: env[n->output()] = clone_tensor(env.at(n->inputs()[0])); break;
    }
  }
  std::vector<Tensor> results;
  for (const ir::Value* v : g.outputs()) results.push_back(clone_tensor(env.at(v)));
  for (const ir::Graph::Writeback& w : g.writebacks()) {
    Tensor src = env.at(w.value).contiguous();
    Tensor& dst = inputs.at(size_t(w.input->index()));
    if (src.raw_data() != dst.raw_data()) std::memcpy(dst.raw_data(), src.raw_data(), dst.nbytes());
  }
  return results;
}

}  // namespace symmflow::testing
