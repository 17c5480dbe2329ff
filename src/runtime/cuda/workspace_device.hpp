// The device-side view of a cuda Communicator's workspace: a plain struct passed by value to the
// collective kernels (no CUDA types, so host code builds it without CUDA headers).
//
// Per rank, in device memory:
//   staging  2 parities x world sources x stage_bytes: what peers pushed to this rank
//   flags    2 phases x kMaxRanks sources x kMaxBlocks blocks of uint32: the call tag each peer's
//            block last signalled to this rank (monotonic; a waiter waits for tag >= its own)
//   calls    this rank's count of collective calls (read by every block, advanced by the last)
//   done     blocks of the running call that finished
//   status   0, or status_code(op, why, peer) of the first failure: the op of the call, why it
//            failed (timed out waiting for `peer`, `peer`'s all-to-all splits are invalid, or
//            `peer` called another collective: its signature differs)
// and in pinned host memory mapped into the device (read by the host at every call, no copy):
//   report   {status, peer's signature, own signature} of the first failure, written by the
//            block that recorded it (status last)
//   sigs     2 parities x kMaxRanks sources x kMaxBlocks blocks of uint32: the call signature
//            each peer's block stored before its phase-0 flag (Note [gpu collective agreement]
//            in kernels/cuda/collectives/call_signature.hpp); in the flags heap, after the flags
//   signals  channels x kMaxRanks sources of uint32: put_signal/wait_signal flags (0 or 1)
//   put_done channels x kMaxRanks: blocks of a running put_signal to (channel, peer) that finished
// The arrays of pointers hold every member's address of its staging and flags, indexed by group
// rank (peer access makes them addressable from this rank's GPU).
#pragma once

#include <cstdint>

namespace symmflow::cuda {

constexpr int kMaxRanks = 8;
constexpr int kMaxBlocks = 512;
constexpr int kPhases = 2;
constexpr int64_t kLLMaxBytes = 256 << 10;  // one_shot sends lines (2 x the payload) up to here

// Why a call failed, recorded with its op (an index the host keeps) and the peer.
enum FailReason : int { kTimedOut = 0, kBadSplits = 1, kDisagree = 2 };
constexpr int status_code(int op, int why, int peer) { return (op << 16) | (why << 8) | (peer + 1); }

struct WorkspaceView {
  char* staging[kMaxRanks];
  uint32_t* flags[kMaxRanks];
  char* ll[kMaxRanks];    // staging of the one_shot "ll" lines: 2 parities x world x ll_bytes
  char* data[kMaxRanks];  // two_shot: every member's address of the buffer reduced in place
  uint32_t* signals[kMaxRanks];
  uint32_t* sigs[kMaxRanks];
  uint32_t* put_done;
  uint32_t* calls;
  uint32_t* done;
  int* status;
  volatile int* report;  // host-mapped: {status, peer's signature, own signature}
  int64_t stage_bytes;
  int64_t ll_bytes;
  uint64_t timeout_ns;
  int rank;
  int world;
  int channels;
  int op;  // the host's code of the calling op (set per launch; Communicator::State::code)
  uint32_t sig;  // this call's signature (24 bits, never 0; 0: agreement off on this rank)
};

constexpr int64_t flag_index(int phase, int src, int block) {
  return (int64_t(phase) * kMaxRanks + src) * kMaxBlocks + block;
}
constexpr int64_t kFlagWords = int64_t(kPhases) * kMaxRanks * kMaxBlocks;
constexpr int64_t sig_index(int parity, int src, int block) {
  return (int64_t(parity) * kMaxRanks + src) * kMaxBlocks + block;
}
constexpr int64_t kSigWords = 2 * int64_t(kMaxRanks) * kMaxBlocks;

}  // namespace symmflow::cuda
