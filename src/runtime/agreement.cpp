// Collective agreement: the call signature a collective's barrier carries, and the error every
// rank raises when the signatures differ.
//
// Note [collective agreement]: ranks that call one collective with another reduce op, another
// dtype of the same byte size, another element count or another op entirely would each reduce or
// copy what the others never meant, and return wrong values without a word. So every barrier of
// a collective (Group::barrier(channel, CollectiveCall)) carries a 30-bit signature of the call
// in the flag it raises: bits 2..31 of the barrier flag (Note [signal protocol] in group.hpp),
// written by the same compare-exchange that raises the signal. The consumer expects exactly
// "signal | its own signature", so when the ranks agree the check is that one compare-exchange
// the barrier always made, with no extra word and no extra round trip; when the exchange fails it
// takes the wait path, which returns the signature it found. A barrier is all-to-all, so when any
// two ranks differ, every rank sees at least one peer differ from itself: all ranks learn it after
// the same barrier, before any of them reads or writes a peer's data (every collective passes a
// signed barrier first). They then exchange their calls in full through the bootstrap (the error
// path only) and raise the same InvalidUsage naming each field that differs and every rank's
// value. A plain barrier (Group::barrier(channel, op), and every barrier when the tunable
// collective_agreement is 0) carries signature 0 and checks that its peers' is 0 too, so a plain
// barrier that meets a collective's fails on both sides instead of passing silently.
// The signature hashes the op, reduce op, dtype, count, the op's one integer argument and the
// group's name (cached). A 30-bit hash misses a disagreement with probability 2^-30; the deeper
// check, SYMMFLOW_DEBUG_COLLECTIVES=1 (an all-gather of the call's text before every collective),
// has no such gap. Point-to-point ops (put_signal, wait_signal, get) are not collectives: their
// flags carry 0.
//
// Note [program steps in agreement]: two compiled programs whose collectives look alike (the same
// op, dtype and count) called in a different order per rank (c1 then c2 on rank 0, c2 then c1 on
// rank 1) paired c1's all-reduce with c2's and both returned wrong values without a word. So a
// collective run by an Executable's step also carries the program (its plan's hash, Note [rank
// agreement] in src/exec/agreement.cpp) and the step's index, set on the thread around the step
// (ProgramStepScope); the message names each rank's program and step. An eager call carries
// program 0: as with NCCL, the order of eager calls is the user's. Two programs of the same
// structure (equal hashes) are not told apart: their steps are the same collectives.
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "symmflow/core/error.hpp"
#include "symmflow/runtime/group.hpp"
#include "symmflow/runtime/tunables.hpp"

namespace symmflow {

namespace {

constexpr uint64_t kMul = 0x9e3779b97f4a7c15ull;

// The words of `s` times odd constants, summed: the multiplies are independent (the op names are
// 20 to 45 bytes: 3 to 6 words, a few cycles in all); a bijective finalizer mixes the sum once
// per signature. A difference in one word changes the sum (odd factors), so two calls that differ
// collide only through the final truncation to 30 bits.
uint64_t text_sum(std::string_view s) {
  const size_t n = s.size();
  uint64_t h = uint64_t(n) * kMul;
  uint64_t factor = 0xbf58476d1ce4e5b9ull;
  if (n < 8) {  // a reduce op: a few bytes, no library call for a variable-length copy
    uint64_t tail = 0;
    for (size_t i = 0; i < n; ++i) tail |= uint64_t(uint8_t(s[i])) << (8 * i);
    return h + tail * factor;
  }
  size_t i = 0;
  for (; i + 8 <= n; i += 8, factor += 2 * kMul) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h += w * factor;
  }
  if (i < n) {  // the last eight bytes, overlapping the word before
    uint64_t w;
    std::memcpy(&w, s.data() + n - 8, 8);
    h += w * factor;
  }
  return h;
}

// MurmurHash3's 64-bit finalizer (a bijection).
uint64_t finalize(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  return h ^ (h >> 33);
}

// The fields of a call as text, in the order of kFields; a plain barrier has only its op. The
// last says whether this rank checks agreement: a rank with SYMMFLOW_COLLECTIVE_AGREEMENT=0
// raises signature 0 and meets the others' signatures, and that cause is named (issue 39).
constexpr const char* kFields[] = {
    "op", "reduce op", "dtype", "element count", "argument", "program step",
    "collective agreement"};
constexpr size_t kFieldCount = std::size(kFields);
constexpr char kSep = '\x1f';

std::string program_step_text() {
  const ProgramStep& p = current_program_step();
  if (p.program == 0) return "eager";
  return fmt::format("{} ({:08x}) step {}", p.name, uint32_t(p.program >> 32), p.step);
}

std::string agreement_text(bool on) {
  return on ? "on" : "off (SYMMFLOW_COLLECTIVE_AGREEMENT=0)";
}

// `signature` 0 with a call: this rank's agreement is off.
std::string describe(std::string_view op, const CollectiveCall* call, uint32_t signature) {
  if (!call) {
    return fmt::format("a plain barrier ({}){}-{}-{}-{}-{}{}{}{}", op, kSep, kSep, kSep, kSep,
                       kSep, program_step_text(), kSep,
                       agreement_text(tunables().collective_agreement));
  }
  return fmt::format("{}{}{}{}{}{}{}{}{}{}{}{}{}", call->op, kSep,
                     call->reduce_op.empty() ? "-" : call->reduce_op, kSep,
                     dtype_name(call->dtype), kSep, call->count, kSep,
                     call->param_name.empty() ? std::string("-")
                                              : fmt::format("{}={}", call->param_name, call->param),
                     kSep, program_step_text(), kSep, agreement_text(signature != 0));
}

thread_local ProgramStep t_program_step;

std::vector<std::string> fields_of(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    size_t end = text.find(kSep, start);
    out.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  out.resize(kFieldCount);
  return out;
}

// "sum on ranks 0, 2; max on rank 1": equal values together, by first rank. `ranks`: the global
// rank of each value.
std::string per_rank(const std::vector<std::string>& values, const std::vector<int>& ranks_of) {
  std::string out;
  std::vector<bool> done(values.size(), false);
  for (size_t r = 0; r < values.size(); ++r) {
    if (done[r]) continue;
    std::vector<int> ranks;
    for (size_t q = r; q < values.size(); ++q) {
      if (!done[q] && values[q] == values[r]) ranks.push_back(ranks_of[q]), done[q] = true;
    }
    out += fmt::format("{}{} on rank{} {}", out.empty() ? "" : "; ", values[r],
                       ranks.size() == 1 ? "" : "s", fmt::join(ranks, ", "));
  }
  return out;
}

}  // namespace

const ProgramStep& current_program_step() { return t_program_step; }

ProgramStepScope::ProgramStepScope(const ProgramStep& step) : saved_(t_program_step) {
  t_program_step = step;
}
ProgramStepScope::~ProgramStepScope() { t_program_step = saved_; }

uint32_t Group::signature(const CollectiveCall& call) const {
  const ProgramStep& p = t_program_step;
  uint64_t h = name_hash_ + text_sum(call.op) * 0x94d049bb133111ebull +
               (p.program + uint64_t(p.step + 1) * kMul) * 0x8ebc6af09c88c6e3ull +
               text_sum(call.reduce_op) * 0xd6e8feb86659fd93ull +
               (uint64_t(call.dtype) | uint64_t(call.count) << 8) * 0xa0761d6478bd642full +
               (text_sum(call.param_name) + uint64_t(call.param)) * 0xe7037ed1a0b428dbull;
  // 30 bits, never 0 (a plain barrier's).
  const uint32_t sig = uint32_t(finalize(h) >> 34);
  return sig != 0 ? sig : 1;
}

void Group::disagree(std::string_view op, const CollectiveCall* call, uint32_t signature) {
  disagree_among(op, ranks_, allgather(describe(op, call, signature), op));
}

std::string Group::call_text(std::string_view op, const CollectiveCall* call) const {
  return describe(op, call, tunables().collective_agreement ? 1 : 0);
}

void Group::disagree_among(std::string_view op, const std::vector<int>& ranks,
                           const std::vector<std::string>& all) const {
  std::vector<std::vector<std::string>> fields;
  for (const std::string& a : all) fields.push_back(fields_of(a));
  std::vector<std::string> names, lines;
  for (size_t f = 0; f < kFieldCount; ++f) {
    std::vector<std::string> values;
    for (const auto& r : fields) values.push_back(r[f]);
    bool same = true;
    for (const std::string& v : values) same = same && v == values[0];
    if (same) continue;
    names.push_back(kFields[f]);
    lines.push_back(fmt::format("\n  {}: {}", kFields[f], per_rank(values, ranks)));
  }
  if (names.empty()) {
    // Equal calls with different signatures: not expected, but never silent.
    names.push_back("the call signature");
    lines.push_back(fmt::format("\n  call: {}", per_rank(all, ranks)));
  }
  invalid_usage(
      "{}: the ranks of group '{}' disagree on {} (collective agreement; no data was "
      "exchanged):{}",
      op, name_, fmt::join(names, ", "), fmt::join(lines, ""));
}

}  // namespace symmflow
