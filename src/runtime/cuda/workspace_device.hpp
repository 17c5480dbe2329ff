// The device-side view of a cuda Communicator's workspace: a plain struct passed by value to the
// collective kernels (no CUDA types, so host code builds it without CUDA headers).
//
// Per rank, in device memory:
//   staging  2 parities x world sources x stage_bytes: what peers pushed to this rank
//   flags    2 phases x kMaxRanks sources x kMaxBlocks blocks of uint32: the call tag each peer's
//            block last signalled to this rank (monotonic; a waiter waits for tag >= its own)
//   calls    this rank's count of collective calls (read by every block, advanced by the last)
//   done     blocks of the running call that finished
//   status   0, or 1 + the group rank a block timed out waiting for
// The arrays of pointers hold every member's address of its staging and flags, indexed by group
// rank (peer access makes them addressable from this rank's GPU).
#pragma once

#include <cstdint>

namespace symmflow::cuda {

constexpr int kMaxRanks = 8;
constexpr int kMaxBlocks = 512;
constexpr int kPhases = 2;
constexpr int64_t kLLMaxBytes = 256 << 10;  // one_shot sends lines (2 x the payload) up to here

struct WorkspaceView {
  char* staging[kMaxRanks];
  uint32_t* flags[kMaxRanks];
  char* ll[kMaxRanks];    // staging of the one_shot "ll" lines: 2 parities x world x ll_bytes
  char* data[kMaxRanks];  // two_shot: every member's address of the buffer reduced in place
  uint32_t* calls;
  uint32_t* done;
  int* status;
  int64_t stage_bytes;
  int64_t ll_bytes;
  uint64_t timeout_ns;
  int rank;
  int world;
};

constexpr int64_t flag_index(int phase, int src, int block) {
  return (int64_t(phase) * kMaxRanks + src) * kMaxBlocks + block;
}
constexpr int64_t kFlagWords = int64_t(kPhases) * kMaxRanks * kMaxBlocks;

}  // namespace symmflow::cuda
