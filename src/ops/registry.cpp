// The op registry. Contract:
// - def parses and validates a schema (validate_schema), refuses a second def of one name and an op
//   that returns values without a shape function;
// - impl refuses an undefined op and a second kernel for one backend;
// - register_symm_mem_args refuses names that are not Tensor / Tensor[] arguments and ops without
//   a `str` group argument (`group_name` unless register_group_arg named another, first);
// - tag adds declared tags (Note [op tags] in registry.hpp), refusing inferred ones and, for tags
//   about a group, ops without a group argument;
// - link_variants pairs functional, in-place (`name_`) and out (`name.out`, `name.X_out`,
//   `name_out`) ops of one base name whose arguments agree (see variant_links.cpp).
// Every refusal is an InvalidUsage naming the op (and argument) and leaves the registry unchanged.
// Lookups take a shared lock; definitions happen at start-up and when plugins load.
#include "symmflow/ops/registry.hpp"

#include <algorithm>
#include <mutex>
#include <shared_mutex>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ops/variant_links.hpp"
#include "symmflow/ops/library.hpp"

namespace symmflow {

namespace {
std::shared_mutex& registry_mutex() {
  static std::shared_mutex m;
  return m;
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t prev = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cur = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, prev + (a[i - 1] != b[j - 1] ? 1 : 0)});
      prev = cur;
    }
  }
  return row[b.size()];
}

std::string arg_names(const FunctionSchema& s) {
  std::vector<std::string> names;
  for (const Argument& a : s.args) names.push_back(a.name);
  return fmt::format("{}", fmt::join(names, ", "));
}
}  // namespace

const char* backend_name(Backend b) { return b == Backend::cpu ? "cpu" : "cuda"; }

const char* tag_name(Tag t) {
  switch (t) {
    case Tag::pointwise: return "pointwise";
    case Tag::collective: return "collective";
    case Tag::peer_written: return "peer_written";
    case Tag::peer_read: return "peer_read";
    case Tag::one_sided: return "one_sided";
    case Tag::signal: return "signal";
    case Tag::barrier: return "barrier";
    case Tag::in_place: return "in_place";
    case Tag::out: return "out";
    case Tag::view: return "view";
  }
  return "?";
}

std::string TagSet::str() const {
  std::vector<std::string> names;
  for (Tag t : kAllTags) {
    if (has(t)) names.push_back(tag_name(t));
  }
  return fmt::format("{}", fmt::join(names, ", "));
}

namespace {
constexpr TagSet kInferredTags{Tag::collective, Tag::peer_written, Tag::in_place, Tag::out,
                               Tag::view};
constexpr TagSet kGroupTags{Tag::one_sided, Tag::peer_read, Tag::signal, Tag::barrier};
}  // namespace

TagSet OpDef::tags() const {
  TagSet t = declared_tags_;
  if (!group_arg_.empty()) t |= Tag::collective;
  for (int w : aliases_.written_args) {
    const std::string& arg = schema_.args[size_t(w)].name;
    if (std::find(symm_args_.begin(), symm_args_.end(), arg) != symm_args_.end())
      t |= Tag::peer_written;
  }
  if (aliases_.is_out_variant()) t |= Tag::out;
  else if (aliases_.is_mutable()) t |= Tag::in_place;
  if (aliases_.is_view()) t |= Tag::view;
  return t;
}

OpDef::OpDef(FunctionSchema schema)
    : schema_(std::move(schema)), name_(schema_.qualified_name()),
      aliases_(analyze_aliases(schema_)) {
  if (schema_.arg_index("group_name") >= 0) group_arg_ = "group_name";
}

const Kernel* OpDef::kernel(Backend b) const {
  auto it = kernels_.find(b);
  return it == kernels_.end() ? nullptr : &it->second;
}

std::string OpDef::kernel_refusal(Backend b, std::span<const Value> args) const {
  if (!kernels_.count(b)) return fmt::format("{} has no {} kernel", name_, backend_name(b));
  auto it = checks_.find(b);
  if (it != checks_.end()) {
    std::string why = it->second(*this, args);
    if (!why.empty()) return why;
  }
  if (!backend_checks_) return "";
  auto all = backend_checks_->find(b);
  if (all == backend_checks_->end()) return "";
  for (const KernelCheck& check : all->second) {
    std::string why = check(*this, args);
    if (!why.empty()) return why;
  }
  return "";
}

std::vector<Backend> OpDef::backends() const {
  std::vector<Backend> out;
  for (const auto& [b, k] : kernels_) out.push_back(b);
  return out;
}

const Value& KernelCall::arg(std::string_view name) const {
  int i = op.schema().arg_index(name);
  SF_CHECK(i >= 0, "op '{}' has no argument '{}'", op.name(), name);
  return args[size_t(i)];
}

Registry& Registry::global() {
  static Registry* registry = new Registry();  // never destroyed: kernels may run at exit
  detail::run_pending_libraries(*registry);
  return *registry;
}

const OpDef* Registry::find(std::string_view name) const {
  std::shared_lock lock(registry_mutex());
  auto it = ops_.find(name);
  return it == ops_.end() ? nullptr : it->second.get();
}

const OpDef& Registry::get(std::string_view name) const {
  if (const OpDef* op = find(name)) return *op;
  std::shared_lock lock(registry_mutex());
  std::vector<std::pair<size_t, std::string>> near;
  for (const auto& [n, op] : ops_) near.emplace_back(edit_distance(name, n), n);
  std::sort(near.begin(), near.end());
  std::vector<std::string> best;
  size_t limit = std::max<size_t>(2, name.size() / 5);
  for (size_t i = 0; i < near.size() && i < 3 && near[i].first <= limit; ++i)
    best.push_back(near[i].second);
  if (best.empty()) invalid_usage("unknown op '{}'", name);
  invalid_usage("unknown op '{}' (did you mean {}?)", name, fmt::join(best, ", "));
}

std::vector<const OpDef*> Registry::overloads(std::string_view ns_and_name) const {
  std::shared_lock lock(registry_mutex());
  auto it = overloads_.find(ns_and_name);
  return it == overloads_.end() ? std::vector<const OpDef*>{} : it->second;
}

std::vector<const OpDef*> Registry::ops(std::string_view ns) const {
  std::shared_lock lock(registry_mutex());
  std::vector<const OpDef*> out;
  for (const auto& [n, op] : ops_) {
    if (ns.empty() || op->schema().ns == ns) out.push_back(op.get());
  }
  return out;
}

std::vector<std::string> Registry::namespaces() const {
  std::shared_lock lock(registry_mutex());
  std::vector<std::string> out;
  for (const auto& [n, op] : ops_) {
    if (std::find(out.begin(), out.end(), op->schema().ns) == out.end())
      out.push_back(op->schema().ns);
  }
  return out;
}

OpDef& Registry::get_mutable(std::string_view name) {
  auto it = ops_.find(name);
  if (it == ops_.end()) invalid_usage("op '{}' is not defined", name);
  return *it->second;
}

OpDef& Registry::def(std::string_view ns, std::string_view schema_text, ShapeFn shape_fn,
                     TagSet tags) {
  FunctionSchema schema = parse_schema(schema_text);
  if (schema.ns.empty()) schema.ns = std::string(ns);
  SF_CHECK(schema.ns == ns, "schema '{}' names namespace '{}' inside library '{}'", schema_text,
           schema.ns, ns);
  if (auto problem = validate_schema(schema)) invalid_usage("{}", *problem);
  auto op = std::make_unique<OpDef>(std::move(schema));
  SF_CHECK(op->schema().returns.empty() || shape_fn,
           "op '{}' returns values but was defined without a shape function", op->name());
  op->shape_fn_ = std::move(shape_fn);
  std::unique_lock lock(registry_mutex());
  SF_CHECK(!ops_.count(op->name()), "op '{}' is already defined", op->name());
  overloads_[fmt::format("{}::{}", op->schema().ns, op->schema().name)].push_back(op.get());
  OpDef& ref = *op;
  std::string name = op->name();
  auto checks = backend_checks_.find(ns);
  if (checks == backend_checks_.end())
    checks = backend_checks_.emplace(std::string(ns), decltype(checks->second){}).first;
  op->backend_checks_ = &checks->second;
  ops_.emplace(name, std::move(op));
  if (!tags.empty()) {
    try {
      tag_locked(ref, tags);
    } catch (...) {  // leave the registry unchanged
      overloads_[fmt::format("{}::{}", ref.schema().ns, ref.schema().name)].pop_back();
      ops_.erase(name);
      throw;
    }
  }
  return ref;
}

void Registry::tag(std::string_view name, TagSet tags) {
  std::unique_lock lock(registry_mutex());
  tag_locked(get_mutable(name), tags);
}

void Registry::tag_locked(OpDef& op, TagSet tags) {
  for (Tag t : kAllTags) {
    if (!tags.has(t)) continue;
    SF_CHECK(!kInferredTags.has(t),
             "op '{}': tag {} is inferred (from the schema's alias annotations, its group "
             "argument and its symm args) and cannot be declared",
             op.name(), tag_name(t));
    SF_CHECK(!kGroupTags.has(t) || !op.group_arg_.empty(),
             "op '{}': tag {} needs a group argument, but the schema has no 'str group_name' "
             "(name another one with register_group_arg first)",
             op.name(), tag_name(t));
  }
  op.declared_tags_ |= tags;
}

void Registry::exchange(std::string_view name, OpExchange exchange) {
  std::unique_lock lock(registry_mutex());
  OpDef& op = get_mutable(name);
  SF_CHECK(!op.group_arg_.empty(),
           "op '{}': an exchange needs a group argument, but the schema has no 'str group_name' "
           "(name another one with register_group_arg first)",
           op.name());
  SF_CHECK(!exchange.algorithm.empty() && !exchange.why.empty(),
           "op '{}': an exchange needs an algorithm name and a description", op.name());
  op.exchange_ = std::move(exchange);
}

const OpExchange* OpDef::exchange() const {
  if (exchange_) return &*exchange_;
  if (functional_op_ && functional_op_ != this && functional_op_->exchange_)
    return &*functional_op_->exchange_;
  return nullptr;
}

void Registry::impl(std::string_view name, Backend backend, Kernel kernel) {
  std::unique_lock lock(registry_mutex());
  auto it = ops_.find(name);
  SF_CHECK(it != ops_.end(), "impl of undefined op '{}' (def it first)", name);
  OpDef& op = *it->second;
  SF_CHECK(!op.kernels_.count(backend), "op '{}' already has a {} kernel", name,
           backend_name(backend));
  SF_CHECK(bool(kernel), "op '{}': empty {} kernel", name, backend_name(backend));
  op.kernels_.emplace(backend, std::move(kernel));
}

void Registry::kernel_check(std::string_view name, Backend backend, KernelCheck check) {
  std::unique_lock lock(registry_mutex());
  OpDef& op = get_mutable(name);
  SF_CHECK(op.kernels_.count(backend), "kernel_check of '{}' before its {} kernel", name,
           backend_name(backend));
  SF_CHECK(bool(check), "op '{}': empty {} kernel check", name, backend_name(backend));
  op.checks_[backend] = std::move(check);
}

void Registry::backend_check(std::string_view ns, Backend backend, KernelCheck check) {
  std::unique_lock lock(registry_mutex());
  SF_CHECK(bool(check), "namespace '{}': empty {} backend check", ns, backend_name(backend));
  auto it = backend_checks_.find(ns);
  if (it == backend_checks_.end())
    it = backend_checks_.emplace(std::string(ns), decltype(it->second){}).first;
  it->second[backend].push_back(std::move(check));
}

void Registry::register_symm_mem_args(std::string_view name, std::vector<std::string> names) {
  std::unique_lock lock(registry_mutex());
  OpDef& op = get_mutable(name);
  const FunctionSchema& s = op.schema();
  SF_CHECK(!names.empty(), "op '{}': register_symm_mem_args needs at least one argument name",
           name);
  for (const std::string& arg : names) {
    int i = s.arg_index(arg);
    SF_CHECK(i >= 0, "op '{}': symm arg '{}' is not an argument of its schema (arguments: {})",
             name, arg, arg_names(s));
    const Type& t = s.args[size_t(i)].type;
    SF_CHECK(t.kind == TypeKind::Tensor && !t.is_optional(),
             "op '{}': symm arg '{}' has type {}; only Tensor and Tensor[] arguments can be "
             "symmetric",
             name, arg, t.str());
    SF_CHECK(std::count(names.begin(), names.end(), arg) == 1, "op '{}': symm arg '{}' listed twice",
             name, arg);
  }
  SF_CHECK(!op.group_arg_.empty(),
           "op '{}': symm args {} need a group argument, but the schema has no 'str group_name' "
           "(name another one with register_group_arg first)",
           name, fmt::join(names, ", "));
  op.symm_args_ = std::move(names);
}

void Registry::register_group_arg(std::string_view name, std::string arg) {
  std::unique_lock lock(registry_mutex());
  OpDef& op = get_mutable(name);
  int i = op.schema().arg_index(arg);
  SF_CHECK(i >= 0, "op '{}': group argument '{}' is not an argument of its schema (arguments: {})",
           name, arg, arg_names(op.schema()));
  const Type& t = op.schema().args[size_t(i)].type;
  SF_CHECK(t.kind == TypeKind::Str && !t.is_list,
           "op '{}': group argument '{}' has type {}; it must be str", name, arg, t.str());
  op.group_arg_ = std::move(arg);
}

void Registry::link_variants(std::string_view ns) {
  std::unique_lock lock(registry_mutex());
  std::vector<OpDef*> in_ns;
  for (auto& [n, op] : ops_) {
    if (op->schema().ns == ns) in_ns.push_back(op.get());
  }
  std::vector<VariantLink> links = find_variant_links(in_ns);  // throws on incompatible pairs
  for (OpDef* op : in_ns) {
    op->functional_ = op->inplace_ = op->out_ = "";
    op->functional_op_ = op->out_op_ = nullptr;
  }
  for (const VariantLink& l : links) {
    OpDef* ops[3] = {l.functional, l.inplace, l.out};
    for (OpDef* op : ops) {
      if (!op) continue;
      if (l.functional && op != l.functional) {
        op->functional_ = l.functional->name();
        op->functional_op_ = l.functional;
      }
      if (l.inplace && op != l.inplace) op->inplace_ = l.inplace->name();
      if (l.out && op != l.out) {
        op->out_ = l.out->name();
        op->out_op_ = l.out;
      }
    }
  }
}

}  // namespace symmflow
