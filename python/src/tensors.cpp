// DLPack in and out of symmflow Tensors (contract in binding.hpp), and call_op's arguments.
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "binding.hpp"

namespace symmflow::python {

namespace {

// Note [exported storages]: every Tensor this module hands to Python is registered here by the
// byte range of its storage until the array that owns it dies; an imported array whose bytes lie
// in a registered range is rebuilt on that storage (same kind: symmetric stays symmetric).
struct Exported {
  uintptr_t end = 0;
  std::shared_ptr<Storage> storage;
  size_t arrays = 0;  // live arrays over this storage
};
std::mutex registry_mutex;
std::map<uintptr_t, Exported>& registry() {
  static auto* r = new std::map<uintptr_t, Exported>;  // never destroyed: outlives the module
  return *r;
}

void register_storage(const std::shared_ptr<Storage>& s) {
  std::lock_guard lock(registry_mutex);
  auto begin = reinterpret_cast<uintptr_t>(s->data());
  Exported& e = registry()[begin];
  if (e.arrays == 0) e = {begin + s->bytes(), s, 0};
  ++e.arrays;
}

void unregister_storage(const Storage* s) {
  std::lock_guard lock(registry_mutex);
  auto it = registry().find(reinterpret_cast<uintptr_t>(s->data()));
  if (it != registry().end() && it->second.storage.get() == s && --it->second.arrays == 0)
    registry().erase(it);
}

// The registered storage holding [begin, end), or null.
std::shared_ptr<Storage> find_storage(uintptr_t begin, uintptr_t end) {
  std::lock_guard lock(registry_mutex);
  auto it = registry().upper_bound(begin);
  if (it == registry().begin()) return nullptr;
  --it;
  if (begin >= it->first && end <= it->second.end) return it->second.storage;
  return nullptr;
}

DType dtype_of_dlpack(nb::dlpack::dtype t, const std::string& what) {
  using Code = nb::dlpack::dtype_code;
  const auto code = Code(t.code);
  if (t.lanes == 1) {
    if (code == Code::Float && t.bits == 32) return DType::f32;
    if (code == Code::Float && t.bits == 64) return DType::f64;
    if (code == Code::Float && t.bits == 16) return DType::f16;
    if (code == Code::Bfloat && t.bits == 16) return DType::bf16;
    if (code == Code::Int && t.bits == 8) return DType::i8;
    if (code == Code::Int && t.bits == 32) return DType::i32;
    if (code == Code::Int && t.bits == 64) return DType::i64;
    if (code == Code::UInt && t.bits == 32) return DType::u32;
    if (code == Code::Bool && t.bits == 8) return DType::boolean;
  }
  invalid_usage("{}: DLPack dtype (code {}, {} bits, {} lanes) has no symmflow dtype (f32, f16, "
                "bf16, f64, i8, i32, i64, u32, bool)", what, int(t.code), int(t.bits),
                int(t.lanes));
}

nb::dlpack::dtype dlpack_of(DType t) {
  using Code = nb::dlpack::dtype_code;
  auto make = [](Code c, int bits) {
    nb::dlpack::dtype d;
    d.code = uint8_t(c);
    d.bits = uint8_t(bits);
    d.lanes = 1;
    return d;
  };
  switch (t) {
    case DType::f32: return make(Code::Float, 32);
    case DType::f64: return make(Code::Float, 64);
    case DType::f16: return make(Code::Float, 16);
    case DType::bf16: return make(Code::Bfloat, 16);
    case DType::i8: return make(Code::Int, 8);
    case DType::i32: return make(Code::Int, 32);
    case DType::i64: return make(Code::Int, 64);
    case DType::u32: return make(Code::UInt, 32);
    case DType::boolean: return make(Code::Bool, 8);
  }
  invalid_usage("export: unknown dtype");
}

}  // namespace

TensorView import_view(const Array& a, const std::string& what) {
  TensorView v;
  v.data = a.data();
  v.dtype = dtype_of_dlpack(a.dtype(), what);
  if (a.device_type() == nb::device::cpu::value) {
    v.device = Device::cpu();
  } else if (a.device_type() == nb::device::cuda::value) {
    v.device = Device::cuda(a.device_id());
  } else {
    invalid_usage("{}: DLPack device type {} is neither cpu nor cuda", what, a.device_type());
  }
  for (size_t d = 0; d < a.ndim(); ++d) {
    v.shape.push_back(int64_t(a.shape(d)));
    const int64_t stride = a.stride_ptr() ? a.stride(d) : 0;
    SF_CHECK(stride >= 0,
             "{}: negative strides are not supported (dimension {} has stride {}); pass a "
             "contiguous copy", what, d, stride);
    v.strides.push_back(stride);
  }
  if (!a.stride_ptr()) v.strides = contiguous_strides(v.shape);
  return v;
}

Tensor import_tensor(const Array& a, const std::string& what) {
  TensorView v = import_view(a, what);
  int64_t extent = v.numel() > 0 ? 1 : 0;
  for (size_t d = 0; d < v.shape.size() && extent > 0; ++d) extent += (v.shape[d] - 1) * v.strides[d];
  const size_t bytes = size_t(extent) * dtype_size(v.dtype);
  const auto begin = reinterpret_cast<uintptr_t>(v.data);
  std::shared_ptr<Storage> storage = find_storage(begin, begin + bytes);
  size_t offset = 0;
  if (storage && storage->device() == v.device) {
    offset = begin - reinterpret_cast<uintptr_t>(storage->data());
  } else {
    storage = std::make_shared<Storage>(v.data, bytes, v.device, MemoryKind::regular);
  }
  return Tensor::from_storage(storage, offset, v.dtype, v.shape, v.strides);
}

nb::object export_tensor(const Tensor& t) {
  SF_CHECK(t.defined() && !t.is_meta(), "export: tensor {} has no memory", t.str());
  auto* owned = new Tensor(t);
  if (t.storage()) register_storage(t.storage());
  nb::capsule owner(owned, [](void* p) noexcept {
    auto* tensor = static_cast<Tensor*>(p);
    if (tensor->storage()) unregister_storage(tensor->storage().get());
    delete tensor;
  });
  std::vector<size_t> shape(t.shape().begin(), t.shape().end());
  const Device device = t.device();
  const int device_type =
      device.type == DeviceType::cuda ? nb::device::cuda::value : nb::device::cpu::value;
  nb::ndarray<nb::array_api> array(t.raw_data(), shape.size(), shape.data(), owner, t.strides().data(),
              dlpack_of(t.dtype()), device_type, device.type == DeviceType::cuda ? device.index : 0);
  return nb::cast(array, nb::rv_policy::reference);
}

nb::object export_numpy(const Tensor& t) {
  Tensor host = api::to_host(t);
  if (host.dtype() == DType::bf16) {
    Tensor wide = Tensor::empty(host.shape(), DType::f32);
    api::copy_tensor(wide, host);
    host = wide;
  }
  nb::object numpy = nb::module_::import_("numpy");
  return numpy.attr("from_dlpack")(export_tensor(host));
}

Value import_value(const nb::handle& o, const std::string& what) {
  if (o.is_none()) return Value(None{});
  if (nb::isinstance<nb::bool_>(o)) return Value(nb::cast<bool>(o));
  if (nb::isinstance<nb::int_>(o)) return Value(nb::cast<int64_t>(o));
  if (nb::isinstance<nb::float_>(o)) return Value(nb::cast<double>(o));
  if (nb::isinstance<nb::str>(o)) return Value(nb::cast<std::string>(o));
  if (nb::isinstance<nb::list>(o) || nb::isinstance<nb::tuple>(o)) {
    std::vector<int64_t> ints;
    std::vector<double> doubles;
    std::vector<Tensor> tensors;
    size_t i = 0;
    for (nb::handle item : o) {
      const std::string item_what = fmt::format("{}[{}]", what, i++);
      if (nb::isinstance<nb::int_>(item) && !nb::isinstance<nb::bool_>(item)) {
        ints.push_back(nb::cast<int64_t>(item));
        doubles.push_back(double(ints.back()));
      } else if (nb::isinstance<nb::float_>(item)) {
        doubles.push_back(nb::cast<double>(item));
      } else {
        Array a;
        SF_CHECK(nb::try_cast(item, a), "{}: expected an int, a float or a DLPack tensor, got {}",
                 item_what, nb::cast<std::string>(nb::str(item.type().attr("__name__"))));
        tensors.push_back(import_tensor(a, item_what));
      }
    }
    SF_CHECK(tensors.empty() || tensors.size() == i, "{}: a list mixes tensors and numbers", what);
    if (!tensors.empty()) return Value(std::move(tensors));
    if (ints.size() == i) return Value(std::move(ints));
    return Value(std::move(doubles));
  }
  Array a;
  SF_CHECK(nb::try_cast(o, a),
           "{}: expected a DLPack tensor, a str, an int, a float, a bool, None or a list, got {}",
           what, nb::cast<std::string>(nb::str(o.type().attr("__name__"))));
  return Value(import_tensor(a, what));
}

nb::list tensor_specs(const std::vector<api::TensorSpec>& specs) {
  nb::object tensor_spec = nb::module_::import_("symmflow._types").attr("TensorSpec");
  nb::list out;
  for (const api::TensorSpec& s : specs) {
    nb::list shape;
    for (int64_t d : s.shape) shape.append(d);
    out.append(tensor_spec(s.name, std::string(dtype_name(s.dtype)), 
                           nb::steal(PySequence_Tuple(shape.ptr()))));
  }
  return out;
}

CurrentRuntime::CurrentRuntime(Runtime& runtime) {
  if (Runtime::current_or_null() != &runtime) scope_ = new RuntimeScope(runtime);
}
CurrentRuntime::~CurrentRuntime() { delete scope_; }

namespace {

// Array i of `objects`, writable or read-only (Note [read-only inputs]).
Array array_of(const nb::handle& o, const std::string& what, bool* read_only) {
  Array a;
  *read_only = false;
  if (nb::try_cast(o, a)) return a;
  nb::ndarray<nb::ro> r;
  SF_CHECK(nb::try_cast(o, r), "{}: expected a DLPack array, got {}", what,
           nb::cast<std::string>(nb::str(o.type().attr("__name__"))));
  *read_only = true;
  return Array(r);
}

void check_not_written(bool read_only, size_t i, const std::string& what, const InputsOf& of) {
  if (!read_only || !of.compiled) return;
  const std::vector<size_t> written = api::mutated_inputs(*of.compiled);
  if (std::find(written.begin(), written.end(), i) == written.end()) return;
  const std::vector<api::TensorSpec> specs = of.program->inputs();
  invalid_usage("{}: the array is read-only but program '{}' writes input '{}' in place; pass a "
                "writable array (a copy)",
                what, of.program->name(), i < specs.size() ? specs[i].name : std::to_string(i));
}

}  // namespace

std::vector<Tensor> import_inputs(const std::vector<nb::object>& objects, const std::string& what,
                                  const InputsOf& of) {
  std::vector<Tensor> out;
  for (size_t i = 0; i < objects.size(); ++i) {
    const std::string name = fmt::format("{}[{}]", what, i);
    bool read_only = false;
    Array a = array_of(objects[i], name, &read_only);
    check_not_written(read_only, i, name, of);
    Tensor t = import_tensor(a, name);
    if (read_only && !of.compiled && t.device() == Device::cpu()) {
      Tensor copy = Tensor::empty(t.shape(), t.dtype());
      api::copy_tensor(copy, t);
      t = copy;
    }
    out.push_back(t);
  }
  return out;
}

std::vector<TensorView> import_input_views(const std::vector<nb::object>& objects,
                                           const std::string& what, const InputsOf& of) {
  std::vector<TensorView> out;
  for (size_t i = 0; i < objects.size(); ++i) {
    const std::string name = fmt::format("{}[{}]", what, i);
    bool read_only = false;
    Array a = array_of(objects[i], name, &read_only);
    check_not_written(read_only, i, name, of);
    out.push_back(import_view(a, name));
  }
  return out;
}

}  // namespace symmflow::python
