// Variant links. Contract:
// - kind of an op: out variant when its schema has out args (analyze_aliases), in-place when it
//   writes an argument and its name ends in a single '_', functional when it writes nothing;
// - base name: the name without a trailing "_out" (out variants) or "_" (in-place);
// - a functional op F and a variant V of the same base are linked when V's arguments, minus its
//   out args, equal F's arguments in name and type (alias annotations ignored; F's tensor-option
//   arguments dtype/layout/device/pin_memory/memory_format may be absent from an out variant, as
//   in PyTorch's factory functions);
// - an in-place op and an out op are linked to each other the same way when no functional op
//   exists (symm_mem::two_shot_all_reduce_ and two_shot_all_reduce_out);
// - when a family has exactly one candidate on the other side and it does not fit, the variant is
//   refused with both schemas in the message: a misnamed variant is a bug worth reporting.
#include "ops/variant_links.hpp"

#include <algorithm>
#include <map>
#include <set>

namespace symmflow {

namespace {

enum class Kind { functional, inplace, out, other };

Kind kind_of(const OpDef& op) {
  const AliasAnalysis& a = op.aliases();
  if (a.is_out_variant()) return Kind::out;
  if (!a.is_mutable()) return Kind::functional;
  const std::string& n = op.schema().name;
  bool trailing = n.size() > 1 && n.back() == '_' && n[n.size() - 2] != '_';
  return trailing ? Kind::inplace : Kind::other;
}

std::string base_name(const OpDef& op, Kind k) {
  std::string n = op.schema().name;
  if (k == Kind::out && n.size() > 4 && n.ends_with("_out")) n.resize(n.size() - 4);
  if (k == Kind::inplace) n.pop_back();
  return n;
}

bool is_tensor_option(const Argument& a) {
  static const std::set<std::string> kNames = {"dtype", "layout", "device", "pin_memory",
                                               "memory_format"};
  return a.kwarg_only && kNames.count(a.name);
}

bool same_arg(const Argument& a, const Argument& b) {
  return a.name == b.name && a.type == b.type;
}

// Do `variant`'s arguments (minus its out args) match `base`'s?
bool compatible(const OpDef& base, const OpDef& variant) {
  const auto& out = variant.aliases().out_args;
  std::vector<const Argument*> v;
  for (size_t i = 0; i < variant.schema().args.size(); ++i) {
    if (std::find(out.begin(), out.end(), int(i)) == out.end())
      v.push_back(&variant.schema().args[i]);
  }
  size_t j = 0;
  for (const Argument& a : base.schema().args) {
    if (j < v.size() && same_arg(a, *v[j])) {
      ++j;
    } else if (!(is_tensor_option(a) && !out.empty())) {
      return false;
    }
  }
  return j == v.size();
}

struct Family {
  std::vector<OpDef*> functional, inplace, out;
};

OpDef* pick(const std::vector<OpDef*>& candidates, const OpDef& variant) {
  for (OpDef* c : candidates) {
    if (compatible(*c, variant)) return c;
  }
  if (candidates.size() == 1) {
    const OpDef& c = *candidates[0];
    invalid_usage(
        "op '{}' is named as a variant of '{}' but their arguments differ:\n  {}\n  {}",
        variant.name(), c.name(), variant.schema().str(), c.schema().str());
  }
  return nullptr;
}

}  // namespace

std::vector<VariantLink> find_variant_links(const std::vector<OpDef*>& ops) {
  std::map<std::string, Family> families;
  for (OpDef* op : ops) {
    Kind k = kind_of(*op);
    Family& f = families[base_name(*op, k)];
    if (k == Kind::functional) f.functional.push_back(op);
    if (k == Kind::inplace) f.inplace.push_back(op);
    if (k == Kind::out) f.out.push_back(op);
  }
  std::vector<VariantLink> links;
  for (auto& [base, f] : families) {
    if (f.inplace.empty() && f.out.empty()) continue;
    std::map<OpDef*, VariantLink> by_functional;
    std::vector<VariantLink> orphans;  // in-place/out pairs without a functional op
    for (OpDef* v : f.inplace) {
      if (OpDef* fn = f.functional.empty() ? nullptr : pick(f.functional, *v)) {
        by_functional[fn].functional = fn;
        by_functional[fn].inplace = v;
      } else {
        orphans.push_back({nullptr, v, nullptr});
      }
    }
    for (OpDef* v : f.out) {
      if (OpDef* fn = f.functional.empty() ? nullptr : pick(f.functional, *v)) {
        by_functional[fn].functional = fn;
        by_functional[fn].out = v;
        continue;
      }
      auto it = std::find_if(orphans.begin(), orphans.end(), [&](const VariantLink& l) {
        return !l.out && compatible(*l.inplace, *v);
      });
      if (it != orphans.end()) it->out = v;
    }
    for (auto& [fn, l] : by_functional) links.push_back(l);
    for (const VariantLink& l : orphans) {
      if (l.out) links.push_back(l);
    }
  }
  return links;
}

}  // namespace symmflow

