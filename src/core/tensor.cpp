#include "symmflow/core/tensor.hpp"

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "core/host_blocks.hpp"

namespace symmflow {

size_t checked_nbytes(const Shape& shape, DType dtype, std::string_view what) {  // Note [checked sizes]
  constexpr uint64_t kMaxBytes = uint64_t(1) << 62;
  uint64_t bytes = dtype_size(dtype);
  for (int64_t s : shape) {
    if (s < 0) {
      throw_error(ErrorCode::InvalidUsage, "{}: negative dimension in {}", what, shape_str(shape));
    }
    if (s != 0 && bytes > kMaxBytes / uint64_t(s)) {
      for (int64_t t : shape) {  // a zero anywhere makes it empty, whatever the others
        if (t == 0) return 0;
      }
      throw_error(ErrorCode::InvalidUsage,
                  "{}: {} of {} is more than 2^62 bytes (its size overflows)", what,
                  shape_str(shape), dtype_name(dtype));
    }
    bytes *= uint64_t(s);
  }
  return size_t(bytes);
}

std::shared_ptr<Storage> Storage::allocate_host(size_t bytes, bool zero) {
  size_t rounded = (bytes + 63) / 64 * 64;
  void* p = rounded ? detail::host_block_take(rounded) : nullptr;  // Note [host block cache]
  if (rounded && !p) throw_error(ErrorCode::System, "out of host memory allocating {} bytes", bytes);
  if (p && zero) std::memset(p, 0, rounded);
  auto s = std::make_shared<Storage>(p, bytes, Device::cpu(), MemoryKind::regular);
  s->owns_host_memory_ = true;
  return s;
}

namespace {
DeviceAllocator& cuda_allocator() {
  static DeviceAllocator a = nullptr;
  return a;
}
void check_on_host(const Tensor& t, const char* what) {
  SF_CHECK(t.device().type != DeviceType::cuda,
           "{}: tensor {} is on {}; copy it to the host first (aten::copy_ into a host tensor)",
           what, t.str(), t.device().str());
}
}  // namespace

void set_device_allocator(DeviceType type, DeviceAllocator allocator) {
  SF_CHECK(type == DeviceType::cuda, "set_device_allocator: only cuda devices take an allocator");
  cuda_allocator() = allocator;
}

std::shared_ptr<Storage> Storage::allocate(Device device, size_t bytes, bool zero) {
  if (device.type == DeviceType::cpu) return allocate_host(bytes, zero);
  SF_CHECK(device.type == DeviceType::cuda, "cannot allocate memory on {}", device.str());
  SF_CHECK(cuda_allocator(),
           "cannot allocate on {}: the cuda backend is not loaded (link symmflow_cuda and call "
           "symmflow::cuda::bind_device())",
           device.str());
  return cuda_allocator()(device.index, bytes, zero);
}

Storage::Storage(void* data, size_t bytes, Device device, MemoryKind kind)
    : data_(data), bytes_(bytes), device_(device), kind_(kind) {}

Storage::~Storage() {
  if (owns_host_memory_) detail::host_block_give(data_, (bytes_ + 63) / 64 * 64);
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  auto storage = Storage::allocate(device, checked_nbytes(shape, dtype, "empty"));
  return from_storage(std::move(storage), 0, dtype, shape);
}

Tensor Tensor::uninitialized(const Shape& shape, DType dtype, Device device) {
  auto storage = Storage::allocate(device, checked_nbytes(shape, dtype, "empty"), false);
  return from_storage(std::move(storage), 0, dtype, shape);
}

Tensor Tensor::full(const Shape& shape, DType dtype, double value) {
  Tensor t = empty(shape, dtype);
  TensorView v = t.view();
  for (int64_t i = 0; i < t.numel(); ++i) store_double(v, i, value);
  return t;
}

Tensor Tensor::meta(const Shape& shape, DType dtype, Strides strides) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = shape;
  t.strides_ = strides.empty() ? contiguous_strides(shape) : std::move(strides);
  t.defined_ = true;
  return t;
}

Tensor Tensor::from_storage(std::shared_ptr<Storage> storage, size_t offset_bytes, DType dtype,
                            const Shape& shape, Strides strides) {
  Tensor t = meta(shape, dtype, std::move(strides));
  t.storage_ = std::move(storage);
  t.offset_ = offset_bytes;
  return t;
}

void* Tensor::raw_data() const {
  if (!storage_) return nullptr;
  // An empty storage has no data pointer, and a view of it may still carry an offset: the address
  // is computed as an integer (never dereferenced: such a view has no element), since adding an
  // offset to a null pointer is undefined (clang's UBSan, the asan tree, reports it).
  return reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(storage_->data()) + offset_);
}

TensorView Tensor::view() const {
  return TensorView{raw_data(), dtype_, shape_, strides_, device(), storage_.get()};
}

Tensor Tensor::as_strided(const Shape& shape, const Strides& strides,
                          int64_t storage_offset_elems) const {
  SF_CHECK(shape.size() == strides.size(), "as_strided: shape {} and strides {} differ in rank",
           shape_str(shape), shape_str(strides));
  Tensor t = *this;
  t.shape_ = shape;
  t.strides_ = strides;
  t.offset_ = size_t(int64_t(offset_) + storage_offset_elems * int64_t(dtype_size(dtype_)));
  return t;
}

double load_double(const TensorView& t, int64_t off) {
  return visit_dtype(t.dtype, [&](auto tag) -> double {
    using T = typename decltype(tag)::type;
    return double(static_cast<const T*>(t.data)[off]);
  });
}

void store_double(const TensorView& t, int64_t off, double value) {
  visit_dtype(t.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      static_cast<T*>(t.data)[off] = T(float(value));
    } else if constexpr (std::is_unsigned_v<T> && !std::is_same_v<T, bool>) {
      // A negative value into an unsigned dtype wraps as PyTorch's does (-1 -> 0xffffffff for u32);
      // a double converted straight to an unsigned type out of its range is undefined.
      static_cast<T*>(t.data)[off] = static_cast<T>(static_cast<int64_t>(value));
    } else {
      static_cast<T*>(t.data)[off] = static_cast<T>(value);
    }
  });
}

double Tensor::item_as_double(std::span<const int64_t> index) const {
  check_on_host(*this, "item_as_double");
  SF_CHECK(int64_t(index.size()) == dim(), "index of rank {} for tensor {}", index.size(), str());
  int64_t off = 0;
  for (size_t i = 0; i < index.size(); ++i) off += index[i] * strides_[i];
  return load_double(view(), off);
}

std::vector<double> Tensor::to_doubles() const {
  check_on_host(*this, "to_doubles");
  std::vector<double> out(static_cast<size_t>(numel()));
  if (out.empty()) return out;
  TensorView v = view();
  std::vector<int64_t> idx(shape_.size(), 0);
  for (size_t n = 0; n < out.size(); ++n) {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * strides_[d];
    out[n] = load_double(v, off);
    for (size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < shape_[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

Tensor Tensor::contiguous() const {
  if (is_contiguous() || is_meta()) return *this;
  check_on_host(*this, "contiguous");
  Tensor out = empty(shape_, dtype_);
  size_t elem = dtype_size(dtype_);
  std::vector<int64_t> idx(shape_.size(), 0);
  char* dst = static_cast<char*>(out.raw_data());
  const char* src = static_cast<const char*>(raw_data());
  for (int64_t n = 0; n < numel(); ++n) {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * strides_[d];
    std::memcpy(dst + size_t(n) * elem, src + off * int64_t(elem), elem);
    for (size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < shape_[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

std::string Tensor::str() const {
  if (!defined_) return "undefined";
  return fmt::format("{}{}", dtype_name(dtype_), shape_str(shape_));
}

void Tensor::release() {
  storage_.reset();
  offset_ = 0;
  shape_.clear();
  strides_.clear();
  defined_ = false;
}

}  // namespace symmflow
