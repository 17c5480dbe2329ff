// Rank agreement. Contract: see agreement.hpp.
//
// Note [rank agreement]: SPMD ranks that compiled different programs, or that bind inputs of
// another dtype or shape with the same byte count, or another layout, run the same collectives
// on data the others do not expect and get wrong results without a word. So the ranks compare:
//   - at construction of an Executable whose plan communicates, before its groups and symmetric
//     heaps are made: a summary of the plan (program name, world size it was built for, groups,
//     declared inputs, step count, pools, and a 64-bit hash of the plan's structure as the peers
//     see it: plan_hash, which leaves out int literals and what local steps read, since an SPMD
//     program may name a peer by a literal or compute on its own shard differently per rank), so
//     that different programs are named before an allocation fails with sizes only;
//   - at each run, before anything communicates: each bound input's dtype, shape and strides.
// Who: the ranks this rank's plan communicates with, directly or through others (the closure of
// its subgroups of the plan's groups: every rank for a plan on the world), in one all-gather through the bootstrap (not per
// group: a rank in several groups would pay several); ranks outside them are never waited for
// (Note [groups of members only] in src/runtime/runtime.cpp); a plan that does not communicate
// is never checked, since one rank may run it alone.
// When: a run compares this rank's binding with the last agreed one (a few integer compares per
// input, no allocation) and exchanges only when it changed, so steady-state runs cost nothing.
// The first run always exchanges. A rank whose binding changes while its peers' stays the same
// cannot be told apart without communication on every run. When the plan refuses the new binding
// (another dtype or shape than declared), that rank raises at once without exchanging (its local
// check names the input); when only the strides changed, it waits for its peers in the exchange,
// which they never enter, and raises Timeout saying so after tunables().timeout_s (its peers then
// fail in the run's first collective with PeerFailure naming it). Either way an error, never
// wrong results.
// The exchange raises on every rank with the same text, since every rank sees every value.
// SYMMFLOW_RANK_AGREEMENT=0 turns it off (it must be set alike on every rank).
#include "exec/agreement.hpp"

#include <algorithm>
#include <numeric>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "symmflow/core/error.hpp"

namespace symmflow::exec::detail {

namespace {

constexpr const char* kKey = "symmflow::rank_agreement";

uint64_t fnv1a(std::string_view s, uint64_t h = 14695981039346656037ull) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    size_t end = s.find(sep, start);
    out.push_back(s.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) return out;
    start = end + 1;
  }
}

// "rank 0 binds X, ranks 1, 3 bind Y": ranks with equal values together, by first rank.
std::string per_rank(const std::vector<std::string>& values, std::string_view verb_one,
                     std::string_view verb_many) {
  std::vector<std::string> parts;
  std::vector<bool> done(values.size(), false);
  for (size_t r = 0; r < values.size(); ++r) {
    if (done[r]) continue;
    std::vector<size_t> ranks;
    for (size_t q = r; q < values.size(); ++q) {
      if (!done[q] && values[q] == values[r]) ranks.push_back(q), done[q] = true;
    }
    parts.push_back(ranks.size() == 1
                        ? fmt::format("rank {} {} {}", r, verb_one, values[r])
                        : fmt::format("ranks {} {} {}", fmt::join(ranks, ", "), verb_many,
                                      values[r]));
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

bool all_equal(const std::vector<std::string>& v) {
  return std::all_of(v.begin(), v.end(), [&](const std::string& s) { return s == v[0]; });
}


// The fields of a plan summary, in the order the message names differences.
enum Field : size_t { kProgram, kWorld, kGroups, kInputs, kSteps, kPools, kHash, kFields };
constexpr const char* kFieldNames[kFields] = {"program name", "world size", "groups", "inputs",
                                              "step count",   "pools",      "steps"};

std::vector<std::string> plan_summary(const passes::Plan& plan) {
  const ir::Graph& g = *plan.graph;
  std::vector<std::string> f(kFields);
  f[kProgram] = g.name();
  f[kWorld] = fmt::format("{}", g.world_size());
  std::vector<std::string> groups;
  for (const ir::GroupDecl& d : g.groups())
    groups.push_back(d.block == 0 ? d.name : fmt::format("{}({})", d.name, d.block));
  f[kGroups] = fmt::format("{}", fmt::join(groups, " "));
  std::vector<std::string> inputs;
  for (int id : plan.inputs) {
    const passes::PlanValue& v = plan.values[size_t(id)];
    inputs.push_back(v.name + ": " + v.type.str());
  }
  f[kInputs] = fmt::format("{}", fmt::join(inputs, "; "));
  f[kSteps] = fmt::format("{}", plan.steps.size());
  std::vector<std::string> pools;
  for (const passes::PoolPlan& p : plan.pools) {  // the symmetric ones: regular pools are local
    if (p.layout.pool == ir::Pool::symm) pools.push_back(fmt::format("{} {} B", p.name, p.bytes));
  }
  f[kPools] = fmt::format("{}", fmt::join(pools, " "));
  f[kHash] = fmt::format("{:016x}", plan_hash(plan));
  return f;
}

std::string bound_text(const Tensor& t, const std::string& placement) {
  if (!t.defined()) return "an undefined tensor";
  return fmt::format("{}[{}] strides [{}]{}{}", dtype_name(t.dtype()), fmt::join(t.shape(), ", "),
                     fmt::join(t.strides(), ", "), placement.empty() ? "" : " in ", placement);
}

const std::string& placement_of(const std::vector<std::string>& placements, size_t i) {
  static const std::string none;
  return i < placements.size() ? placements[i] : none;
}

}  // namespace

// The plan's structure as its peers see it: every step's kind and op in order, and of the steps
// that communicate (those with a group) the group, operands (values, literals), results,
// written operands and algorithms; every value's name and type; every buffer of a symmetric pool
// with its place (peers read and write at those offsets). Int literals are left out: SPMD
// programs may name a peer by a literal that differs per rank (the e2e generator's programs do),
// which is the same program. So is what the local steps read and the regular pools' layout:
// DTensor's sequence-parallel backward takes this rank's piece of a split (a different value per
// rank) and compares token ids with this rank's vocabulary range (int literals), a per-rank
// computation between the same collectives on the same symmetric buffers.
uint64_t plan_hash(const passes::Plan& plan) {
  std::string text;
  for (const passes::PlanStep& s : plan.steps) {
    const OpDef* op = s.op.called();
    text += fmt::format("{} {} {} {} {} |", int(s.kind), op ? op->name() : "", s.group,
                        s.group_size, int(s.copy));
    if (s.group.empty()) {
      text += "\n";
      continue;
    }
    using Kind = passes::Operand::Kind;
    for (const passes::Operand& o : s.args) {
      if (o.kind == Kind::value) text += fmt::format(" v{}", o.value);
      if (o.kind == Kind::value_list) text += fmt::format(" [{}]", fmt::join(o.values, " "));
      if (o.kind == Kind::rank_relative) text += fmt::format(" r{}", o.rank_offset);
      if (o.kind == Kind::literal)
        text += o.literal.is_int() ? std::string(" int") : " " + o.literal.str();
    }
    text += fmt::format(" -> {} w {} a {} {} {}\n", fmt::join(s.results, " "),
                        fmt::join(s.written, " "), fmt::join(s.result_aliases, " "),
                        s.algorithm.cpu, s.algorithm.cuda);
  }
  for (const passes::PlanValue& v : plan.values) text += fmt::format("{} {}\n", v.name, v.type.str());
  for (const passes::BufferPlan& b : plan.buffers) {
    if (b.pool < 0 || plan.pools[size_t(b.pool)].layout.pool != ir::Pool::symm) continue;
    text += fmt::format("{} {} {} {} {}\n", b.name, b.pool, b.offset, b.bytes, b.intermediate);
  }
  return fnv1a(text);
}

bool plan_communicates(const passes::Plan& plan) {
  for (const passes::PoolPlan& p : plan.pools)
    if (p.layout.pool == ir::Pool::symm) return true;
  for (const passes::PlanStep& s : plan.steps)
    if (!s.group.empty()) return true;
  return false;
}

// The ranks this rank's plan communicates with, directly or through others: the closure of
// itself under the subgroups of every group the plan's steps and symmetric pools use (Note [groups of members only] in
// src/runtime/runtime.cpp: a plan on a group of ranks 0 and 1 waits for no other rank).
std::vector<int> communicating_ranks(const passes::Plan& plan, int rank, int world) {
  std::set<std::string> groups;
  for (const passes::PoolPlan& p : plan.pools)
    if (p.layout.pool == ir::Pool::symm) groups.insert(p.layout.group);
  for (const passes::PlanStep& s : plan.steps)
    if (!s.group.empty()) groups.insert(s.group);
  // Closed under "shares a subgroup with": every rank of the set computes the same set.
  std::set<int> members{rank};
  for (bool grew = true; grew;) {
    grew = false;
    for (const std::string& name : groups) {
      const ir::GroupDecl* decl = plan.graph->find_group(name);
      for (int m : std::vector<int>(members.begin(), members.end())) {
        std::vector<int> more;
        if (decl) {
          more = decl->members_of(m, world);
        } else {  // not declared by the program: the world, to be safe
          for (int r = 0; r < world; ++r) more.push_back(r);
        }
        for (int r : more) grew = members.insert(r).second || grew;
      }
    }
  }
  return {members.begin(), members.end()};
}

RankAgreement::RankAgreement(const passes::Plan& plan, Bootstrap& bootstrap)
    : plan_(plan),
      bootstrap_(bootstrap),
      members_(communicating_ranks(plan, bootstrap.rank(), bootstrap.world_size())) {}

std::vector<std::string> RankAgreement::allgather(std::string mine, std::string_view who) {
  ++exchanges_;
  return bootstrap_.allgather(members_, kKey, std::move(mine), who);
}

std::string RankAgreement::input_label(size_t i) const {
  const ir::Graph& g = *plan_.graph;
  const ir::Value* v = g.inputs()[i];
  const int line = v->loc().line;
  if (line <= 0) return fmt::format("input '{}'", v->name());
  if (g.source_file().empty()) return fmt::format("input '{}' (line {})", v->name(), line);
  return fmt::format("input '{}' ({}:{})", v->name(), g.source_file(), line);
}

void RankAgreement::agree_on_plan(std::string_view who) {
  std::vector<std::string> mine = plan_summary(plan_);
  std::vector<std::string> all = allgather(fmt::format("{}", fmt::join(mine, "\n")), who);
  std::vector<std::vector<std::string>> ranks;
  for (const std::string& s : all) ranks.push_back(split(s, '\n'));
  std::vector<std::string> differ;
  for (size_t f = 0; f < kFields; ++f) {
    std::vector<std::string> values;
    for (const auto& r : ranks) values.push_back(f < r.size() ? r[f] : "?");
    if (!all_equal(values)) differ.push_back(kFieldNames[f]);
  }
  if (differ.empty()) return;
  std::string text = fmt::format("{}: the ranks compiled different plans (rank agreement); they "
                                 "differ in: {}",
                                 who, fmt::join(differ, ", "));
  // Inputs of the same names whose declared types differ: name each with its source line.
  std::vector<std::vector<std::string>> inputs;
  for (const auto& r : ranks) inputs.push_back(split(r.size() > kInputs ? r[kInputs] : "", ';'));
  bool same_names = true;
  for (const auto& in : inputs) {
    same_names = same_names && in.size() == inputs[0].size() && in.size() == plan_.inputs.size();
    auto name = [](const std::string& decl) { return decl.substr(0, decl.find(':')); };
    for (size_t i = 0; same_names && i < in.size(); ++i)
      same_names = name(in[i]) == name(inputs[0][i]);
  }
  for (size_t i = 0; same_names && i < plan_.inputs.size(); ++i) {
    std::vector<std::string> types;
    for (const auto& in : inputs) {
      std::string_view t = in[i];
      types.emplace_back(t.substr(t.find(':') + 2));
    }
    if (!all_equal(types))
      text += fmt::format("\n  {}: {}", input_label(i), per_rank(types, "expects", "expect"));
  }
  std::vector<std::string> lines;
  for (const auto& r : ranks) {
    auto at = [&](size_t f) { return f < r.size() ? r[f] : std::string("?"); };
    lines.push_back(fmt::format("program '{}' for {} ranks, groups {}, {} steps, pools {}, plan {}",
                                at(kProgram), at(kWorld), at(kGroups), at(kSteps), at(kPools),
                                at(kHash)));
  }
  std::vector<bool> done(lines.size(), false);
  for (size_t r = 0; r < lines.size(); ++r) {
    if (done[r]) continue;
    std::vector<size_t> same;
    for (size_t q = r; q < lines.size(); ++q)
      if (!done[q] && lines[q] == lines[r]) same.push_back(q), done[q] = true;
    text += fmt::format("\n  {} {}: {}", same.size() == 1 ? "rank" : "ranks", fmt::join(same, ", "),
                        lines[r]);
  }
  invalid_usage("{}", text);
}

bool RankAgreement::matches_plan(const std::vector<Tensor>& inputs) const {
  if (inputs.size() != plan_.inputs.size()) return false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ir::TensorType& want = plan_.values[size_t(plan_.inputs[i])].type;
    const Tensor& t = inputs[i];
    if (!t.defined() || t.dtype() != want.dtype || t.shape() != want.shape) return false;
  }
  return true;
}

bool RankAgreement::same_as_agreed(const std::vector<Tensor>& inputs,
                                   const std::vector<std::string>& placements) const {
  if (!agreed_once_ || inputs.size() != agreed_.size()) return false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    const Bound& b = agreed_[i];
    if (t.defined() != b.defined) return false;
    if (t.defined() &&
        (t.dtype() != b.dtype || t.shape() != b.shape || t.strides() != b.strides ||
         placement_of(placements, i) != b.placement))
      return false;
  }
  return true;
}

void RankAgreement::agree_on_inputs(const std::vector<Tensor>& inputs, std::string_view who,
                                    const std::vector<std::string>& placements) {
  if (same_as_agreed(inputs, placements)) return;
  // After an agreed run, a binding the plan refuses is this rank's own error: check_inputs names
  // it at once rather than after a wait for peers that have no reason to exchange.
  if (agreed_once_ && !matches_plan(inputs)) return;
  std::vector<std::string> mine;
  for (size_t i = 0; i < inputs.size(); ++i)
    mine.push_back(bound_text(inputs[i], placement_of(placements, i)));
  std::vector<std::string> all;
  try {
    all = allgather(fmt::format("{}\n{}", mine.size(), fmt::join(mine, "\n")), who);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::Timeout || !agreed_once_) throw;
    throw_error(ErrorCode::Timeout,
                "{}: rank {}'s inputs differ from the last run its peers agreed on (now {}), but "
                "its peers did not join the rank agreement: ranks must change what they bind "
                "together (Note [rank agreement]): {}",
                who, bootstrap_.rank(), fmt::join(mine, "; "), e.what());
  }
  std::vector<std::vector<std::string>> ranks;
  for (const std::string& s : all) ranks.push_back(split(s, '\n'));
  std::string text;
  const size_t n = plan_.inputs.size();
  std::vector<std::string> counts;
  for (const auto& r : ranks) counts.push_back(fmt::format("{} inputs", r[0]));
  const bool counts_agree = all_equal(counts);
  if (!counts_agree) {
    text = fmt::format("\n  program '{}' takes {} inputs: {}", plan_.graph->name(), n,
                       per_rank(counts, "binds", "bind"));
  }
  for (size_t i = 0; counts_agree && i < std::min(n, inputs.size()); ++i) {
    std::vector<std::string> values;
    for (const auto& r : ranks) values.push_back(r[1 + i]);
    if (!all_equal(values))
      text += fmt::format("\n  {}: {}", input_label(i), per_rank(values, "binds", "bind"));
  }
  if (!text.empty())
    invalid_usage("{}: the ranks of program '{}' bind different inputs (rank agreement):{}", who,
                  plan_.graph->name(), text);
  if (inputs.size() != n) return;  // all bind the same wrong count: check_inputs names it
  agreed_.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    agreed_[i] = t.defined() ? Bound{true, t.dtype(), t.shape(), t.strides(),
                                     placement_of(placements, i)}
                             : Bound{};
  }
  agreed_once_ = true;
}

}  // namespace symmflow::exec::detail
