// Shared pieces of the Python module symmflow._core (python/src/*.cpp).
//
// Tensors cross as DLPack (nanobind's nb::ndarray), never as copies: an imported array becomes a
// symmflow Tensor over the caller's memory (Note [exported storages]), an exported Tensor becomes
// an array whose owner keeps the Tensor (and so its storage) alive. Expects: every function here
// is called with the GIL held. Refuses: dtypes symmflow has no name for, negative strides, and
// devices other than cpu and cuda, with an InvalidUsage naming the argument.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <vector>

#include "symmflow/ops/value.hpp"
#include "symmflow/runtime/runtime.hpp"
#include "symmflow/symmflow.hpp"

namespace symmflow::python {

namespace nb = nanobind;
using Array = nb::ndarray<>;

// An array as a Tensor over the same memory; `what` names it in errors ("inputs[0]").
// Note [exported storages]: memory inside a Tensor this module exported (input_buffer,
// empty_symmetric, outputs) gets that Tensor's storage back, so a symmetric allocation is seen as
// symmetric by ops and a staging buffer is recognised by the executable (no copy).
Tensor import_tensor(const Array& array, const std::string& what);
// The same as a non-owning view (for run_into).
TensorView import_view(const Array& array, const std::string& what);
// A DLPack-exportable array over `t` (zero copy); the array keeps `t` alive.
nb::object export_tensor(const Tensor& t);
// A numpy array of `t`'s elements: zero copy where numpy has the dtype, else (bf16) widened to
// f32 in a copy.
nb::object export_numpy(const Tensor& t);
// Converts a Python argument of call_op to an op Value (tensors through import_tensor).
Value import_value(const nb::handle& object, const std::string& what);

// Note [read-only inputs]: a read-only DLPack array (a numpy array with writeable=False, a
// broadcast view with stride 0, which nb::ndarray<> refuses) is imported for reading. Where
// `compiled` writes an input in place (api::mutated_inputs, asked only when an input is
// read-only), a read-only array for it is refused naming it; without `compiled` (the interpreter,
// which has no such list) read-only arrays are imported as copies instead. Input i is named
// `<what>[i]` in errors.
struct InputsOf {
  const api::Program* program = nullptr;
  const api::CompiledProgram* compiled = nullptr;  // null: copy read-only arrays
};
std::vector<Tensor> import_inputs(const std::vector<nb::object>& objects, const std::string& what,
                                  const InputsOf& of);
std::vector<TensorView> import_input_views(const std::vector<nb::object>& objects,
                                           const std::string& what, const InputsOf& of);

// symmflow._types.TensorSpec(name, dtype, shape) for each spec.
nb::list tensor_specs(const std::vector<api::TensorSpec>& specs);

// Makes `runtime` current on the calling thread for the guard's lifetime when it is not already.
class CurrentRuntime {
 public:
  explicit CurrentRuntime(Runtime& runtime);
  ~CurrentRuntime();
  CurrentRuntime(const CurrentRuntime&) = delete;
  CurrentRuntime& operator=(const CurrentRuntime&) = delete;

 private:
  RuntimeScope* scope_ = nullptr;
};

void bind_errors(nb::module_& m);    // errors.cpp
void bind_program(nb::module_& m);   // program.cpp
void bind_ranks(nb::module_& m);     // ranks.cpp
void bind_session(nb::module_& m);   // session.cpp
void bind_builder(nb::module_& m);   // builder.cpp

}  // namespace symmflow::python
