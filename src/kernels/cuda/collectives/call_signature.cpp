// The GPU collectives' call signature (call_signature.hpp, Note [gpu collective agreement]).
#include "kernels/cuda/collectives/call_signature.hpp"

#include <fmt/format.h>

#include <iterator>

#include "symmflow/runtime/tunables.hpp"

namespace symmflow::cuda {
namespace {

// Bits of the 24-bit word.
constexpr uint32_t kMarker = 1u << 23;
constexpr int kReduceShift = 0, kDtypeShift = 3, kOpShift = 7, kCountShift = 13;
constexpr uint32_t kReduceMask = 7, kDtypeMask = 15, kOpMask = 63, kCountMask = 1023;

constexpr std::string_view kReduceOps[] = {"", "sum", "avg", "max", "min"};

uint32_t reduce_code(std::string_view name) {
  for (size_t i = 1; i < std::size(kReduceOps); ++i)
    if (kReduceOps[i] == name) return uint32_t(i);
  return 0;
}

// FNV-1a, then the top bits.
uint32_t hash_bits(std::string_view s, int bits) {
  uint64_t h = 1469598103934665603ull;
  for (char c : s) h = (h ^ uint8_t(c)) * 1099511628211ull;
  return uint32_t(h >> (64 - bits));
}
uint32_t hash_bits(uint64_t v, int bits) {
  return uint32_t((v * 0x9E3779B97F4A7C15ull) >> (64 - bits));
}

uint32_t field(uint32_t sig, int shift, uint32_t mask) { return (sig >> shift) & mask; }

std::string reduce_text(uint32_t code) {
  return code == 0 ? "none" : std::string(kReduceOps[code]);
}
std::string dtype_text(uint32_t code) {
  return code == 0 || code > std::size(kAllDTypes) ? "none"
                                                   : std::string(dtype_name(kAllDTypes[code - 1]));
}

}  // namespace

uint32_t call_signature(const CallFields& f) {
  if (!tunables().collective_agreement) return 0;
  uint32_t dtype = 0;
  if (f.dtype) {
    for (size_t i = 0; i < std::size(kAllDTypes); ++i)
      if (kAllDTypes[i] == *f.dtype) dtype = uint32_t(i + 1);
  }
  return kMarker | reduce_code(f.reduce_op) << kReduceShift | dtype << kDtypeShift |
         hash_bits(f.op, 6) << kOpShift | hash_bits(f.count ^ uint64_t(f.arg) * 0x100000001B3ull, 10) << kCountShift;
}

std::string describe_disagreement(uint32_t mine, int me, uint32_t theirs, int peer) {
  std::string out;
  auto line = [&](std::string_view name, const std::string& a, const std::string& b) {
    if (!out.empty()) out += '\n';
    out += fmt::format("  {}: {} on rank {}; {} on rank {}", name, a, me, b, peer);
  };
  if ((mine == 0) != (theirs == 0)) {
    line("collective agreement (SYMMFLOW_COLLECTIVE_AGREEMENT)", mine ? "on" : "off",
         theirs ? "on" : "off");
    return out;
  }
  if (field(mine, kReduceShift, kReduceMask) != field(theirs, kReduceShift, kReduceMask))
    line("reduce op", reduce_text(field(mine, kReduceShift, kReduceMask)),
         reduce_text(field(theirs, kReduceShift, kReduceMask)));
  if (field(mine, kDtypeShift, kDtypeMask) != field(theirs, kDtypeShift, kDtypeMask))
    line("dtype", dtype_text(field(mine, kDtypeShift, kDtypeMask)),
         dtype_text(field(theirs, kDtypeShift, kDtypeMask)));
  if (field(mine, kOpShift, kOpMask) != field(theirs, kOpShift, kOpMask))
    line("op or algorithm", fmt::format("hash {:#x}", field(mine, kOpShift, kOpMask)),
         fmt::format("hash {:#x} (another collective or algorithm)",
                     field(theirs, kOpShift, kOpMask)));
  if (field(mine, kCountShift, kCountMask) != field(theirs, kCountShift, kCountMask))
    line("element count", fmt::format("hash {:#x}", field(mine, kCountShift, kCountMask)),
         fmt::format("hash {:#x} (another count)", field(theirs, kCountShift, kCountMask)));
  if (out.empty()) line("signature", fmt::format("{:#x}", mine), fmt::format("{:#x}", theirs));
  return out;
}

}  // namespace symmflow::cuda
