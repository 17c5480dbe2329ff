// GPU memory shared between processes (ranks started by mpirun, one process per GPU): an
// allocation is made with the driver's virtual memory API (cuMemCreate) exportable as a POSIX
// file descriptor, the descriptor travels to each peer over a Unix-domain datagram socket
// (SCM_RIGHTS; every process binds the abstract address "symmflow-ipc-<pid>"), and the peer
// imports and maps it into its own address space with access for its GPU. The driver functions
// are looked up through the runtime (cudaGetDriverEntryPointByVersion): no link to libcuda.
// Private to the cuda backend (heap.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace symmflow::cuda::ipc {

struct Mapping {
  void* ptr = nullptr;
  size_t size = 0;
  unsigned long long handle = 0;  // CUmemGenericAllocationHandle
};

// A zero-initialisation is the caller's; `size` is rounded up to the allocation granularity.
Mapping create(int device, size_t bytes);
// The descriptor that lets a peer import `m` (the caller closes it).
int export_fd(const Mapping& m);
// Maps a peer's allocation of `size` bytes (from its descriptor) with access for `device`.
Mapping import(int fd, size_t size, int device);
void release(const Mapping& m);

// This process's pid, after binding its socket (call before peers may send to it).
int bind_socket();
// Sends `fd` to the process `pid`, tagged with (key, member).
void send_fd(int pid, const std::string& key, int member, int fd);
// Receives the descriptor tagged (key, member), keeping others for later calls; raises Timeout
// after `timeout_s` naming `what`.
int receive_fd(const std::string& key, int member, double timeout_s, const std::string& what);

}  // namespace symmflow::cuda::ipc
