// Ranks and sessions (symmflow/api/session.hpp): a thin layer over runtime (run_threads,
// init_mpi) and exec::Executable that checks what callers pass and names it in errors.
#include <chrono>

#include "symmflow/api/session.hpp"
#include "symmflow/exec/device_module.hpp"
#include "symmflow/exec/executable.hpp"
#include "symmflow/ops/call.hpp"
#include "symmflow/runtime/runtime.hpp"

namespace symmflow::api {

namespace {
// The cuda backend is a module loaded on first use (Note [device modules] in
// src/exec/device_module.cpp): the api asks exec for it and never links it.
const exec::DeviceModule& cuda_module() {
  return exec::device_module(DeviceType::cuda, "--device cuda");
}
}  // namespace

namespace {

// "cpu" -> -1; "cuda" -> rank % GPUs (-2); "cuda:i" -> i.
int parse_device(const std::string& device) {
  if (device == "cpu") return -1;
  if (device == "cuda") return -2;
  if (device.rfind("cuda:", 0) == 0) {
    const std::string index = device.substr(5);
    SF_CHECK(!index.empty() && index.find_first_not_of("0123456789") == std::string::npos,
             "--device: 'cpu', 'cuda' or 'cuda:N' (got '{}')", device);
    return std::stoi(index);
  }
  invalid_usage("--device: 'cpu' or 'cuda' (got '{}')", device);
}

std::string spec_str(DType dtype, const Shape& shape) {
  return fmt::format("{}{}", dtype_name(dtype), shape_str(shape));
}

double micros(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::micro>(t.time_since_epoch()).count();
}

exec::RunOptions exec_run_options(const RunOptions& o) {
  exec::RunOptions ro;
  ro.output_mode = o.outputs == Outputs::views ? exec::OutputMode::view : exec::OutputMode::owned;
  ro.synchronize = o.synchronize;
  ro.stream = o.stream;
  if (o.on_step) {
    ro.on_step = [f = o.on_step](size_t step, std::chrono::steady_clock::time_point b,
                                 std::chrono::steady_clock::time_point e) {
      f(step, micros(b), micros(e));
    };
  }
  return ro;
}

RunStats stats_of(const exec::RunStats& s) {
  return {s.copies,        s.bytes_copied, s.input_copies_skipped,
          s.output_copies, s.output_bytes, s.outputs_bound};
}

// A tensor over caller-owned memory (the storage does not own or free it).
Tensor wrap(const TensorView& v) {
  int64_t extent = v.numel() > 0 ? 1 : 0;
  Strides strides = v.strides.empty() ? contiguous_strides(v.shape) : v.strides;
  for (size_t d = 0; d < v.shape.size() && extent > 0; ++d) extent += (v.shape[d] - 1) * strides[d];
  auto storage = std::make_shared<Storage>(v.data, size_t(extent) * dtype_size(v.dtype), v.device,
                                           MemoryKind::regular);
  return Tensor::from_storage(storage, 0, v.dtype, v.shape, strides);
}

}  // namespace

Rank::Rank(Runtime& runtime) : runtime_(&runtime) {}
int Rank::rank() const { return runtime_->rank(); }
int Rank::world_size() const { return runtime_->world_size(); }
std::string Rank::transport() const { return transport_name(runtime_->bootstrap().transport()); }
void Rank::barrier(const std::string& what) { runtime_->group("world")->barrier(0, what); }
std::vector<std::string> Rank::allgather(const std::string& bytes, const std::string& what) {
  return runtime_->group("world")->allgather(bytes, what);
}
void Rank::abort(const std::string& why) { runtime_->abort(why); }

void run_threads(int world_size, const std::function<void(Rank&)>& fn,
                 const std::vector<int>& hosts) {
  SF_CHECK(world_size >= 1, "--ranks must be at least 1 (got {})", world_size);
  symmflow::run_threads(
      world_size,
      [&](Runtime& rt) {
        Rank rank(rt);
        fn(rank);
      },
      ThreadsOptions(-1, hosts));
}

Rank join_mpi() { return Rank(symmflow::init_mpi()); }

Rank join_store_from_env() { return Rank(symmflow::init_store_from_env()); }
bool mpi_available() { return symmflow::mpi_available(); }

int cuda_device_count() { return cuda_built() ? cuda_module().device_count() : 0; }
bool cuda_built() {
  try {
    cuda_module();
    return true;
  } catch (const Error&) {
    return false;
  }
}

Tensor to_host(const Tensor& t) {
  if (t.device().type != DeviceType::cuda) return t;
  SF_CHECK(exec::device_module_loaded(DeviceType::cuda),
           "to_host: a tensor on {} but no cuda backend is loaded", t.str());
  return cuda_module().to_host(t);
}

void copy_tensor(const Tensor& dst, const Tensor& src) {
  SF_CHECK(dst.shape() == src.shape() && dst.dtype() == src.dtype(),
           "copy_tensor: {} into {}: shapes and dtypes must be equal", src.str(), dst.str());
  call("aten::copy_", {dst, src});
}

void check_device(const std::string& device) {
  if (parse_device(device) == -1) return;
  // Loads the cuda module; its error says why when it is missing (built without cuda, no file).
  SF_CHECK(cuda_module().device_count() > 0, "--device cuda: no GPU is visible to this process");
}

Tensor empty_symmetric(const std::string& device, const Shape& shape, DType dtype,
                       const std::string& group) {
  const int index = parse_device(device);
  if (index == -1) return symmflow::empty_symmetric(shape, dtype, group);
  check_device(device);
  const int bound = cuda_module().bind_device();
  SF_CHECK(index == -2 || index == bound,
           "empty_symmetric: --device {}: this rank is bound to GPU {} (rank % GPUs)", device,
           bound);
  return cuda_module().empty_symmetric(shape, dtype, group);
}

// Note [eager GPU calls]: an eager GPU call is ordered with the caller's work by host waits, not
// by the stream alone: EagerStream waits for the process's queued GPU work first, and the Python
// binding waits again after the call (synchronize_device). Two processes sharing an H100 once
// read a buffer that PyTorch had just written with an asynchronous copy on its stream before the
// copy landed, with the op asked to run on that same stream (cause not found; Note [no GPU
// staging] in python/symmflow/torch/_library.py); eager calls are not the hot path, compiled
// partitions order by events (Note [caller's stream] in src/exec/executable_device.cpp).
EagerStream::EagerStream(void* stream) {
  check_device("cuda");
  cuda_module().bind_device();
  cuda_module().synchronize_device();
  saved_ = cuda_module().exchange_stream(stream);
}

void synchronize_device() {
  if (exec::device_module_loaded(DeviceType::cuda)) cuda_module().synchronize_device();
}

std::string gpu_kernel_choices() {
  if (!exec::device_module_loaded(DeviceType::cuda)) return "";
  return cuda_module().kernel_choices();
}

EagerStream::~EagerStream() { cuda_module().exchange_stream(saved_); }

Session::Session(const CompiledProgram& program, Rank& rank, const DeviceOptions& device)
    : inputs_(program.source().inputs()), outputs_(program.source().outputs()) {
  SF_CHECK(Runtime::current_or_null() == &rank.runtime(),
           "Session: rank {}'s runtime is not the current one of this thread (bind on the rank's "
           "own thread, or make it current with a RuntimeScope)", rank.rank());
  exec::ExecOptions eo;
  eo.cuda_graph = device.cuda_graph;
  int index = parse_device(device.device);
  if (index != -1) {
    check_device(device.device);
    int bound = cuda_module().bind_device();
    SF_CHECK(index == -2 || index == bound,
             "--device {}: rank {} is bound to GPU {} (rank % GPUs); choosing another GPU is not "
             "supported yet", device.device, rank.rank(), bound);
    eo.device = Device::cuda(bound);
  }
  exe_ = std::make_unique<exec::Executable>(program.plan(), eo);
}

Session::~Session() = default;
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;

Tensor Session::input_buffer(size_t i) {
  SF_CHECK(i < inputs_.size(), "input_buffer: the program takes {} inputs, not {}", inputs_.size(),
           i + 1);
  return exe_->input_handle(i);
}

void Session::check_inputs(const std::vector<TensorSpec>& specs, const std::vector<Shape>& shapes,
                           const std::vector<DType>& dtypes, const char* what) const {
  SF_CHECK(shapes.size() == specs.size(), "run: program '{}' takes {} {}s, got {}",
           exe_->plan().graph->name(), specs.size(), what, shapes.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    SF_CHECK(shapes[i] == specs[i].shape && dtypes[i] == specs[i].dtype,
             "run: {} {} ('{}') of program '{}' is {}, got {}", what, i, specs[i].name,
             exe_->plan().graph->name(), spec_str(specs[i].dtype, specs[i].shape),
             spec_str(dtypes[i], shapes[i]));
  }
}

std::vector<Tensor> Session::run(const std::vector<Tensor>& inputs, const RunOptions& options) {
  exe_->agree_on_inputs(inputs);  // before the local checks: every rank names a disagreement
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
  for (const Tensor& t : inputs) {
    SF_CHECK(t.defined(), "run: input {} is an undefined tensor", shapes.size());
    shapes.push_back(t.shape());
    dtypes.push_back(t.dtype());
  }
  check_inputs(inputs_, shapes, dtypes, "input");
  std::vector<Tensor> out = exe_->run(inputs, exec_run_options(options));
  stats_ = stats_of(exe_->last_stats());
  return out;
}

const RunStats& Session::run_into(const std::vector<TensorView>& inputs,
                                  const std::vector<TensorView>& outputs,
                                  const RunOptions& options) {
  std::vector<Tensor> in;
  for (size_t i = 0; i < inputs.size(); ++i) {
    // The input's buffer (input_buffer) is bound as itself: no copy. Makes no buffer.
    Tensor handle = i < inputs_.size() ? exe_->existing_input_handle(i) : Tensor();
    bool is_handle = handle.defined() && inputs[i].data == handle.raw_data() &&
                     inputs[i].device == handle.device() &&
                     (inputs[i].strides.empty() || inputs[i].strides == handle.strides());
    in.push_back(is_handle ? handle : wrap(inputs[i]));
  }
  exe_->agree_on_inputs(in);  // before the local checks: every rank names a disagreement
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
  for (const TensorView& v : inputs) shapes.push_back(v.shape), dtypes.push_back(v.dtype);
  check_inputs(inputs_, shapes, dtypes, "input");
  shapes.clear();
  dtypes.clear();
  for (const TensorView& v : outputs) shapes.push_back(v.shape), dtypes.push_back(v.dtype);
  check_inputs(outputs_, shapes, dtypes, "output");
  exec::RunOptions ro = exec_run_options(options);
  for (const TensorView& v : outputs) ro.into.push_back(wrap(v));
  exe_->run(in, ro);
  stats_ = stats_of(exe_->last_stats());
  return stats_;
}

void Session::synchronize() { exe_->synchronize(); }
std::string Session::device_description() const { return exe_->device_description(); }

}  // namespace symmflow::api
