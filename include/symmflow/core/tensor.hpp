// Storage, TensorView (non-owning) and Tensor (owning, shares its Storage).
//
// A Storage is one allocation with a device and a memory kind. The runtime derives symmetric
// storages from it (their peers' pointers live there); core only knows that a storage is symmetric.
// A tensor on Device::meta() has dtype, shape and strides but no storage: shape functions and the
// compiler use such tensors to describe values without memory.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "symmflow/core/device.hpp"
#include "symmflow/core/dtype.hpp"
#include "symmflow/core/error.hpp"
#include "symmflow/core/shape.hpp"

namespace symmflow {

// Note [checked sizes]: the bytes of a dense `shape` of `dtype`, computed without overflow: a
// negative dimension, or more than 2^62 bytes (no machine has them; the product would wrap
// and allocate a few bytes for a huge tensor), is InvalidUsage naming `what` and the shape. Every
// allocation from a shape goes through it: the C++ API, Python and symmflow.torch share it.
size_t checked_nbytes(const Shape& shape, DType dtype, std::string_view what);


class Storage {
 public:
  // Allocates `bytes` of 64-byte aligned host memory, zero-filled unless `zero` is false.
  static std::shared_ptr<Storage> allocate_host(size_t bytes, bool zero = true);
  // Allocates on `device`: host memory for cpu, the registered allocator otherwise (a backend
  // library registers one for its device type; InvalidUsage when none is registered).
  static std::shared_ptr<Storage> allocate(Device device, size_t bytes, bool zero = true);

  Storage(void* data, size_t bytes, Device device, MemoryKind kind);
  virtual ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  MemoryKind kind() const { return kind_; }
  // The group of a symmetric allocation's heap ("" for any other memory).
  virtual std::string_view group_name() const { return {}; }

 protected:
  void* data_;
  size_t bytes_;
  Device device_;
  MemoryKind kind_;
  bool owns_host_memory_ = false;
};

// A backend's allocator of regular memory on its devices (zero-filled when `zero`), registered
// once by the backend library (the cuda backend on its first bind_device()).
using DeviceAllocator = std::shared_ptr<Storage> (*)(int index, size_t bytes, bool zero);
void set_device_allocator(DeviceType type, DeviceAllocator allocator);

// Non-owning description of strided memory. `storage` may be null for foreign memory.
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::f32;
  Shape shape;
  Strides strides;
  Device device;
  const Storage* storage = nullptr;

  int64_t dim() const { return int64_t(shape.size()); }
  int64_t numel() const { return symmflow::numel(shape); }
  bool is_contiguous() const { return symmflow::is_contiguous(shape, strides); }
  template <typename T>
  T* data_as() const { return static_cast<T*>(data); }
  bool is_symmetric() const { return storage && storage->kind() == MemoryKind::symmetric; }
};

class Tensor {
 public:
  Tensor() = default;
  // Contiguous, zero-filled tensor (on the host unless `device` says otherwise).
  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu());
  // Contiguous tensor whose contents are unspecified: for outputs a kernel fully writes.
  static Tensor uninitialized(const Shape& shape, DType dtype, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype) { return empty(shape, dtype); }
  static Tensor full(const Shape& shape, DType dtype, double value);
  // Shape and dtype only, no memory.
  static Tensor meta(const Shape& shape, DType dtype, Strides strides = {});
  // A view into `storage` at `offset_bytes`.
  static Tensor from_storage(std::shared_ptr<Storage> storage, size_t offset_bytes, DType dtype,
                             const Shape& shape, Strides strides = {});
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape);

  bool defined() const { return defined_; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  const Strides& strides() const { return strides_; }
  int64_t dim() const { return int64_t(shape_.size()); }
  int64_t size(int64_t d) const { return shape_.at(size_t(wrap_dim(d, dim()))); }
  int64_t numel() const { return symmflow::numel(shape_); }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype_); }
  size_t offset_bytes() const { return offset_; }
  Device device() const { return storage_ ? storage_->device() : Device::meta(); }
  bool is_meta() const { return defined_ && !storage_; }
  bool is_contiguous() const { return symmflow::is_contiguous(shape_, strides_); }
  bool is_symmetric() const { return storage_ && storage_->kind() == MemoryKind::symmetric; }
  const std::shared_ptr<Storage>& storage() const { return storage_; }

  void* raw_data() const;
  template <typename T>
  T* data() const {
    SF_CHECK(dtype_of<T> == dtype_, "tensor holds {}, accessed as {}", dtype_name(dtype_),
             dtype_name(dtype_of<T>));
    return static_cast<T*>(raw_data());
  }
  TensorView view() const;

  // Same storage, new shape/strides/offset (elements).
  Tensor as_strided(const Shape& shape, const Strides& strides, int64_t storage_offset_elems) const;
  // Element at a multi-index, converted to double (for tests and printing). These host accessors
  // (item_as_double, contiguous, to_doubles) refuse a tensor on a GPU: copy it to the host first.
  double item_as_double(std::span<const int64_t> index) const;
  // Contiguous copy (or *this when already contiguous).
  Tensor contiguous() const;
  // Copy of every element in row-major order, converted to double.
  std::vector<double> to_doubles() const;
  std::string str() const;  // "f32[2, 3]"
  // Undefined again, its storage let go, keeping the capacity of its shape and strides, so that
  // assigning a tensor of as many dims later allocates nothing (an executor's launch record
  // refills its tensors every call: Note [launch records] in exec/executable.cpp).
  void release();

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;
  DType dtype_ = DType::f32;
  Shape shape_;
  Strides strides_;
  bool defined_ = false;
};

template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape) {
  SF_CHECK(int64_t(values.size()) == symmflow::numel(shape),
           "from_vector: {} values for shape {}", values.size(), shape_str(shape));
  Tensor t = empty(shape, dtype_of<T>);
  T* out = t.data<T>();
  for (size_t i = 0; i < values.size(); ++i) out[i] = values[i];
  return t;
}

// Writes `value` converted to t's dtype at element offset `elem_offset` of t's data.
void store_double(const TensorView& t, int64_t elem_offset, double value);
double load_double(const TensorView& t, int64_t elem_offset);

}  // namespace symmflow
