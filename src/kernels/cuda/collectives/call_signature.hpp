// The call signature of the GPU collectives (host code): what a kernel's first barrier carries so
// that ranks calling different collectives fail instead of exchanging data. Private to the cuda
// backend.
//
// Note [gpu collective agreement]
// The cpu collectives check their calls in the barrier flag itself (Note [collective agreement]
// in runtime/agreement.cpp). The GPU kernels' flags are call-count tags compared with >=, so the
// signature travels beside them:
//   - flag-based kernels (one_shot, two_shot, the exchange family, reduce_to_root, the fused
//     all-reduce + rms_norm): in phase 0 every block stores the call's signature into
//     sigs[parity][me][block] of each peer before the release store of its tag, and each waiting
//     thread, once the tag arrived, compares the peer's word with its own. A peer is at most one
//     call ahead (every call has a barrier over all ranks), so the slot of the call's parity holds
//     the peer's signature of this very call.
//   - the "ll" one_shot (no flags): each 16-byte line is {d0, tag, d1, mark}, mark = the tag's
//     low byte | signature << 8. The low byte tells this call's half from a stale one (the slot was
//     last written two calls ago); a mark whose low byte is fresh but whose signature differs is
//     a disagreement once it lasts 20 us (a torn line whose stale half is 256k calls old looks
//     the same for a moment).
// A mismatch records kDisagree with the peer and both signatures (status, then the host-mapped
// report); the block moves no data, the others see the status and stop, and the host raises at
// its next call on the communicator or at synchronize(), on every rank, naming the fields that
// differ. The signature is 24 bits: the reduce op and the dtype exactly (named in the error), the
// op with its algorithm as a 6-bit hash and the element count with the op's integer argument (root)
// as a 10-bit hash (a disagreement on them alone is missed with probability 2^-6 and 2^-10). Ranks whose sizes put one into the ll
// path and the other into the flags (up to 256 KiB against more) wait for different words and
// time out naming each other instead: an error too, never wrong data. Off with
// SYMMFLOW_COLLECTIVE_AGREEMENT=0 (signature 0; set it alike on every rank).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "symmflow/core/dtype.hpp"

namespace symmflow::cuda {

struct CallFields {
  std::string_view op;         // the op, with the algorithm for the all-reduce family
  const DType* dtype = nullptr;  // null: not part of the call (copies, barriers)
  std::string_view reduce_op;  // empty: none
  uint64_t count = 0;          // elements (bytes for copies)
  int64_t arg = 0;             // the op's integer argument (reduce_out's root), hashed with count
};

// 0 when tunables().collective_agreement is off, else a 24-bit word with bit 23 set.
uint32_t call_signature(const CallFields& f);

// "reduce op: sum on rank 0; max on rank 1" lines (each starting with two spaces, joined by
// newlines) for the fields in which `mine` (of rank `me`) and `theirs` (of rank `peer`) differ.
std::string describe_disagreement(uint32_t mine, int me, uint32_t theirs, int peer);

}  // namespace symmflow::cuda
