// The op registry: every op's schema, symm args, group argument, variant links, tags, shape
// function and kernels per backend. Libraries add to it (see library.hpp); lookups are by
// qualified name ("aten::add.Tensor").
//
// Note [op tags]: every property a pass or exec asks of an op is a tag (in the spirit of torch.Tag
// and MLIR traits), never a list of op names. Some tags are inferred from what the registry
// already knows, and cannot be set by hand:
//   collective    the op has a group argument (`str group_name`, or register_group_arg's): it
//                 talks to the ranks of a group (symm_mem::barrier, every all-reduce, put_signal)
//   peer_written  a symm arg the op writes (register_symm_mem_args names a `Tensor(a!)`): peers
//                 store into it or load it (put_signal's dst, collective_permute_out's out,
//                 two_shot_all_reduce_'s input); each run starts with a barrier. A one_sided op's
//                 peers may do so while this rank is in another step or run, so plan_memory owns
//                 its buffer for the whole run; any other op must let peers touch it only between
//                 its opening and closing synchronisation of the group, and its buffer keeps its
//                 ordinary live range (Note [synchronised peer writes], passes/live_ranges.cpp)
//   in_place      mutates an argument and is not an out variant (add_.Tensor, put_signal, get)
//   out           writes out arguments (`Tensor(a!) out`, add.out)
//   view          a return aliases an argument without writing it (view, slice.Tensor)
// The others are declared where the op is defined (Library::def's `tags`, or Library::tag):
//   pointwise     elementwise over same-shaped operands; fuse_pointwise fuses functional ones
//   one_sided     a communication op that does not synchronise its group (no barrier over all
//                 ranks inside it): get, put_signal, wait_signal
//   peer_read     peers load one of its symm args after the op returned, with no barrier closing
//                 the op (get's src): plan_memory keeps it live until the group next synchronises
//   signal        peers put into its written symm arg as soon as they pass the group's barrier
//                 before it (put_signal, wait_signal): a copy of that arg goes before the barrier
//   barrier       synchronises its group, moves no data (symm_mem::barrier); copies go before it
// one_sided, peer_read, signal and barrier need a group argument; declaring an inferred tag is
// refused. Plugins tag their ops the same way.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "symmflow/ops/value.hpp"
#include "symmflow/schema/schema.hpp"

namespace symmflow {

enum class Backend { cpu, cuda };
const char* backend_name(Backend b);

class OpDef;

// Note [op tags] above.
enum class Tag : uint32_t {
  pointwise = 1u << 0,
  collective = 1u << 1,
  peer_written = 1u << 2,
  peer_read = 1u << 3,
  one_sided = 1u << 4,
  signal = 1u << 5,
  barrier = 1u << 6,
  in_place = 1u << 7,
  out = 1u << 8,
  view = 1u << 9,
};
inline constexpr Tag kAllTags[] = {Tag::pointwise, Tag::collective, Tag::peer_written,
                                   Tag::peer_read, Tag::one_sided,  Tag::signal,
                                   Tag::barrier,   Tag::in_place,   Tag::out,
                                   Tag::view};
const char* tag_name(Tag t);  // "peer_written"

// A set of tags: TagSet{Tag::pointwise, Tag::in_place}.
class TagSet {
 public:
  constexpr TagSet() = default;
  constexpr TagSet(std::initializer_list<Tag> tags) {
    for (Tag t : tags) bits_ |= uint32_t(t);
  }
  constexpr bool has(Tag t) const { return (bits_ & uint32_t(t)) != 0; }
  constexpr bool empty() const { return bits_ == 0; }
  constexpr TagSet& operator|=(TagSet o) {
    bits_ |= o.bits_;
    return *this;
  }
  constexpr TagSet& operator|=(Tag t) {
    bits_ |= uint32_t(t);
    return *this;
  }
  constexpr bool operator==(const TagSet&) const = default;
  constexpr uint32_t bits() const { return bits_; }
  std::string str() const;  // "pointwise, in_place" in declaration order; "" when empty

 private:
  uint32_t bits_ = 0;
};

// What a kernel sees. `args` are bound to the schema (defaults filled, one per schema argument).
// `outputs` has one entry per result (per schema return; a list return has one per element, as
// many as the shape function gives for the call, Note [list returns] in schema.hpp): for a fresh (non-aliasing) return the dispatcher has
// already allocated a contiguous tensor from the shape function, which the kernel fills; for a
// return that aliases an argument (a view) the kernel sets the Value itself.
struct KernelCall {
  const OpDef& op;
  std::span<const Value> args;
  std::vector<Value>& outputs;
  // The launch record's slot for what the kernel resolves from its literal arguments (a
  // collective's group and reduce op: Note [prepared collectives] in
  // kernels/cpu/collectives/args.hpp), kept from the record's first call to its last; null for an
  // eager call, which resolves per call. A kernel keeps one type of state in it (the record drops
  // it when its kernel changes).
  std::shared_ptr<void>* state = nullptr;

  const Value& arg(std::string_view name) const;
  const Value& arg(size_t i) const { return args[i]; }
  const Tensor& out(size_t i) const { return outputs.at(i).to_tensor(); }
};
using Kernel = std::function<void(KernelCall&)>;

// Note [kernel checks]: why a backend's kernel refuses these bound arguments (tensors may be
// meta tensors), or "" when it takes them: a kernel that covers fewer dtypes than the op's shape
// function (cuda's pointwise kernels take floats) declares it, so that a compiler asks before it
// places a node on that backend instead of failing at run time (the torch bridge leaves such a
// node to PyTorch, named). An op's kernel without a check takes whatever the shape function does.
// A family of kernels declares one check for its whole namespace on its backend
// (Registry::backend_check: the reductions' dtypes, Note [reduction dtypes]); it runs after the
// op's own check.
class OpDef;
using KernelCheck = std::function<std::string(const OpDef& op, std::span<const Value> args)>;

// Computes the dtype and shape of every return from the (bound) arguments; tensors among the
// arguments may be meta tensors. Throws InvalidUsage when the arguments are inconsistent.
using ShapeFn = std::function<std::vector<TensorSpec>(std::span<const Value> args)>;

// How a communication op moves data between the ranks of its group, in words, for `explain`
// (kernels::collective_algorithm prints it): declared with the op (Library::exchange), so a new
// collective needs no entry elsewhere. Size-dependent all-reduce choices are not described here
// but computed (kernels/algorithm.hpp).
struct OpExchange {
  std::string algorithm;  // "pull", "push+signal", "one_shot+norm"
  std::string why;        // "barrier, read every peer's input, barrier"
};

class OpDef {
 public:
  explicit OpDef(FunctionSchema schema);

  const FunctionSchema& schema() const { return schema_; }
  const std::string& name() const { return name_; }  // qualified, with overload
  const AliasAnalysis& aliases() const { return aliases_; }
  const std::vector<std::string>& symm_args() const { return symm_args_; }
  const std::string& group_arg() const { return group_arg_; }  // empty when the op has none
  // Note [op tags]: declared and inferred ones together.
  TagSet tags() const;
  bool has(Tag t) const { return tags().has(t); }
  bool has_shape_fn() const { return bool(shape_fn_); }
  const ShapeFn& shape_fn() const { return shape_fn_; }
  const Kernel* kernel(Backend b) const;
  std::vector<Backend> backends() const;
  // Note [kernel checks]: "" when backend `b` has a kernel that takes these bound arguments,
  // else why not ("has no cuda kernel", or the check's reason).
  std::string kernel_refusal(Backend b, std::span<const Value> args) const;

  // Variant links, filled when the registry finalizes a namespace; empty when absent.
  const std::string& functional_variant() const { return functional_; }
  const std::string& inplace_variant() const { return inplace_; }
  const std::string& out_variant() const { return out_; }
  // The same links as handles (null when absent), valid while the registry lives.
  const OpDef* functional_op() const { return functional_op_; }
  const OpDef* out_op() const { return out_op_; }
  // Declared with Library::exchange; an out variant without its own has its functional op's.
  // Null when neither declared one.
  const OpExchange* exchange() const;

 private:
  friend class Registry;
  friend class Library;
  FunctionSchema schema_;
  std::string name_;
  AliasAnalysis aliases_;
  std::vector<std::string> symm_args_;
  std::string group_arg_;
  ShapeFn shape_fn_;
  std::map<Backend, Kernel> kernels_;
  std::map<Backend, KernelCheck> checks_;
  // The checks of every kernel of this op's namespace per backend (Registry::backend_check),
  // owned by the registry.
  const std::map<Backend, std::vector<KernelCheck>>* backend_checks_ = nullptr;
  std::string functional_, inplace_, out_;
  const OpDef* functional_op_ = nullptr;
  const OpDef* out_op_ = nullptr;
  TagSet declared_tags_;
  std::optional<OpExchange> exchange_;
};

class Registry {
 public:
  // The process-wide registry; pending static registrations run on first access.
  static Registry& global();

  const OpDef* find(std::string_view qualified_name) const;
  // Throws InvalidUsage "unknown op 'x'" (with the closest names) when absent.
  const OpDef& get(std::string_view qualified_name) const;
  // Every overload of "ns::name", in definition order.
  std::vector<const OpDef*> overloads(std::string_view ns_and_name) const;
  std::vector<const OpDef*> ops(std::string_view ns = {}) const;  // sorted by name
  std::vector<std::string> namespaces() const;

  // Mutation, used by Library. Each throws InvalidUsage naming the op and argument on a rule
  // violation and leaves the registry unchanged.
  OpDef& def(std::string_view ns, std::string_view schema_text, ShapeFn shape_fn,
             TagSet tags = {});
  // Adds declared tags (Note [op tags]); refuses inferred tags and, for one_sided, peer_read,
  // signal and barrier, an op without a group argument.
  void tag(std::string_view qualified_name, TagSet tags);
  // Declares how the op exchanges data (OpExchange); refused for an op without a group argument.
  void exchange(std::string_view qualified_name, OpExchange exchange);
  void impl(std::string_view qualified_name, Backend backend, Kernel kernel);
  // Declares what `backend`'s kernel of the op takes (Note [kernel checks]); the kernel must be
  // registered first.
  void kernel_check(std::string_view qualified_name, Backend backend, KernelCheck check);
  // A check of every kernel of namespace `ns` on `backend`, defined or not yet (Note [kernel
  // checks]): what a whole family of kernels refuses, such as the dtypes reductions take.
  void backend_check(std::string_view ns, Backend backend, KernelCheck check);
  void register_symm_mem_args(std::string_view qualified_name, std::vector<std::string> names);
  void register_group_arg(std::string_view qualified_name, std::string name);
  // Links functional, in-place and out variants within `ns` (re-run after each library loads).
  void link_variants(std::string_view ns);

 private:
  Registry() = default;
  OpDef& get_mutable(std::string_view qualified_name);
  void tag_locked(OpDef& op, TagSet tags);
  std::map<std::string, std::unique_ptr<OpDef>, std::less<>> ops_;
  // "ns::name" -> its overloads in definition order
  std::map<std::string, std::vector<const OpDef*>, std::less<>> overloads_;
  // namespace -> backend -> checks (map nodes are stable: ops point at theirs)
  std::map<std::string, std::map<Backend, std::vector<KernelCheck>>, std::less<>> backend_checks_;
};

}  // namespace symmflow
