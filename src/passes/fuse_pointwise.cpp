// fuse_pointwise: regions of elementwise aten ops become one `fused` node.
//
// Expects: a functionalized graph (no op node writes an argument). Other node kinds are opaque.
// Guarantees:
//   - a fusible node is an op node whose op is_fusible_pointwise (tagged pointwise, neither
//     in_place nor out: Note [op tags]; add/sub/mul/div .Tensor and .Scalar, sin, cos, exp, tanh,
//     relu, gelu, silu, sigmoid, neg, rsqrt, reciprocal, pow.Tensor_Scalar, rsub.Scalar and
//     _to_copy among the built-in ops) with one floating-point output, whose every tensor
//     argument broadcasts to the output's shape (PyTorch's rules: trailing-aligned, each dim
//     equal or 1 or missing) and has the output's dtype, except that a node with a single tensor
//     argument may convert between f32, bf16 and f16; its Device,
//     Layout and MemoryFormat arguments (by schema type) must be None, and a ScalarType argument
//     needs an f32, bf16 or f16 result (Note [fused casts and broadcasts]).
//   - a fusible producer P joins a region when every use of its value is a fusible node of that
//     one region with P's output's shape (its dtype may differ), and the value is neither a graph
//     output nor a writeback value (Note [regions with shared values]). When its uses lie in
//     several regions, those merge into one first if no path leads between them and the result
//     fits (Note [sibling regions]); otherwise a producer of at most 2 tensors is copied into each
//     (Note [recomputed producers]). A value with a user outside its region is never fused across
//     (it stays a buffer), while one used several times inside a region (torch's silu: x *
//     sigmoid(x)) is a register like any other. Every value defined in a region has its last
//     node's shape; only external inputs broadcast.
//   - every region of >= 2 ops becomes one `fused` node at its last node's position (nodes that
//     read an earlier output of it move after it, otherwise the order is kept), whose body
//     holds the ops in their original order over body inputs named after the region's external
//     inputs (as the text format names them); its outputs, the region's values used outside it
//     (one, its last node's, unless siblings merged; at most 2), keep their names and layouts.
//     Single ops are left alone. Only the region's outputs are buffers.
//   - a region input may be a strided view (a permute, an expand): the fused executors index it
//     by its strides, as they index a broadcast input, so no copy is added.
//   - a region has at most 12 ops, 8 external inputs and 2 outputs (Note [fused region size]).
//   - one walk back with union-find, one reorder, erasures from the back: O(n log n), plus a
//     search of the graph per attempted merge of sibling regions.
// Refuses: nothing (non-fusible nodes are left as they are).
//
// Note [regions with shared values]: a region was a tree (a producer joined only a consumer that
// was its value's every use). Decompositions share values inside a chain: torch's silu in f32 is
// u = _to_copy(x); u * sigmoid(u), so u, used twice, stayed a buffer, and the SwiGLU tail took
// two steps. A producer now joins when all its uses are in one region, so the region is a DAG
// with one output; its members are still contiguous in effect (no use leaves the region, so
// moving them to the root's position breaks no order). Deciding from the back sees every user's
// region before its producers; regions grow by producers, and merge only as Note [sibling
// regions] says, keeping the later root, so a region's root stays its last node. The executors already run DAG bodies: the CPU one frees scratch after a
// value's last use, the GPU one releases a register after its last reader.
//
// Note [sibling regions]: the backward of SiLU x (sigmoid s) times up u, given g, is two products
// that read the same tensors: dx = g * u * s * (1 + x * (1 - s)) and du = g * x * s, each in a
// region of its own, and s, read by both, a third kernel. Inductor makes one kernel of them. So
// a producer whose uses lie in several regions merges those regions into one with an output per
// region, and then joins it: one pass over x, u and g, two results. The merged node stands at its
// last member's place, and a node between that read an earlier output (AOT puts du's weight
// gradient GEMM between du and dx) moves after it: the pass orders its nodes topologically,
// otherwise as they were. That is legal when no path leads from one of the regions to another
// through other nodes, regions taken whole (path_between); RMSNorm's backward has one (g * w
// feeds a product that a row sum reads, and the region after the sum reads the sum), which would
// be a cycle. Merging happens only for a shared producer, not for regions that merely read the
// same inputs, and at most kMaxFusedOutputs outputs: each output is a store, and the GPU's
// program holds 10 tensors (Note [fused region size]). Where regions stay apart, a small
// producer is copied into each instead (Note [recomputed producers] in
// fuse_pointwise_regions.cpp). In a two-layer Llama's training backward (CPU, world 1) the two
// rules with Note [one swapped sin] (raise_rotary.cpp) took the plan from 283 steps to 257:
// pointwise kernels (fused regions, lone pointwise ops, the rotary table's cat and neg) 53 to 33.
//
// Note [fused casts and broadcasts]: the pointwise work of a decoder layer is mostly chains that
// change dtype (torch's silu in f32 between bf16 GEMMs: _to_copy, silu, _to_copy, mul) or read a
// tensor broadcast over heads (rotary's x * cos + rotate_half(x) * sin, cos [tokens, head_dim]).
// Both fuse, under rules that keep every executor simple and bitwise equal to op-by-op execution:
//   - dtypes: each body value keeps its own dtype and every executor rounds each op's result to
//     it (the CPU runs the very registry kernels per chunk; the GPU program rounds each register,
//     ProgramBuilder::value). A dtype change happens only in an op with one tensor argument (a
//     conversion such as _to_copy), so no fused op promotes two operands of different dtypes, and
//     only between f32, bf16 and f16: a GPU program computes in one type (Note [pointwise
//     programs]), float unless an f64 value takes part, and a bf16 silu or an alpha product
//     computed in double may round differently from op-by-op execution, which computes it in
//     float. So a cast to or from f64 (or an integer type) stays a node of its own; a region is
//     all f64 or holds none.
//   - shapes: every value defined in the region has the region's (root's) shape; only an external
//     input may be smaller and broadcast. The CPU executor gathers such an input chunk by chunk
//     through stride-0 indexing into a chunk-sized buffer (exec/fused.cpp); the GPU loads it
//     with stride 0 on its broadcast dims (a program over the region's shape, run by the generic
//     pointwise kernel: exec/cuda/fused.cpp). Intermediates are never broadcast, so scratch stays
//     one chunk per value. A strided view among the inputs (rotary's q is a permute of a GEMM's
//     result) is read the same way, by its strides, instead of through a copy made before the
//     region: the region then costs one pass over memory, not two.
//   - which op converts is the registry's word: the op is tagged pointwise and its result's dtype
//     differs from its one tensor argument's; arguments of type Device, Layout or MemoryFormat
//     must be None so the op is a dtype change and nothing else, and an op taking a ScalarType
//     fuses only with an f32, bf16 or f16 result. No op names here.
#include <algorithm>
#include <set>
#include <span>
#include <string>
#include <unordered_map>

#include "passes/fuse_pointwise_regions.hpp"
#include "symmflow/passes/passes.hpp"

namespace symmflow::passes {

bool is_fusible_pointwise(const OpDef& op) {
  return op.has(Tag::pointwise) && !op.has(Tag::in_place) && !op.has(Tag::out);
}

namespace {

using ir::Arg;
using ir::Graph;
using ir::Node;
using ir::NodeKind;

// The dtypes a cast may join inside a region: those GPU programs compute in float (f64 computes
// in double; Note [fused casts and broadcasts]).
bool computed_in_float(DType d) { return d == DType::f32 || d == DType::bf16 || d == DType::f16; }

// Note [fused casts and broadcasts]: argument types and literals a fusible node may have.
bool fusible_node(const Node* n) {
  if (n->kind() != NodeKind::op || !is_fusible_pointwise(*n->op()) || n->outputs().size() != 1)
    return false;
  const ir::TensorType& t = n->output()->type();
  // Integer and bool results stay nodes: the GPU's programs compute floats only (Note [integer
  // pointwise on GPUs] in kernels/cuda/pointwise/program.hpp), and mask or position arithmetic
  // is small beside the float chains.
  if (!is_floating(t.dtype)) return false;
  const FunctionSchema& schema = n->op()->schema();
  size_t tensors = 0;
  bool converts = false;
  for (size_t k = 0; k < n->args().size(); ++k) {
    const Arg& a = n->args()[k];
    if (a.kind == Arg::Kind::value_list || a.kind == Arg::Kind::rank_relative) return false;
    if (a.kind == Arg::Kind::value) {
      ++tensors;
      const ir::TensorType& at = a.value->type();
      if (!broadcasts_to(at.shape, t.shape)) return false;
      if (at.dtype != t.dtype) {
        if (!computed_in_float(at.dtype) || !computed_in_float(t.dtype)) return false;
        converts = true;
      }
      continue;
    }
    const TypeKind kind = k < schema.args.size() ? schema.args[k].type.kind : TypeKind::Tensor;
    const bool placement = kind == TypeKind::Device || kind == TypeKind::Layout ||
                           kind == TypeKind::MemoryFormat;
    if (placement && a.kind == Arg::Kind::literal && !a.literal.is_none()) return false;
    // An op that takes a dtype converts: only to f32, bf16 or f16 (an i64 copy stays a node).
    if (kind == TypeKind::ScalarType && !computed_in_float(t.dtype)) return false;
  }
  return !converts || tensors == 1;
}

// Note [fused region size]: a region grows by producers only while it has at most kMaxFusedOps
// ops and kMaxFusedInputs external tensors, so that every executor runs it as one program: the
// GPU's (kernels/cuda/pointwise/pointwise.hpp) holds 10 tensors (the inputs and the outputs), 48
// instructions (a load per input, at most 3 per op: the op and the constants of two scalar
// arguments, a store) and 24 live registers (inputs and intermediates). Without the bound a long
// decomposed chain (a backward graph's, say) would fuse into a region the GPU refuses at run
// time. A region at the bound stays a buffer boundary; its producers form regions of their own.
// (The bounds: kMaxFusedOps, kMaxFusedInputs, kMaxFusedOutputs in fuse_pointwise_regions.cpp.)

// The fused node of one region, producing `outputs`. `final_name`: the names earlier fused
// outputs take at the end.
Node* fuse_region(Graph& graph, const std::vector<Node*>& nodes, std::span<const size_t> region,
                  const std::vector<ir::Value*>& outputs,
                  const std::unordered_map<const ir::Value*, std::string>& final_name) {
  // External inputs, in order of first use; everything else is defined inside.
  std::unordered_map<const ir::Value*, bool> inside;
  for (size_t m : region) inside[nodes[m]->output()] = true;
  std::vector<ir::Value*> inputs;
  std::unordered_map<const ir::Value*, bool> seen;
  for (size_t m : region) {
    for (ir::Value* v : nodes[m]->inputs()) {
      if (!inside.count(v) && !seen[v]) {
        seen[v] = true;
        inputs.push_back(v);
      }
    }
  }
  auto body = std::make_unique<Graph>("fused", graph.world_size());
  std::unordered_map<const ir::Value*, ir::Value*> inner;
  for (size_t k = 0; k < inputs.size(); ++k) {
    ir::Value* v = inputs[k];
    auto pending = final_name.find(v);  // an earlier fused node's output, renamed at the end
    inner[v] = body->add_input(pending == final_name.end() ? v->name() : pending->second, v->type());
  }
  for (size_t m : region) {
    const Node* src = nodes[m];
    const FunctionSchema& s = src->op()->schema();
    std::vector<ir::KwArg> kwargs;
    for (size_t k = 0; k < src->args().size(); ++k) {
      Arg a = src->args()[k];
      if (a.defaulted) continue;
      if (a.kind == Arg::Kind::value) a.value = inner.at(a.value);
      kwargs.emplace_back(s.args[k].name, std::move(a));
    }
    Node* copy = body->add_op(*src->op(), {}, kwargs, src->output()->name());
    copy->set_loc(src->loc());
    inner[src->output()] = copy->output();
  }
  std::vector<ir::Value*> body_outputs;
  for (ir::Value* v : outputs) body_outputs.push_back(inner.at(v));
  body->set_outputs(body_outputs);
  Node* fused = graph.add_fused(inputs, std::move(body));
  fused->set_loc(nodes[region.back()]->loc());
  for (size_t k = 0; k < outputs.size(); ++k) fused->output(k)->set_layout(outputs[k]->layout());
  return fused;
}

// `order` sorted so that every node follows the producers of its inputs, otherwise as given (a
// merged region's node stands at its last member's place, and a use of its earlier output
// before that place moves after it: Note [sibling regions]).
std::vector<Node*> stable_topological(const std::vector<Node*>& order) {
  std::unordered_map<const Node*, size_t> index;
  for (size_t k = 0; k < order.size(); ++k) index[order[k]] = k;
  std::vector<size_t> waiting(order.size(), 0);
  std::vector<std::vector<size_t>> users(order.size());
  for (size_t k = 0; k < order.size(); ++k) {
    std::set<size_t> producers;
    for (const ir::Value* in : order[k]->inputs()) {
      auto it = in->producer() ? index.find(in->producer()) : index.end();
      if (it != index.end()) producers.insert(it->second);
    }
    waiting[k] = producers.size();
    for (size_t p : producers) users[p].push_back(k);
  }
  std::set<size_t> ready;
  for (size_t k = 0; k < order.size(); ++k)
    if (waiting[k] == 0) ready.insert(k);
  std::vector<Node*> sorted;
  sorted.reserve(order.size());
  while (!ready.empty()) {
    const size_t k = *ready.begin();
    ready.erase(ready.begin());
    sorted.push_back(order[k]);
    for (size_t u : users[k])
      if (--waiting[u] == 0) ready.insert(u);
  }
  SF_ASSERT(sorted.size() == order.size());  // merges never make a cycle (path_between)
  return sorted;
}

}  // namespace

void fuse_pointwise(ir::Graph& graph) {
  const std::vector<Node*> nodes = graph.nodes();
  std::vector<bool> fusible(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) fusible[i] = fusible_node(nodes[i]);
  const fusion::Regions regions = fusion::find_regions(graph, nodes, fusible);
  std::vector<Node*> order, dead;
  order.reserve(nodes.size());
  std::vector<std::pair<ir::Value*, std::string>> renames;
  std::unordered_map<const ir::Value*, std::string> final_name;
  for (size_t i = 0; i < nodes.size(); ++i) {
    Node* n = nodes[i];
    if (!fusible[i]) {
      order.push_back(n);
      continue;
    }
    if (regions.recomputed[i]) {  // Note [recomputed producers]: its copies replace it
      dead.push_back(n);
      continue;
    }
    const size_t root = regions.root[i];
    const std::span<const size_t> region = regions.of(root);
    if (region.size() < 2) {
      order.push_back(n);
      continue;
    }
    dead.push_back(n);
    if (root != i) continue;  // the fused node takes the root's place
    const std::vector<ir::Value*>& outputs = regions.outputs[root];
    Node* fused = fuse_region(graph, nodes, region, outputs, final_name);
    for (size_t k = 0; k < outputs.size(); ++k) {
      ir::Value* made = fused->output(k);
      graph.replace_uses(outputs[k], made);
      renames.emplace_back(made, outputs[k]->name());
      final_name[made] = outputs[k]->name();
    }
    order.push_back(fused);
  }
  if (dead.empty()) return;
  order = stable_topological(order);
  order.insert(order.end(), dead.begin(), dead.end());
  graph.reorder(std::move(order));
  for (auto it = dead.rbegin(); it != dead.rend(); ++it) graph.erase(*it);
  for (auto& [v, name] : renames) graph.rename(v, name);
}

}  // namespace symmflow::passes
