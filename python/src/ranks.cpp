// Ranks for Python: a threads world (symmflow.run), a process world joined through a store given
// as Python callbacks (init_store), symmetric tensors (empty_symmetric) and eager op calls
// (call_op). Every call that may wait on peers releases the GIL; the store callbacks take it back
// (Note [python store callbacks]).

#include <chrono>
#include <optional>
#include <string_view>

#include "binding.hpp"
#include "symmflow/ops/call.hpp"
#include "symmflow/runtime/heap.hpp"

namespace symmflow::python {

namespace {

// Note [python store callbacks]: the bootstrap calls the store from its own threads as well as
// from the caller's, so each callback takes the GIL (every C++ call that may wait released it).
// The callables are kept forever (the store world lives until exit) and are never called once the
// interpreter is finalizing: the Python package tears the world down from an atexit hook first
// (shutdown_store), and a late call is a System error rather than a crash.
struct PythonCallable {
  PyObject* fn;  // a strong reference, deliberately never released
  explicit PythonCallable(nb::handle f) : fn(f.inc_ref().ptr()) {}
  nb::handle get() const { return nb::handle(fn); }
};

// Raises instead of touching an interpreter that is gone (Note [python store callbacks]).
void check_interpreter(const char* what) {
  if (!Py_IsInitialized() || _Py_IsFinalizing())
    throw_error(ErrorCode::System, "python store: {} called after the interpreter exited", what);
}

double seconds(KeyValueStore::Millis t) { return double(t.count()) / 1000.0; }

std::shared_ptr<KeyValueStore> callback_store(nb::handle set, nb::handle get, nb::handle wait,
                                              nb::handle add) {
  StoreCallbacks cb;
  cb.name = "python store";
  cb.set = [f = PythonCallable(set)](const std::string& key, const std::string& value) {
    check_interpreter("set");
    nb::gil_scoped_acquire gil;
    f.get()(key, nb::bytes(value.data(), value.size()));
  };
  cb.get = [f = PythonCallable(get)](const std::string& key,
                                     KeyValueStore::Millis timeout) -> std::optional<std::string> {
    check_interpreter("get");
    nb::gil_scoped_acquire gil;
    nb::object v = f.get()(key, seconds(timeout));
    if (v.is_none()) return std::nullopt;
    if (nb::isinstance<nb::str>(v)) return nb::cast<std::string>(v);
    nb::bytes b = nb::cast<nb::bytes>(v);
    return std::string(b.c_str(), b.size());
  };
  cb.wait = [f = PythonCallable(wait)](const std::vector<std::string>& keys,
                                       KeyValueStore::Millis timeout) {
    check_interpreter("wait");
    nb::gil_scoped_acquire gil;
    nb::list l;
    for (const std::string& k : keys) l.append(k);
    return nb::cast<bool>(f.get()(l, seconds(timeout)));
  };
  cb.add = [f = PythonCallable(add)](const std::string& key, int64_t delta) {
    check_interpreter("add");
    nb::gil_scoped_acquire gil;
    return nb::cast<int64_t>(f.get()(key, delta));
  };
  return std::make_shared<CallbackStore>(std::move(cb));
}

api::Rank init_store(nb::handle set, nb::handle get, nb::handle wait, nb::handle add, int rank,
                     int world_size, const std::string& prefix, double timeout_s) {
  StoreOptions o;
  // The caller's store is not trusted (torchrun's TCPStore authenticates no one): every value
  // symmflow writes to it is sealed with the job's secret (Note [sealed store values]).
  o.store = std::make_shared<SealedStore>(callback_store(set, get, wait, add));
  o.rank = rank;
  o.world_size = world_size;
  o.prefix = prefix;
  o.timeout_s = timeout_s;
  nb::gil_scoped_release release;
  return api::Rank(symmflow::init_store(o));
}

// Runs a compiled program on a world of threads: inputs_per_rank[r] feeds rank r.
// Inputs may be read-only arrays (Note [read-only inputs] in binding.hpp).
nb::list run_world(const api::CompiledProgram& c,
                   const std::vector<std::vector<nb::object>>& inputs, const std::string& device) {
  const int world = c.world_size();
  SF_CHECK(int(inputs.size()) == world,
           "run: program '{}' is for {} ranks, inputs_per_rank has {} lists", c.source().name(),
           world, inputs.size());
  std::vector<std::vector<Tensor>> in(inputs.size()), out(inputs.size());
  for (size_t r = 0; r < inputs.size(); ++r)
    in[r] = import_inputs(inputs[r], fmt::format("inputs_per_rank[{}]", r), {&c.source(), &c});
  {
    nb::gil_scoped_release release;
    api::check_device(device);
    api::run_threads(world, [&](api::Rank& rank) {
      api::Session session(c, rank, {device});
      out[size_t(rank.rank())] = session.run(in[size_t(rank.rank())]);
    });
  }
  nb::list result;
  for (const auto& rank_outputs : out) {
    nb::list l;
    for (const Tensor& t : rank_outputs) l.append(export_numpy(t));
    result.append(l);
  }
  return result;
}

nb::object empty_symmetric(api::Rank& rank, const std::vector<int64_t>& shape,
                           const std::string& dtype, const std::string& group,
                           const std::string& device) {
  std::optional<DType> t = parse_dtype(dtype);
  SF_CHECK(t.has_value(), "empty_symmetric: unknown dtype '{}'", dtype);
  Tensor out;
  {
    nb::gil_scoped_release release;
    CurrentRuntime current(rank.runtime());
    out = api::empty_symmetric(device, Shape(shape.begin(), shape.end()), *t, group);
  }
  return export_tensor(out);
}

// stream: on GPU tensors, the cudaStream_t to run on (PyTorch's current stream; 0 is the legacy
// default stream); None or absent: the rank's own stream.
nb::list call_op(api::Rank& rank, const std::string& name, nb::args args, nb::kwargs kwargs) {
  std::optional<uintptr_t> stream;
  for (auto [key, value] : kwargs) {
    SF_CHECK(nb::cast<std::string>(key) == "stream",
             "call_op: unknown keyword argument '{}' (only 'stream')", nb::cast<std::string>(key));
    if (!value.is_none()) stream = nb::cast<uintptr_t>(value);
  }
  std::vector<Value> values;
  for (size_t i = 0; i < args.size(); ++i)
    values.push_back(import_value(args[i], fmt::format("{} argument {}", name, i)));
  Value result;
  {
    nb::gil_scoped_release release;
    CurrentRuntime current(rank.runtime());
    std::optional<api::EagerStream> on_stream;
    if (stream) on_stream.emplace(reinterpret_cast<void*>(*stream));
    result = symmflow::call(name, values);
    if (stream) api::synchronize_device();  // Note [eager GPU calls] in src/api/session.cpp
  }
  nb::list out;
  if (result.is_tensor()) out.append(export_tensor(result.to_tensor()));
  if (result.is_tensor_list())
    for (const Tensor& t : result.to_tensor_list()) out.append(export_tensor(t));
  return out;
}

// The group of the symmetric heap `array` lies in (an empty_symmetric tensor or a view of one),
// or None for any other memory (Note [exported storages] in tensors.cpp).
nb::object symmetric_group(const Array& array) {
  Tensor t = import_tensor(array, "symmetric_group");
  const std::string_view group = t.storage() ? t.storage()->group_name() : std::string_view();
  if (group.empty()) return nb::none();
  return nb::str(group.data(), group.size());
}

}  // namespace

void bind_ranks(nb::module_& m) {
  nb::class_<api::Rank>(m, "Rank")
      .def_prop_ro("rank", &api::Rank::rank)
      .def_prop_ro("world_size", &api::Rank::world_size)
      .def_prop_ro("transport", &api::Rank::transport)
      .def_prop_ro(
          "timeout_s",
          [](const api::Rank& r) { return r.runtime().bootstrap().timeout_s(); },
          "The bound of every wait of this rank's world, in seconds.")
      .def("barrier",
           [](api::Rank& r, const std::string& what) {
             nb::gil_scoped_release release;
             CurrentRuntime current(r.runtime());
             r.barrier(what);
           },
           nb::arg("what") = "barrier")
      .def("allgather",
           [](api::Rank& r, nb::bytes data, const std::string& what) {
             std::string bytes(data.c_str(), data.size());
             std::vector<std::string> got;
             {
               nb::gil_scoped_release release;
               CurrentRuntime current(r.runtime());
               got = r.allgather(bytes, what);
             }
             nb::list out;
             for (const std::string& g : got) out.append(nb::bytes(g.data(), g.size()));
             return out;
           },
           nb::arg("data"), nb::arg("what") = "allgather")
      .def("new_group",
           [](api::Rank& r, const std::string& name, std::vector<int> ranks) {
             nb::gil_scoped_release release;
             CurrentRuntime current(r.runtime());
             r.runtime().new_group(name, std::move(ranks));
           },
           nb::arg("name"), nb::arg("ranks"),
           "Collective among `ranks`: makes group `name` (ops and programs name it).")
      .def("has_group", [](const api::Rank& r, const std::string& name) {
        return r.runtime().has_group(name);
      }, nb::arg("name"))
      .def("group_poisoned", [](const api::Rank& r, const std::string& name) {
        return r.runtime().has_group(name) && r.runtime().group(name)->poisoned();
      }, nb::arg("name"),
           "Whether a collective of group `name` failed (Note [poisoned groups]): every later call "
           "of it raises; a new group of the same ranks goes on.")
      .def("abort",
           [](api::Rank& r, const std::string& why) {
             nb::gil_scoped_release release;
             r.abort(why);
           },
           nb::arg("why"))
      .def("__repr__", [](const api::Rank& r) {
        return fmt::format("<symmflow.Rank {} of {} ({})>", r.rank(), r.world_size(),
                           r.transport());
      });

  m.def("init_store", &init_store, nb::arg("set"), nb::arg("get"), nb::arg("wait"),
        nb::arg("add"), nb::arg("rank"), nb::arg("world_size"), nb::arg("prefix") = "symmflow",
        nb::arg("timeout_s") = -1.0);
  m.def("_shutdown_store", [] {
    nb::gil_scoped_release release;
    symmflow::shutdown_store();
  });
  m.def("run", &run_world, nb::arg("compiled"), nb::arg("inputs_per_rank"),
        nb::arg("device") = "cpu");
  m.def("empty_symmetric", &empty_symmetric, nb::arg("rank"), nb::arg("shape"),
        nb::arg("dtype") = "f32", nb::arg("group") = "world", nb::arg("device") = "cpu",
        "A zeroed tensor in a new symmetric heap of `group` (collective) on `device` ('cpu', or "
        "'cuda' for the rank's GPU).");
  m.def("call_op", &call_op);
  m.def("kernel_choices", &api::gpu_kernel_choices,
        "The GPU kernels chosen by measurement in this process, one line each (op, shape: "
        "chosen kernel, how, median times, refusals); '' before any GPU call.");
  m.def(
      "check_device",
      [](const std::string& device) {
        nb::gil_scoped_release release;
        api::check_device(device);
      },
      nb::arg("device"),
      "Checks a device name and, for cuda, loads the cuda backend (before compiling for it: the "
      "compiler picks kernels among those registered).");
  m.def("symmetric_group", &symmetric_group, nb::arg("array"),
        "The group of the symmetric heap the array lies in, or None.");
}

}  // namespace symmflow::python
