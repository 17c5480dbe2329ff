// Device memory, streams and GPU symmetric tensors (cuda_memory.hpp).
#include <algorithm>

#include <cuda_runtime_api.h>

#include "runtime/cuda/check.hpp"
#include "symmflow/runtime/cuda_memory.hpp"
#include "symmflow/runtime/heap.hpp"
#include "symmflow/runtime/runtime.hpp"

namespace symmflow::cuda {

namespace {

thread_local cudaStream_t tls_stream = nullptr;
// The innermost open CaptureScratch's live count (Note [scratch inside a capture]).
thread_local std::shared_ptr<std::atomic<long>>* tls_scratch = nullptr;

class DeviceStorage : public Storage {
 public:
  DeviceStorage(void* p, size_t bytes, int device, std::shared_ptr<std::atomic<long>> scratch)
      : Storage(p, bytes, Device::cuda(device), MemoryKind::regular), scratch_(std::move(scratch)) {
    if (scratch_) ++*scratch_;
  }
  // Stream-ordered (Note [ranks sharing a GPU] in heap.cpp): freed after the work already
  // enqueued on the freeing thread's stream; inside a capture, a free node of its graph.
  ~DeviceStorage() override {
    if (data_) cudaFreeAsync(data_, tls_stream);
    if (scratch_) --*scratch_;
  }

 private:
  std::shared_ptr<std::atomic<long>> scratch_;  // set when allocated inside a capture
};

}  // namespace

void* current_stream() { return tls_stream; }
void set_current_stream(void* stream) { tls_stream = static_cast<cudaStream_t>(stream); }

void synchronize() { SF_CUDA_CHECK(cudaStreamSynchronize(tls_stream)); }

bool capturing() {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  SF_CUDA_CHECK(cudaStreamIsCapturing(tls_stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

void check_not_capturing(std::string_view what) {
  SF_CHECK(!capturing(),
           "{} would allocate or rendezvous while the stream is being captured into a CUDA graph; "
           "do it before the capture (the executor does all of it when it is constructed)",
           what);
}

CaptureScratch::CaptureScratch()
    : live_(std::make_shared<std::atomic<long>>(0)), saved_(tls_scratch) {
  tls_scratch = &live_;
}
CaptureScratch::~CaptureScratch() { tls_scratch = saved_; }
long CaptureScratch::live() const { return live_->load(); }

std::shared_ptr<Storage> allocate_device(int device, size_t bytes, bool zero) {
  // Note [scratch inside a capture]
  std::shared_ptr<std::atomic<long>> scratch;
  if (capturing()) {
    if (!tls_scratch) check_not_capturing("allocating GPU memory");
    scratch = *tls_scratch;
  }
  int saved = 0;
  SF_CUDA_CHECK(cudaGetDevice(&saved));
  if (saved != device) SF_CUDA_CHECK(cudaSetDevice(device));
  void* p = nullptr;
  const size_t rounded = std::max<size_t>((bytes + 255) / 256 * 256, 256);
  cudaError_t err = cudaMallocAsync(&p, rounded, tls_stream);
  if (err == cudaSuccess && zero) err = cudaMemsetAsync(p, 0, rounded, tls_stream);
  if (saved != device) cudaSetDevice(saved);
  if (err != cudaSuccess) {
    cudaGetLastError();
    if (p) cudaFreeAsync(p, tls_stream);
    throw_error(ErrorCode::Cuda, "allocating {} bytes on cuda:{} failed: {}", bytes, device,
                cudaGetErrorString(err));
  }
  return std::make_shared<DeviceStorage>(p, bytes, device, std::move(scratch));
}

SymmetricDeviceStorage::SymmetricDeviceStorage(std::shared_ptr<DeviceHeap> heap)
    : Storage(heap->local(), heap->bytes(), Device::cuda(heap->device()), MemoryKind::symmetric),
      heap_(std::move(heap)) {}

std::string_view SymmetricDeviceStorage::group_name() const { return heap_->group()->name(); }

Tensor empty_symmetric(const Shape& shape, DType dtype, std::string_view group) {
  check_not_capturing("cuda::empty_symmetric");
  const size_t bytes = checked_nbytes(shape, dtype, "cuda::empty_symmetric");  // Note [checked sizes]
  auto heap = DeviceHeap::allocate(Runtime::current().group(group), bytes, "cuda::empty_symmetric");
  return Tensor::from_storage(std::make_shared<SymmetricDeviceStorage>(std::move(heap)), 0, dtype,
                              shape);
}

const DeviceHeap& heap_of(const Tensor& t, std::string_view op, std::string_view arg,
                          const Group& group) {
  const auto* s = dynamic_cast<const SymmetricDeviceStorage*>(t.storage().get());
  if (!s) {
    if (t.numel() == 0) refuse_empty_symmetric(op, arg, t);  // Note [empty symmetric arguments]
    invalid_usage(
        "argument '{}' of {} ({} on {}) is not in GPU symmetric memory; allocate it with "
        "symmflow::cuda::empty_symmetric(shape, dtype, \"{}\") (or let the compiler place it)",
        arg, op, t.str(), t.device().str(), group.name());
  }
  SF_CHECK(s->heap()->group()->name() == group.name(),
           "argument '{}' of {} was allocated in group '{}' but the op runs in group '{}'", arg,
           op, s->heap()->group()->name(), group.name());
  SF_CHECK(t.is_contiguous(),
           "argument '{}' of {} ({} with strides {}) must be contiguous: peers address it at the "
           "same offsets",
           arg, op, t.str(), shape_str(t.strides()));
  return *s->heap();
}

}  // namespace symmflow::cuda
