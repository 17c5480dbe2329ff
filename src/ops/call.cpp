// Eager dispatch. Contract: bind_args maps positional and keyword arguments onto the schema
// (defaults filled, ints accepted for float, a number for Scalar, None only where optional) and
// names op and argument on any mismatch; call_bound runs the shape function, allocates each fresh
// return as a contiguous tensor, and runs the kernel of the arguments' backend: cuda when any
// tensor argument is on a GPU (so copy_ between host and GPU runs the GPU kernel whichever side
// it writes), else cpu; a factory (no tensor argument) runs where its preset output lives; an op
// with no tensor at all (symm_mem::barrier) runs on the thread's device (thread_device()). Fresh
// returns are allocated on that device.
#include "symmflow/ops/call.hpp"

#include <algorithm>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "symmflow/ops/reduce_ops.hpp"

namespace symmflow {

namespace {

Value default_to_value(const DefaultValue& d, const Type& type) {
  using K = DefaultValue::Kind;
  switch (d.kind) {
    case K::None: return None{};
    case K::Int:
      if (type.kind == TypeKind::Float) return double(d.int_value);
      return d.int_value;
    case K::Float: return d.float_value;
    case K::Bool: return d.bool_value;
    case K::Str: return d.str_value;
    case K::IntList:
      if (type.kind == TypeKind::Float) return std::vector<double>(d.int_list.begin(), d.int_list.end());
      return d.int_list;
    case K::FloatList: return d.float_list;
    case K::Enum:
      if (type.kind == TypeKind::ScalarType) {
        if (auto t = parse_dtype(d.str_value)) return *t;
      }
      return d.str_value;
  }
  return None{};
}

// Converts `v` to the schema type when it fits (int for float, scalar int to a fixed-size int
// list); nullopt when it does not.
std::optional<Value> coerce(const Value& v, const Type& t) {
  if (v.is_none()) return t.is_optional() ? std::optional<Value>(v) : std::nullopt;
  if (t.is_list) {
    switch (t.kind) {
      case TypeKind::Int:
      case TypeKind::SymInt:
        if (v.is_int_list()) return v;
        if (v.is_int() && t.list_size) return Value(std::vector<int64_t>(size_t(*t.list_size), v.to_int()));
        if (v.is_int()) return Value(std::vector<int64_t>{v.to_int()});
        return std::nullopt;
      case TypeKind::Float:
        if (v.is_double_list()) return v;
        if (v.is_int_list()) {
          const auto& l = v.to_int_list();
          return Value(std::vector<double>(l.begin(), l.end()));
        }
        return std::nullopt;
      case TypeKind::Tensor:
        return v.is_tensor_list() ? std::optional<Value>(v) : std::nullopt;
      default: return std::nullopt;
    }
  }
  switch (t.kind) {
    case TypeKind::Tensor: return v.is_tensor() ? std::optional<Value>(v) : std::nullopt;
    case TypeKind::Int:
    case TypeKind::SymInt:
      return v.is_int() ? std::optional<Value>(v) : std::nullopt;
    case TypeKind::Float:
      if (v.is_double()) return v;
      if (v.is_int()) return Value(double(v.to_int()));
      return std::nullopt;
    case TypeKind::Bool: return v.is_bool() ? std::optional<Value>(v) : std::nullopt;
    case TypeKind::Str:
    case TypeKind::Device:
    case TypeKind::Layout:
    case TypeKind::MemoryFormat:
      return v.is_string() ? std::optional<Value>(v) : std::nullopt;
    case TypeKind::Scalar: return v.is_number() ? std::optional<Value>(v) : std::nullopt;
    case TypeKind::ScalarType: return v.is_dtype() ? std::optional<Value>(v) : std::nullopt;
  }
  return std::nullopt;
}

// The first GPU among the defined tensors of `values`, else cpu when there is a tensor (meta
// counts as cpu), else nothing.
std::optional<Device> device_of(std::span<const Value> values) {
  std::optional<Device> found;
  auto see = [&](const Tensor& t) {
    if (!t.defined() || (found && found->type == DeviceType::cuda)) return;
    found = t.device().type == DeviceType::cuda ? t.device() : Device::cpu();
  };
  for (const Value& v : values) {
    if (v.is_tensor()) see(v.to_tensor());
    if (v.is_tensor_list()) {
      for (const Tensor& t : v.to_tensor_list()) see(t);
    }
  }
  return found;
}

constexpr std::string_view kReduceOps[] = {"sum", "avg", "max", "min"};

}  // namespace

std::span<const std::string_view> reduce_op_names() { return kReduceOps; }

bool is_reduce_op(std::string_view name) {
  return std::find(std::begin(kReduceOps), std::end(kReduceOps), name) != std::end(kReduceOps);
}

std::vector<Value> bind_args(const OpDef& op, const std::vector<Value>& args,
                             const KwArgs& kwargs) {
  const FunctionSchema& s = op.schema();
  size_t positional = 0;
  while (positional < s.args.size() && !s.args[positional].kwarg_only) ++positional;
  SF_CHECK(args.size() <= positional, "{}: takes {} positional arguments but {} were given",
           op.name(), positional, args.size());
  std::vector<std::optional<Value>> bound(s.args.size());
  for (size_t i = 0; i < args.size(); ++i) bound[i] = args[i];
  for (const auto& [name, v] : kwargs) {
    int i = s.arg_index(name);
    SF_CHECK(i >= 0, "{}: unexpected keyword argument '{}'", op.name(), name);
    SF_CHECK(!bound[size_t(i)], "{}: argument '{}' given twice", op.name(), name);
    bound[size_t(i)] = v;
  }
  std::vector<Value> out;
  out.reserve(s.args.size());
  for (size_t i = 0; i < s.args.size(); ++i) {
    const Argument& a = s.args[i];
    if (!bound[i]) {
      SF_CHECK(a.default_value.has_value(), "{}: missing argument '{}' ({})", op.name(), a.name,
               a.type.str());
      out.push_back(default_to_value(*a.default_value, a.type));
      continue;
    }
    std::optional<Value> v = coerce(*bound[i], a.type);
    SF_CHECK(v.has_value(), "{}: argument '{}' expects {} but got {} ({})", op.name(), a.name,
             a.type.str(), bound[i]->kind_name(), bound[i]->str());
    if (v->is_tensor()) {
      SF_CHECK(v->to_tensor().defined(), "{}: argument '{}' is an undefined tensor", op.name(),
               a.name);
    }
    out.push_back(std::move(*v));
  }
  // Note [reduce ops]
  const int r = s.arg_index("reduce_op");
  if (r >= 0 && out[size_t(r)].is_string() && !is_reduce_op(out[size_t(r)].to_string())) {
    invalid_usage("{}: unknown reduce_op '{}' (valid: {})", op.name(), out[size_t(r)].to_string(),
                  fmt::join(reduce_op_names(), ", "));
  }
  return out;
}

const Kernel& kernel_for(const OpDef& op, std::span<const Value> bound,
                         std::span<const Value> outputs, Device& device) {
  // A factory (no tensor argument) runs where its preset output lives.
  const bool tensorless = op.schema().returns.empty();
  device = device_of(bound).value_or(
      device_of(outputs).value_or(tensorless ? thread_device() : Device::cpu()));
  Backend backend = device.type == DeviceType::cuda ? Backend::cuda : Backend::cpu;
  const Kernel* kernel = op.kernel(backend);
  SF_CHECK(kernel, "op '{}' has no {} kernel", op.name(), backend_name(backend));
  return *kernel;
}

void call_bound_into(const OpDef& op, std::span<const Value> bound, std::vector<Value>& outputs) {
  Device device;
  const Kernel& kernel = kernel_for(op, bound, outputs, device);
  call_kernel_into(op, kernel, device, bound, outputs);
}

void call_kernel_into(const OpDef& op, const Kernel& kernel, Device device,
                      std::span<const Value> bound, std::vector<Value>& outputs,
                      std::shared_ptr<void>* state) {
  // Note [list returns] (schema.hpp): a list return has as many results as the shape function
  // gives, unless the caller sized `outputs` already (a plan knows its step's results).
  const AliasAnalysis& al = op.aliases();
  std::optional<std::vector<TensorSpec>> specs;
  auto shapes = [&]() -> const std::vector<TensorSpec>& {
    if (!specs) specs = op.shape_fn()(bound);
    return *specs;
  };
  const size_t count = al.list_return && !outputs.empty()
                           ? outputs.size()
                           : al.output_count(al.list_return ? shapes().size() : 0);
  outputs.resize(count);
  bool all_set = true;
  for (size_t r = 0; r < count; ++r) {
    all_set = all_set && (outputs[r].is_tensor() || al.output_alias(r) >= 0);
  }
  if (!all_set) {
    SF_CHECK(shapes().size() == count, "op '{}': shape function gave {} results for {} returns",
             op.name(), shapes().size(), count);
    for (size_t r = 0; r < count; ++r) {
      if (al.output_alias(r) >= 0 || outputs[r].is_tensor()) continue;
      // Kernels write every element; fresh returns live on the device of the arguments.
      outputs[r] = Tensor::uninitialized((*specs)[r].shape, (*specs)[r].dtype, device);
    }
  }
  KernelCall kc{op, bound, outputs, state};
  kernel(kc);
  if (al.list_return) {
    SF_CHECK(outputs.size() == count, "op '{}': kernel gave {} results for {} expected", op.name(),
             outputs.size(), count);
  }
}

std::vector<Value> call_bound(const OpDef& op, std::vector<Value> bound) {
  std::vector<Value> outputs;
  call_bound_into(op, bound, outputs);
  return outputs;
}

Value call(std::string_view name, const std::vector<Value>& args, const KwArgs& kwargs) {
  Registry& registry = Registry::global();
  std::vector<const OpDef*> candidates;
  if (name.find('.') != std::string_view::npos) {
    candidates.push_back(&registry.get(name));
  } else {
    candidates = registry.overloads(name);
    if (candidates.empty()) candidates.push_back(&registry.get(name));  // throws "unknown op"
  }
  std::string mismatches;
  for (const OpDef* op : candidates) {
    std::vector<Value> bound;
    try {
      bound = bind_args(*op, args, kwargs);
    } catch (const Error& e) {
      if (candidates.size() == 1) throw;
      mismatches += fmt::format("\n  {}: {}", op->schema().str(), e.what());
      continue;
    }
    std::vector<Value> out = call_bound(*op, std::move(bound));
    if (!op->aliases().list_return && out.empty()) return None{};
    if (!op->aliases().list_return && out.size() == 1) return out[0];
    std::vector<Tensor> tensors;
    for (const Value& v : out) tensors.push_back(v.to_tensor());
    return tensors;
  }
  invalid_usage("no overload of '{}' accepts these arguments:{}", name, mismatches);
}

}  // namespace symmflow
