// The graph IR: an SSA dataflow program of op calls.
//
// A Graph has typed inputs, an ordered list of Nodes and outputs. Each Node calls an op of the
// registry (or is one of three compiler-made kinds: a functional wrapper of a mutating op, a fused
// pointwise region, a copy) with arguments bound to the op's schema, and defines output Values.
// Every Value has a static TensorType (dtype + contiguous shape) computed by the op's shape
// function, and a Layout: the memory colour (regular, or symm[group]) the planner packs it into.
// Values keep their use lists, so passes run in time linear in the graph.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "symmflow/core/dtype.hpp"
#include "symmflow/core/shape.hpp"
#include "symmflow/ir/diagnostics.hpp"
#include "symmflow/ops/group_size.hpp"
#include "symmflow/ops/registry.hpp"

namespace symmflow::ir {

struct TensorType {
  DType dtype = DType::f32;
  Shape shape;
  size_t bytes() const { return size_t(numel(shape)) * dtype_size(dtype); }
  std::string str() const;  // "bf16[16, 4096]"
  bool operator==(const TensorType&) const = default;
};

// Memory colour. Buffers are packed into, and reused within, their own colour only.
enum class Pool : uint8_t { unassigned, regular, symm };
struct Layout {
  Pool pool = Pool::unassigned;
  std::string group;  // for symm
  static Layout regular() { return {Pool::regular, ""}; }
  static Layout symm(std::string g) { return {Pool::symm, std::move(g)}; }
  std::string str() const;  // "regular", "symm[tp]", "?"
  bool operator==(const Layout&) const = default;
};

class Node;

class Value {
 public:
  const std::string& name() const { return name_; }
  const TensorType& type() const { return type_; }
  void set_type(TensorType t) { type_ = std::move(t); }
  const Layout& layout() const { return layout_; }
  void set_layout(Layout l) { layout_ = std::move(l); }
  Node* producer() const { return producer_; }  // null for graph inputs
  int index() const { return index_; }          // output index, or input index
  bool is_input() const { return producer_ == nullptr; }
  const std::vector<Node*>& uses() const { return uses_; }  // one entry per use
  // Where a graph input was declared (line 0 when not parsed from text), for diagnostics.
  const SourceLoc& loc() const { return loc_; }
  void set_loc(SourceLoc l) { loc_ = l; }

 private:
  friend class Graph;
  friend class Node;
  std::string name_;
  TensorType type_;
  Layout layout_;
  Node* producer_ = nullptr;
  int index_ = 0;
  std::vector<Node*> uses_;
  SourceLoc loc_;
};

// One argument of a node, in schema order.
//
// Note [rank-relative arguments]: `rank+k` / `rank-k` (Kind::rank_relative, `rank_offset` = k)
// stands for the int (r + k) mod W, where r is this rank's index in the node's group and W the
// group's size: a ring's peers (`put_signal(x, buf, rank+1, ...)`) in one SPMD program. Only int
// arguments of ops with a group argument take one (the builder and the verifier refuse others).
// The executor resolves it once per rank when it binds the plan; the eager interpreter per call.
// Shape functions see the placeholder int k (it must not change output types).
struct Arg {
  enum class Kind { value, value_list, literal, rank_relative };
  Kind kind = Kind::literal;
  Value* value = nullptr;
  std::vector<Value*> values;
  symmflow::Value literal;
  bool defaulted = false;   // filled from the schema default; not printed
  int64_t rank_offset = 0;  // rank_relative: k

  static Arg of(Value* v) { return Arg{Kind::value, v, {}, {}, false}; }
  static Arg of_list(std::vector<Value*> vs) {
    return Arg{Kind::value_list, nullptr, std::move(vs), {}, false};
  }
  static Arg of_literal(symmflow::Value v) {
    return Arg{Kind::literal, nullptr, {}, std::move(v), false};
  }
  static Arg of_rank(int64_t k) { return Arg{Kind::rank_relative, nullptr, {}, {}, false, k}; }
};

// "rank+1", "rank-1", "rank+0": a rank-relative argument as the text format writes it.
std::string rank_relative_text(int64_t k);
// Why argument i of `op` cannot be the rank-relative value k, or "" when it can (an int argument
// of an op with a group argument).
std::string rank_relative_error(const OpDef& op, size_t i, int64_t k);
// (rank + k) mod size, in [0, size).
int64_t resolve_rank_relative(int64_t k, int rank, int size);

enum class NodeKind {
  op,          // a call of `op`
  functional,  // functional<op>: a mutating op made pure; outputs = op's returns, then the new
               // value of each written argument, in argument order
  fused,       // a pointwise region: `body` computes the output from the node's inputs
  copy,        // an identity copy the compiler added; attrs["reason"] says why
};

class Graph;

class Node {
 public:
  NodeKind kind() const { return kind_; }
  const OpDef* op() const { return op_; }  // null for fused and copy
  const std::vector<Arg>& args() const { return args_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  Value* output(size_t i = 0) const { return outputs_.at(i); }
  // How many of the outputs are the op's results (its returns, a list return's elements each
  // counted, Note [list returns] in schema.hpp): all of them, less a functional node's new values.
  size_t result_count() const;
  std::vector<Value*> inputs() const;  // every Value argument, in order (list elements included)
  const SourceLoc& loc() const { return loc_; }
  void set_loc(SourceLoc l) { loc_ = l; }
  std::map<std::string, std::string>& attrs() { return attrs_; }
  const std::map<std::string, std::string>& attrs() const { return attrs_; }
  Graph* body() const { return body_.get(); }  // fused only
  Graph& owner() const { return *owner_; }
  // "symm_mem::one_shot_all_reduce", "functional<ns::op_>", "fused", "copy"
  std::string display_name() const;
  // For op/functional nodes: the literal of the op's group argument, or "" when none.
  std::string group() const;

  // Replaces argument i's values (keeps use lists right).
  void set_arg(size_t i, Arg a);

 private:
  friend class Graph;
  NodeKind kind_ = NodeKind::op;
  const OpDef* op_ = nullptr;
  std::vector<Arg> args_;
  std::vector<Value*> outputs_;
  std::map<std::string, std::string> attrs_;
  std::unique_ptr<Graph> body_;
  SourceLoc loc_;
  Graph* owner_ = nullptr;
  mutable size_t position_ = 0;
};

// A declared group: `group tp` (every rank), `group tp(2)` (the world split into consecutive
// blocks of 2 ranks; each rank is in one block) or `group dp = {0, 2}, {1, 3}` (explicit
// subgroups, Note [explicit groups] in graph.cpp: members are ranks of the world, disjoint, every
// subgroup of one size; a rank in none of them takes part in no op of the group).
struct GroupDecl {
  std::string name;
  int block = 0;  // 0: the whole world (unless subgroups are given)
  std::vector<std::vector<int>> subgroups;  // explicit members, in the order written
  SourceLoc loc;

  // Ranks per subgroup (block, the world, or the size of each explicit subgroup).
  int size(int world_size) const;
  // The members (global ranks, in group order) of the subgroup that holds `rank`; empty when
  // `rank` is in none.
  std::vector<int> members_of(int rank, int world_size) const;
  // Ranks of the world in no subgroup (only explicit groups have any).
  std::vector<int> ranks_outside(int world_size) const;
};

using KwArg = std::pair<std::string, Arg>;

class Graph {
 public:
  explicit Graph(std::string name = "main", int world_size = 1);
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  const std::string& name() const { return name_; }
  int world_size() const { return world_size_; }
  void set_world_size(int w) { world_size_ = w; }
  // Note [hosts] (runtime/bootstrap.hpp): the host of each rank, when the ranks run on several
  // (empty: one host). Only explain reads it: a collective of a group that spans hosts says how
  // it runs (kernels::spanning_algorithm); the plan is the same.
  const std::vector<int>& hosts() const { return hosts_; }
  // Throws InvalidUsage unless there is one id (>= 0) per rank of the world.
  void set_hosts(std::vector<int> host_of_rank);
  // The file the graph was parsed from (ParseOptions::filename; "" when built), for diagnostics.
  const std::string& source_file() const { return source_file_; }
  void set_source_file(std::string f) { source_file_ = std::move(f); }

  // Groups. "world" always exists. size_of throws InvalidUsage for unknown groups. add_group
  // validates the declaration against the world size (Note [explicit groups] in graph.cpp) and
  // throws InvalidUsage naming the group; the builder form of `group dp = {0, 2}, {1, 3}` is
  // add_group({"dp", 0, {{0, 2}, {1, 3}}}).
  void add_group(GroupDecl g);
  const std::vector<GroupDecl>& groups() const { return groups_; }
  const GroupDecl* find_group(std::string_view name) const;
  int group_size(std::string_view name) const;

  Value* add_input(const std::string& name, TensorType type);
  const std::vector<Value*>& inputs() const { return inputs_; }
  const std::vector<Node*>& nodes() const { return order_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  void set_outputs(std::vector<Value*> outs);
  // Graph inputs that the program mutates: after the run, `value` is written back into `input`
  // (made by functionalize; printed `writeback x = x_2` before `return`).
  struct Writeback {
    Value* input;
    Value* value;
  };
  const std::vector<Writeback>& writebacks() const { return writebacks_; }
  void add_writeback(Value* input, Value* value);

  // Builder: binds positional and keyword args to the op's schema (defaults filled), runs the
  // shape function on meta tensors for the output types, names outputs (`name` or fresh), and
  // appends the node (or inserts it before `before`). Throws InvalidUsage on a mismatch.
  Node* add_op(std::string_view op_name, std::vector<Arg> args, std::vector<KwArg> kwargs = {},
               const std::string& name = "", Node* before = nullptr);
  Node* add_op(const OpDef& op, std::vector<Arg> args, std::vector<KwArg> kwargs = {},
               const std::string& name = "", Node* before = nullptr);
  // functional<op> over already bound args (as taken from a mutating node).
  Node* add_functional(const OpDef& op, std::vector<Arg> bound, Node* before = nullptr);
  Node* add_copy(Value* source, const std::string& reason, Node* before = nullptr);
  // A fused node over `inputs`; `body` has one input per element of `inputs` (same types) and
  // computes the node's outputs.
  Node* add_fused(std::vector<Value*> inputs, std::unique_ptr<Graph> body, Node* before = nullptr);
  // Renames a value; throws InvalidUsage when the name is taken.
  void rename(Value* v, const std::string& name);

  // Removes a node whose outputs are unused.
  void erase(Node* node);
  // Moves the node list into `order` (a permutation of the current nodes).
  void reorder(std::vector<Node*> order);
  // Replaces uses of `from` by `to` in nodes at or after position `from_position` (and in the
  // outputs).
  void replace_uses(Value* from, Value* to, size_t from_position = 0);
  // Position of a node in nodes() (kept up to date).
  size_t position(const Node* n) const;

  std::string fresh_name(std::string_view hint);
  Value* find_value(std::string_view name) const;

 private:
  friend class Node;
  Node* insert(std::unique_ptr<Node> n, Node* before);
  Value* new_value(std::string name, TensorType type, Node* producer, int index);
  void renumber() const;

  std::string name_;
  int world_size_;
  std::vector<int> hosts_;
  std::vector<GroupDecl> groups_;
  std::map<std::string, size_t, std::less<>> group_index_;  // name -> index in groups_
  std::vector<Value*> inputs_, outputs_;
  std::vector<Writeback> writebacks_;
  std::map<const Value*, size_t> writeback_index_;  // input -> index in writebacks_
  std::vector<std::unique_ptr<Value>> values_;
  std::vector<std::unique_ptr<Node>> owned_;
  std::vector<Node*> order_;
  std::map<std::string, Value*, std::less<>> by_name_;
  std::map<std::string, int, std::less<>> name_counters_;
  mutable bool positions_valid_ = false;
  std::string source_file_;
};

// Binds positional and keyword args to the op's schema, one Arg per schema argument (defaults
// filled and marked), checking types exactly as eager calls do.
std::vector<Arg> bind_node_args(const OpDef& op, const std::vector<Arg>& args,
                                const std::vector<KwArg>& kwargs);

// Meta tensor for a value's type (shape functions take tensors).
Tensor meta_of(const TensorType& t);
// An argument as shape functions see it: tensors as meta tensors, literals as they are.
symmflow::Value meta_value(const Arg& a);
// Resolves the graph's groups to their sizes for shape functions (see ops/group_size.hpp).
GroupSizeResolver group_sizes(const Graph& g);

// Whether `v` may be laid out non-contiguously at run time (types are contiguous shapes, but a
// view's memory is its base's): its strides followed from its base through the view chain
// (Note [strides through a view chain] in graph.cpp) are not contiguous. Transposes that cancel
// (permute(permute(x, [1, 0]), [1, 0])) are contiguous; a reshape of a strided value, and any view
// op not followed (expand, as_strided, ...), count as strided. False for values that own their
// buffer.
bool maybe_strided(const Value* v);

}  // namespace symmflow::ir
