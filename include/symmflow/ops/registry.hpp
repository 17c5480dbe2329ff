// The op registry: every op's schema, symm args, group argument, variant links, shape function and
// kernels per backend. Libraries add to it (see library.hpp); lookups are by qualified name
// ("aten::add.Tensor").
#pragma once

#include <functional>
#include <map>
#include <memory>
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

// What a kernel sees. `args` are bound to the schema (defaults filled, one per schema argument).
// `outputs` has one entry per schema return: for a fresh (non-aliasing) return the dispatcher has
// already allocated a contiguous tensor from the shape function, which the kernel fills; for a
// return that aliases an argument (a view) the kernel sets the Value itself.
struct KernelCall {
  const OpDef& op;
  std::span<const Value> args;
  std::vector<Value>& outputs;

  const Value& arg(std::string_view name) const;
  const Value& arg(size_t i) const { return args[i]; }
  const Tensor& out(size_t i) const { return outputs.at(i).to_tensor(); }
};
using Kernel = std::function<void(KernelCall&)>;

// Computes the dtype and shape of every return from the (bound) arguments; tensors among the
// arguments may be meta tensors. Throws InvalidUsage when the arguments are inconsistent.
using ShapeFn = std::function<std::vector<TensorSpec>(std::span<const Value> args)>;

class OpDef {
 public:
  explicit OpDef(FunctionSchema schema);

  const FunctionSchema& schema() const { return schema_; }
  const std::string& name() const { return name_; }  // qualified, with overload
  const AliasAnalysis& aliases() const { return aliases_; }
  const std::vector<std::string>& symm_args() const { return symm_args_; }
  const std::string& group_arg() const { return group_arg_; }  // empty when the op has none
  bool has_shape_fn() const { return bool(shape_fn_); }
  const ShapeFn& shape_fn() const { return shape_fn_; }
  const Kernel* kernel(Backend b) const;
  std::vector<Backend> backends() const;

  // Variant links, filled when the registry finalizes a namespace; empty when absent.
  const std::string& functional_variant() const { return functional_; }
  const std::string& inplace_variant() const { return inplace_; }
  const std::string& out_variant() const { return out_; }

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
  std::string functional_, inplace_, out_;
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
  OpDef& def(std::string_view ns, std::string_view schema_text, ShapeFn shape_fn);
  void impl(std::string_view qualified_name, Backend backend, Kernel kernel);
  void register_symm_mem_args(std::string_view qualified_name, std::vector<std::string> names);
  void register_group_arg(std::string_view qualified_name, std::string name);
  // Links functional, in-place and out variants within `ns` (re-run after each library loads).
  void link_variants(std::string_view ns);

 private:
  Registry() = default;
  OpDef& get_mutable(std::string_view qualified_name);
  std::map<std::string, std::unique_ptr<OpDef>, std::less<>> ops_;
  // "ns::name" -> its overloads in definition order
  std::map<std::string, std::vector<const OpDef*>, std::less<>> overloads_;
};

}  // namespace symmflow
