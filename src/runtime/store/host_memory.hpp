// Host shared memory of the `store` transport (private header): one POSIX shared-memory object per
// rank and allocation, mapped by every member of the allocation on one host.
//
// Note [store shared memory]: each member creates its own block with shm_open under a name unique
// on the host (/symmflow.<pid namespace>.<pid>.<n>, O_EXCL, 0600), sized with ftruncate (so it
// reads as zeros) and its pages reserved at once with posix_fallocate, maps it, and publishes the
// name, or why it could not make one, through the store; every member then maps every peer's
// block by name and reports success or what failed; once every member has mapped every block,
// each unlinks its own name. From then on the memory has no name, and the kernel frees it when
// the last mapping goes, in whatever process that is: a SharedRegion unmaps its blocks when its
// last reference goes, and a peer that still maps this rank's block (a late put_signal) keeps it
// alive. No file descriptor ever crosses a process boundary (no Unix socket, no SCM_RIGHTS): names
// are enough because the members share a host, which the bootstrap checks first. The price is
// that the ranks must see the same /dev/shm (the same container, or one that shares the IPC
// namespace); a rank that cannot open a peer's name says so, and every member raises.
//
// Reserving the pages: /dev/shm is a tmpfs of bounded size (64 MiB in a default Docker
// container). ftruncate alone makes a sparse file, and the first store to a page the tmpfs no
// longer has kills the process with SIGBUS, whenever that happens. So create() compares the size
// with the free space (statvfs) and then reserves every page (posix_fallocate): a block that does
// not fit raises "out of shared memory in /dev/shm: need N bytes, free M bytes", and since each
// member publishes that instead of a name, every member raises it, naming each rank's result.
// The cost is that a heap's memory is taken when the heap is made, not when first touched.
//
// Leaks: a name lives from create() until its creator unlinks it after the exchange. A creator
// that dies in that window (SIGKILL, a crash) cannot unlink it, so the others do, by the pid in
// the name: a rank that sees a same-host peer's process end (Note [dead peers] in
// store_bootstrap.cpp, through a pidfd) removes that pid's blocks, and the first create() of a
// process removes the blocks of every creator that no longer exists (kill(pid, 0) says ESRCH),
// for when no peer was left to see it. Only names of this pid namespace (pids elsewhere mean
// nothing here) and of this user are touched, and a dead creator's blocks are never needed
// again: its peers fail naming it. A pid reused by a live process keeps its predecessor's leak
// until that process ends too: harmless.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "symmflow/runtime/bootstrap.hpp"

namespace symmflow {

// One mapping of a block; unmapped (and, while `owned_name` is set, unlinked) on destruction.
class HostBlock {
 public:
  HostBlock() = default;
  HostBlock(const HostBlock&) = delete;
  HostBlock& operator=(const HostBlock&) = delete;
  HostBlock(HostBlock&& o) noexcept { *this = std::move(o); }
  HostBlock& operator=(HostBlock&& o) noexcept;
  ~HostBlock();

  // A new zeroed block of at least `bytes` (rounded up to pages, every page reserved), named
  // uniquely on this host; raises System "out of shared memory in /dev/shm: ..." when it does
  // not fit.
  static HostBlock create(size_t bytes);
  // Maps the block another process created under `name`; throws System saying what failed.
  static HostBlock open(const std::string& name, size_t bytes);

  void* data() const { return data_; }
  const std::string& name() const { return name_; }
  // Removes the name (the memory stays while mapped anywhere). Idempotent.
  void unlink();

 private:
  void release();  // unlink (if owned) and unmap
  void* data_ = nullptr;
  size_t mapped_ = 0;
  std::string name_;
  bool owned_name_ = false;  // this process created the name and has not unlinked it yet
};

// Unlinks the blocks (Note [store shared memory]) of this user and pid namespace whose creator
// was `dead_pid`, or, for 0, whose creator no longer exists. Never this process's own.
void sweep_host_blocks(int dead_pid);

// Free bytes of /dev/shm (UINT64_MAX when unknown), and the System error saying a need does not
// fit ("out of shared memory in /dev/shm: need N bytes, free M bytes (...)"), as the store and
// mpi transports report it (Note [mpi shared memory room] in src/runtime/mpi/mpi_bootstrap.cpp).
uint64_t free_shm_bytes();
std::string out_of_shm_text(uint64_t need, uint64_t free);

// Rounds `bytes` up to whole pages (at least one).
size_t host_block_bytes(size_t bytes);

class HostRegion : public SharedRegion {
 public:
  HostRegion(std::vector<HostBlock> blocks, size_t mine, size_t bytes)
      : blocks_(std::move(blocks)), mine_(mine), bytes_(bytes) {}
  void* local() const override { return blocks_[mine_].data(); }
  void* peer(int i) const override { return blocks_.at(size_t(i)).data(); }
  size_t bytes() const override { return bytes_; }

 private:
  std::vector<HostBlock> blocks_;
  size_t mine_;
  size_t bytes_;
};

}  // namespace symmflow
