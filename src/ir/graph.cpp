// The graph's structure and its mutation: types and layouts printed, nodes, groups, values and
// their names, inputs, outputs, writebacks, inserting, erasing, reordering nodes, replacing uses.
// Contract: use lists always match the arguments of the nodes in the graph; value names are
// unique; position() is the node's index in nodes(). The builder (add_op, add_functional,
// add_copy, add_fused: binding and typing) is builder.cpp.
#include "symmflow/ir/graph.hpp"

#include <algorithm>
#include <unordered_set>

#include <fmt/format.h>

namespace symmflow::ir {

std::string TensorType::str() const {
  return fmt::format("{}{}", dtype_name(dtype), shape_str(shape));
}

std::string Layout::str() const {
  switch (pool) {
    case Pool::unassigned:
      return "?";
    case Pool::regular:
      return "regular";
    case Pool::symm:
      return fmt::format("symm[{}]", group);
  }
  return "?";
}

namespace {

bool is_contiguous(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides) {
  int64_t want = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] == 1) continue;  // a dim of one element has any stride
    if (strides[i] != want) return false;
    want *= shape[i];
  }
  return true;
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;)
    strides[i - 1] = strides[i] * std::max<int64_t>(shape[i], 1);
  return strides;
}

}  // namespace

// Note [strides through a view chain]: the strides of `v` are followed from its base (a buffer
// of its own, contiguous) through every view op, so that views that only look strided are known
// contiguous: AOT autograd's backward transposes a weight's gradient twice
// (permute(permute(mm, [1, 0]), [1, 0])) before the data-parallel all-reduce, and taking that for
// a strided view copied every gradient (issue 38). A dim moved by permute, t or transpose keeps
// its stride; view, reshape, unsqueeze and squeeze keep a contiguous value contiguous (and are
// taken as strided otherwise: a reshape of a strided value may be a copy, and it is not followed);
// slices and splits along the first dim (step 1) keep it contiguous; any other view op counts as
// strided.
bool maybe_strided(const Value* v) {
  std::vector<std::pair<const Node*, const Value*>> chain;  // from v back to its base
  for (const Node* p = v->producer(); p && p->kind() == NodeKind::op; p = v->producer()) {
    const int alias = p->op()->aliases().output_alias(size_t(v->index()));
    if (alias < 0) break;
    const Arg& base = p->args()[size_t(alias)];
    if (base.kind != Arg::Kind::value) return true;
    chain.emplace_back(p, v);
    v = base.value;
  }
  std::vector<int64_t> shape = v->type().shape, strides = contiguous_strides(shape);
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    const Node* p = it->first;
    const std::vector<int64_t>& out = it->second->type().shape;
    const std::string& op = p->op()->name();
    for (size_t i = 0; i < p->args().size(); ++i) {  // shapes and dims are literals in the IR
      if (int64_t(i) != p->op()->aliases().output_alias(size_t(it->second->index())) &&
          p->args()[i].kind != Arg::Kind::literal)
        return true;
    }
    const auto dim_of = [&](size_t i) {
      int64_t d = p->args()[i].literal.to_int();
      return d < 0 ? d + int64_t(shape.size()) : d;
    };
    if (op == "aten::permute") {
      const std::vector<int64_t>& dims = p->args()[1].literal.to_int_list();
      if (dims.size() != shape.size()) return true;
      std::vector<int64_t> moved;
      for (int64_t d : dims) {
        d = d < 0 ? d + int64_t(shape.size()) : d;
        if (d < 0 || d >= int64_t(shape.size())) return true;
        moved.push_back(strides[size_t(d)]);
      }
      strides = std::move(moved);
    } else if (op == "aten::t" || op == "aten::transpose.int") {
      if (shape.size() < 2) {
        // t of a vector or a scalar is itself
      } else if (op == "aten::t") {
        std::swap(strides[0], strides[1]);
      } else {
        int64_t a = dim_of(1), b = dim_of(2);
        const int64_t n = int64_t(shape.size());
        if (a < 0 || b < 0 || a >= n || b >= n) return true;
        std::swap(strides[size_t(a)], strides[size_t(b)]);
      }
    } else if (op == "aten::view" || op == "aten::_unsafe_view" || op == "aten::reshape" ||
               op == "aten::unsqueeze" || op == "aten::squeeze.dims") {
      if (!is_contiguous(shape, strides)) return true;
      strides = contiguous_strides(out);
    } else if (op == "aten::slice.Tensor") {
      if (dim_of(1) != 0 || p->args()[4].literal.to_int() != 1) return true;
    } else if (op == "aten::split_with_sizes" || op == "aten::split.Tensor") {
      if (dim_of(2) != 0) return true;  // pieces along the first dim keep the strides
    } else {
      return true;
    }
    shape = out;
    if (strides.size() != shape.size()) return true;
  }
  return !is_contiguous(shape, strides);
}

std::vector<Value*> Node::inputs() const {
  std::vector<Value*> out;
  for (const Arg& a : args_) {
    if (a.kind == Arg::Kind::value) out.push_back(a.value);
    if (a.kind == Arg::Kind::value_list) out.insert(out.end(), a.values.begin(), a.values.end());
  }
  return out;
}

size_t Node::result_count() const {
  if (kind_ != NodeKind::functional) return outputs_.size();
  return outputs_.size() - op_->aliases().written_args.size();
}

std::string Node::display_name() const {
  switch (kind_) {
    case NodeKind::op:
      return op_->name();
    case NodeKind::functional:
      return fmt::format("functional<{}>", op_->name());
    case NodeKind::fused:
      return "fused";
    case NodeKind::copy:
      return "copy";
  }
  return "?";
}

std::string Node::group() const {
  if (!op_ || op_->group_arg().empty()) return "";
  int i = op_->schema().arg_index(op_->group_arg());
  const Arg& a = args_[size_t(i)];
  return a.kind == Arg::Kind::literal && a.literal.is_string() ? a.literal.to_string() : "";
}

void Node::set_arg(size_t i, Arg a) {
  auto drop = [this](Value* v) {
    auto it = std::find(v->uses_.begin(), v->uses_.end(), this);
    if (it != v->uses_.end()) v->uses_.erase(it);
  };
  Arg& old = args_.at(i);
  if (old.kind == Arg::Kind::value) drop(old.value);
  for (Value* v : old.values) drop(v);
  if (a.kind == Arg::Kind::value) a.value->uses_.push_back(this);
  for (Value* v : a.values) v->uses_.push_back(this);
  old = std::move(a);
}

Graph::Graph(std::string name, int world_size) : name_(std::move(name)), world_size_(world_size) {
  groups_.push_back({"world", 0, {}, {}});
  group_index_["world"] = 0;
}

Graph::~Graph() = default;

// Note [explicit groups]: `group dp = {0, 2}, {1, 3}` names several subgroups at once, as
// `group tp(2)` does for consecutive blocks; an op on "dp" runs in the subgroup of each rank.
// The compiler sizes buffers and shape functions by one group size per name, so every subgroup
// has the same size. Members are ranks of the world, each in at most one subgroup (a rank in two
// would not know which to run in); member order is the group order (a rank's index in its
// subgroup, which rank-relative arguments count in). A rank may be in no subgroup, but the
// program is SPMD (every rank runs every op), so an op on a group that leaves ranks out is
// refused by the verifier rather than skipped: skipping would make those ranks' results differ
// silently. Declaring such a group is allowed (it is printed and explained, e.g. for one
// world size of several).
void Graph::add_group(GroupDecl g) {
  SF_CHECK(!find_group(g.name), "group '{}' is declared twice", g.name);
  SF_CHECK(g.block >= 0, "group '{}': block size {} must be positive", g.name, g.block);
  if (g.block > 0) {
    SF_CHECK(g.subgroups.empty(), "group '{}': both a block size and subgroups", g.name);
    SF_CHECK(world_size_ % g.block == 0,
             "group '{}': blocks of {} ranks do not divide the world of {} ranks", g.name, g.block,
             world_size_);
  }
  std::vector<int> subgroup_of(size_t(std::max(world_size_, 0)), -1);
  for (size_t i = 0; i < g.subgroups.size(); ++i) {
    const std::vector<int>& members = g.subgroups[i];
    SF_CHECK(!members.empty(), "group '{}': subgroup {} is empty", g.name, i);
    SF_CHECK(members.size() == g.subgroups[0].size(),
             "group '{}': subgroup {} has {} ranks but subgroup 0 has {} (all subgroups of a group "
             "have one size)",
             g.name, i, members.size(), g.subgroups[0].size());
    for (int r : members) {
      SF_CHECK(r >= 0 && r < world_size_, "group '{}': rank {} is outside the world of {} ranks",
               g.name, r, world_size_);
      int& at = subgroup_of[size_t(r)];
      SF_CHECK(at < 0, "group '{}': rank {} is in subgroup {} and again in subgroup {}", g.name, r,
               at, i);
      at = int(i);
    }
  }
  group_index_[g.name] = groups_.size();
  groups_.push_back(std::move(g));
}

int GroupDecl::size(int world_size) const {
  if (!subgroups.empty()) return int(subgroups[0].size());
  return block > 0 ? block : world_size;
}

std::vector<int> GroupDecl::members_of(int rank, int world_size) const {
  std::vector<int> members;
  if (rank < 0 || rank >= world_size) return members;
  if (!subgroups.empty()) {
    for (const std::vector<int>& s : subgroups) {
      if (std::find(s.begin(), s.end(), rank) != s.end()) return s;
    }
    return members;
  }
  int n = size(world_size);
  for (int r = rank / n * n; r < rank / n * n + n; ++r) members.push_back(r);
  return members;
}

std::vector<int> GroupDecl::ranks_outside(int world_size) const {
  std::vector<int> out;
  if (subgroups.empty()) return out;
  std::vector<bool> in(size_t(std::max(world_size, 0)), false);
  for (const std::vector<int>& s : subgroups) {
    for (int r : s) {
      if (r >= 0 && r < world_size) in[size_t(r)] = true;
    }
  }
  for (int r = 0; r < world_size; ++r) {
    if (!in[size_t(r)]) out.push_back(r);
  }
  return out;
}

const GroupDecl* Graph::find_group(std::string_view name) const {
  auto it = group_index_.find(name);
  return it == group_index_.end() ? nullptr : &groups_[it->second];
}

void Graph::set_hosts(std::vector<int> host_of_rank) {
  SF_CHECK(host_of_rank.empty() || int(host_of_rank.size()) == world_size_,
           "hosts: {} host ids for a world of {} ranks (one per rank)", host_of_rank.size(),
           world_size_);
  for (int h : host_of_rank) SF_CHECK(h >= 0, "hosts: host id {} is negative", h);
  hosts_ = std::move(host_of_rank);
}

int Graph::group_size(std::string_view name) const {
  const GroupDecl* g = find_group(name);
  SF_CHECK(g, "unknown group '{}' (declare it with `group {}` before the graph)", name, name);
  return g->size(world_size_);
}

std::string Graph::fresh_name(std::string_view hint) {
  std::string base(hint.empty() ? "v" : hint);
  if (!by_name_.count(base)) return base;
  int& n = name_counters_[base];
  std::string candidate;
  do {
    candidate = fmt::format("{}_{}", base, ++n);
  } while (by_name_.count(candidate));
  return candidate;
}

Value* Graph::find_value(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

Value* Graph::new_value(std::string name, TensorType type, Node* producer, int index) {
  auto v = std::make_unique<Value>();
  v->name_ = fresh_name(name);
  v->type_ = std::move(type);
  v->producer_ = producer;
  v->index_ = index;
  by_name_[v->name_] = v.get();
  values_.push_back(std::move(v));
  return values_.back().get();
}

Value* Graph::add_input(const std::string& name, TensorType type) {
  SF_CHECK(!by_name_.count(name), "input '{}' is defined twice", name);
  Value* v = new_value(name, std::move(type), nullptr, int(inputs_.size()));
  inputs_.push_back(v);
  return v;
}

void Graph::set_outputs(std::vector<Value*> outs) {
  outputs_ = std::move(outs);
}

void Graph::add_writeback(Value* input, Value* value) {
  SF_CHECK(input->is_input() && input->producer() == nullptr,
           "writeback target '{}' is not a graph input", input->name());
  SF_CHECK(input->type() == value->type(), "writeback {} = {}: types {} and {} differ",
           input->name(), value->name(), input->type().str(), value->type().str());
  auto [it, added] = writeback_index_.emplace(input, writebacks_.size());
  if (!added) {
    writebacks_[it->second].value = value;
    return;
  }
  writebacks_.push_back({input, value});
}

Node* Graph::insert(std::unique_ptr<Node> n, Node* before) {
  n->owner_ = this;
  Node* raw = n.get();
  for (const Arg& a : raw->args_) {
    if (a.kind == Arg::Kind::value) a.value->uses_.push_back(raw);
    for (Value* v : a.values) v->uses_.push_back(raw);
  }
  owned_.push_back(std::move(n));
  if (before) {
    order_.insert(order_.begin() + std::ptrdiff_t(position(before)), raw);
    positions_valid_ = false;
  } else {
    // Appending moves no other node: positions stay valid (keeps passes that append and then
    // reorder once linear).
    raw->position_ = order_.size();
    order_.push_back(raw);
  }
  return raw;
}

void Graph::rename(Value* v, const std::string& name) {
  if (v->name_ == name) return;
  SF_CHECK(!by_name_.count(name), "'{}' is already defined (values are assigned once)", name);
  by_name_.erase(v->name_);
  v->name_ = name;
  by_name_[name] = v;
}

void Graph::erase(Node* node) {
  for (Value* v : node->outputs_) {
    bool written_back = std::any_of(writebacks_.begin(), writebacks_.end(),
                                    [v](const Writeback& w) { return w.value == v; });
    SF_CHECK(v->uses_.empty() && !written_back &&
                 std::find(outputs_.begin(), outputs_.end(), v) == outputs_.end(),
             "cannot erase {}: its output '{}' is still used", node->display_name(), v->name());
  }
  for (size_t i = 0; i < node->args_.size(); ++i) node->set_arg(i, Arg::of_literal(None{}));
  size_t at = position(node);
  order_.erase(order_.begin() + std::ptrdiff_t(at));
  for (Value* v : node->outputs_) by_name_.erase(v->name());
  // Erasing the last node moves no other node: positions stay valid.
  if (at != order_.size()) positions_valid_ = false;
}

void Graph::reorder(std::vector<Node*> order) {
  SF_CHECK(order.size() == order_.size(), "reorder: {} nodes given for a graph of {}", order.size(),
           order_.size());
  order_ = std::move(order);
  positions_valid_ = false;
}

void Graph::replace_uses(Value* from, Value* to, size_t from_position) {
  // Note [use order]: users are visited in use-list order (each once), never in address order, so
  // `to`'s use list, and the passes' messages that name "the first later reader", do not depend
  // on where the allocator put the nodes.
  std::vector<Node*> users;
  std::unordered_set<const Node*> seen;
  for (Node* n : from->uses_) {
    if (seen.insert(n).second) users.push_back(n);
  }
  for (Node* n : users) {
    if (position(n) < from_position) continue;
    for (size_t i = 0; i < n->args_.size(); ++i) {
      Arg a = n->args_[i];
      bool changed = false;
      if (a.kind == Arg::Kind::value && a.value == from) {
        a.value = to;
        changed = true;
      }
      for (Value*& v : a.values) {
        if (v == from) {
          v = to;
          changed = true;
        }
      }
      if (changed) n->set_arg(i, std::move(a));
    }
  }
  for (Value*& v : outputs_) {
    if (v == from) v = to;
  }
  for (Writeback& w : writebacks_) {
    if (w.value == from) w.value = to;
  }
}

void Graph::renumber() const {
  for (size_t i = 0; i < order_.size(); ++i) order_[i]->position_ = i;
  positions_valid_ = true;
}

size_t Graph::position(const Node* n) const {
  if (!positions_valid_) renumber();
  SF_ASSERT(n->position_ < order_.size() && order_[n->position_] == n);
  return n->position_;
}

}  // namespace symmflow::ir
