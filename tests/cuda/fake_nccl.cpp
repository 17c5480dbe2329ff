// Stand-ins for libnccl.so.2 that the NCCL loader must refuse (Note [nccl engine] in
// src/kernels/cuda/collectives/nccl.cpp), built as two shared libraries for
// cuda_spanning_test.cpp's NcclLoader tests, which need no GPU: fake_nccl_old exports every
// function the loader binds but says it is NCCL 2.10.0; fake_nccl_partial exports only
// ncclGetVersion. Nothing here is ever called on a GPU.
#include <cstddef>

extern "C" {

int ncclGetVersion(int* version) {
  *version = 21000;
  return 0;
}

#ifndef FAKE_NCCL_PARTIAL
struct FakeId {
  char internal[128];
};
int ncclGetUniqueId(FakeId*) { return 5; }
int ncclCommInitRank(void**, int, FakeId, int) { return 5; }
int ncclCommDestroy(void*) { return 0; }
int ncclCommAbort(void*) { return 0; }
const char* ncclGetErrorString(int) { return "fake"; }
int ncclCommGetAsyncError(void*, int* e) {
  *e = 0;
  return 0;
}
int ncclAllReduce(const void*, void*, size_t, int, int, void*, void*) { return 5; }
int ncclReduce(const void*, void*, size_t, int, int, int, void*, void*) { return 5; }
int ncclReduceScatter(const void*, void*, size_t, int, int, void*, void*) { return 5; }
int ncclAllGather(const void*, void*, size_t, int, void*, void*) { return 5; }
int ncclBroadcast(const void*, void*, size_t, int, int, void*, void*) { return 5; }
int ncclSend(const void*, size_t, int, int, void*, void*) { return 5; }
int ncclRecv(void*, size_t, int, int, void*, void*) { return 5; }
int ncclGroupStart() { return 0; }
int ncclGroupEnd() { return 0; }
#endif
}
