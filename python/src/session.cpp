// Sessions for Python (symmflow/api/session.hpp): a compiled program bound to a rank, fed with
// any DLPack arrays and returning DLPack arrays. The rank's runtime is made current on the calling
// thread for each call (CurrentRuntime), and the GIL is released while the session runs.

#include <cstdint>
#include <memory>

#include "binding.hpp"

namespace symmflow::python {

namespace {

// A session and the rank it was bound on (the Python Rank object outlives it: keep_alive).
struct PySession {
  api::Rank* rank = nullptr;
  std::unique_ptr<api::Session> session;
  std::shared_ptr<const api::CompiledProgram> program;
};

nb::dict stats_dict(const api::RunStats& s) {
  nb::dict d;
  d["copies"] = s.copies;
  d["bytes_copied"] = s.bytes_copied;
  d["input_copies_skipped"] = s.input_copies_skipped;
  d["output_copies"] = s.output_copies;
  d["output_bytes"] = s.output_bytes;
  d["outputs_bound"] = s.outputs_bound;
  return d;
}

void make_session(PySession* self, const api::CompiledProgram& program, api::Rank& rank,
                  const std::string& device, bool cuda_graph) {
  new (self) PySession();
  self->rank = &rank;
  self->program = std::make_shared<const api::CompiledProgram>(program);
  api::DeviceOptions options;
  options.device = device;
  options.cuda_graph = cuda_graph;
  nb::gil_scoped_release release;
  CurrentRuntime current(rank.runtime());
  self->session = std::make_unique<api::Session>(*self->program, rank, options);
}

// stream: None, or the caller's cudaStream_t as an int (0: the legacy default stream).
std::optional<void*> stream_of(std::optional<uintptr_t> stream) {
  if (!stream) return std::nullopt;
  return reinterpret_cast<void*>(*stream);
}

// Inputs may be read-only arrays (Note [read-only inputs] in binding.hpp).
InputsOf inputs_of(const PySession& s) { return {&s.program->source(), s.program.get()}; }

nb::list run(PySession& s, const std::vector<nb::object>& inputs, bool views,
             std::optional<uintptr_t> stream) {
  std::vector<Tensor> in = import_inputs(inputs, "inputs", inputs_of(s));
  std::vector<Tensor> out;
  {
    nb::gil_scoped_release release;
    CurrentRuntime current(s.rank->runtime());
    api::RunOptions options;
    options.outputs = views ? api::Outputs::views : api::Outputs::owned;
    options.stream = stream_of(stream);
    out = s.session->run(in, options);
  }
  nb::list result;
  for (const Tensor& t : out) result.append(export_tensor(t));
  return result;
}

nb::dict run_into(PySession& s, const std::vector<nb::object>& inputs,
                  const std::vector<Array>& outputs, std::optional<uintptr_t> stream) {
  std::vector<TensorView> in = import_input_views(inputs, "inputs", inputs_of(s));
  std::vector<TensorView> out;
  for (size_t i = 0; i < outputs.size(); ++i) {
    out.push_back(import_view(outputs[i], fmt::format("outputs[{}]", i)));
  }
  api::RunStats stats;
  {
    nb::gil_scoped_release release;
    CurrentRuntime current(s.rank->runtime());
    api::RunOptions options;
    options.stream = stream_of(stream);
    stats = s.session->run_into(in, out, options);
  }
  return stats_dict(stats);
}

// Note [pointer call]: the torch backend's call path (python/symmflow/torch/_backend.py) passes
// each tensor as its address alone: the shapes and dtypes are the program's own (the caller
// checked that each tensor is contiguous and of the spec's shape, dtype and device). Reading a
// torch tensor through DLPack costs a Python-level __dlpack__ call and a capsule per tensor (the
// backend's call on a GPU took 78 us for the decoder layer's 12 tensors); an int is read in
// nanoseconds. Nothing is returned: the statistics stay in last_stats.
std::vector<TensorView> pointer_views(const std::vector<api::TensorSpec>& specs,
                                      const std::vector<uintptr_t>& pointers, Device device,
                                      const char* what) {
  SF_CHECK(pointers.size() == specs.size(), "run_pointers: the program takes {} {}s, got {}",
           specs.size(), what, pointers.size());
  std::vector<TensorView> views(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    views[i].data = reinterpret_cast<void*>(pointers[i]);
    views[i].dtype = specs[i].dtype;
    views[i].shape = specs[i].shape;
    views[i].strides = contiguous_strides(specs[i].shape);
    views[i].device = device;
  }
  return views;
}

void run_pointers(PySession& s, const std::vector<uintptr_t>& inputs,
                  const std::vector<uintptr_t>& outputs, std::optional<int> cuda_device,
                  std::optional<uintptr_t> stream) {
  const Device device = cuda_device ? Device::cuda(*cuda_device) : Device::cpu();
  std::vector<TensorView> in = pointer_views(s.session->inputs(), inputs, device, "input");
  std::vector<TensorView> out = pointer_views(s.session->outputs(), outputs, device, "output");
  nb::gil_scoped_release release;
  CurrentRuntime current(s.rank->runtime());
  api::RunOptions options;
  options.stream = stream_of(stream);
  s.session->run_into(in, out, options);
}

}  // namespace

void bind_session(nb::module_& m) {
  nb::class_<PySession>(m, "Session")
      .def("__init__", &make_session, nb::arg("compiled"), nb::arg("rank"),
           nb::arg("device") = "cpu", nb::arg("cuda_graph") = true, nb::keep_alive<1, 3>())
      .def_prop_ro("inputs", [](const PySession& s) { return tensor_specs(s.session->inputs()); })
      .def_prop_ro("outputs", [](const PySession& s) { return tensor_specs(s.session->outputs()); })
      .def("input_buffer",
           [](PySession& s, size_t i) { return export_tensor(s.session->input_buffer(i)); },
           nb::arg("i"))
      .def("run", &run, nb::arg("inputs"), nb::arg("views") = false, nb::arg("stream") = nb::none(),
           "Runs on `inputs` (any DLPack arrays). views=True returns the outputs as views of the "
           "plan's memory (no copy), valid until the next run. stream: on a GPU, the caller's "
           "cudaStream_t (torch.cuda.current_stream().cuda_stream) to order the run on, without "
           "waiting on the host (also inside the caller's CUDA graph capture; 0 is the legacy "
           "default stream); None: run on the session's streams and wait.")
      .def("run_into", &run_into, nb::arg("inputs"), nb::arg("outputs"),
           nb::arg("stream") = nb::none(),
           "Runs on `inputs` and writes output i into outputs[i] as part of the run; stream as "
           "for run().")
      .def("run_pointers", &run_pointers, nb::arg("inputs"), nb::arg("outputs"),
           nb::arg("cuda_device") = nb::none(), nb::arg("stream") = nb::none(),
           "run_into for callers that checked their tensors (Note [pointer call]): each input and "
           "output is the address of a contiguous tensor of the program's shape and dtype, on the "
           "CPU or on GPU cuda_device; stream as for run(). Returns None (see last_stats).")
      .def_prop_ro("last_stats", [](const PySession& s) { return stats_dict(s.session->last_stats()); })
      .def("synchronize",
           [](PySession& s) {
             nb::gil_scoped_release release;
             s.session->synchronize();
           })
      .def_prop_ro("device_description", [](const PySession& s) {
        return s.session->device_description();
      });
}

}  // namespace symmflow::python
