// The front door, part 3: ranks, and a compiled program bound to the calling rank.
//
// Ranks start on threads (run_threads: N ranks in this process, one callback each) or under MPI
// (join_mpi: this process is one rank). A runtime made some other way (a store transport's
// init_store in symmflow/runtime/runtime.hpp) joins through Rank(Runtime&): the runtime must be
// current on the calling thread (RuntimeScope) when a Session is made and run.
//
// A Session is a CompiledProgram bound to the calling rank on a device ("cpu", "cuda" for GPU
// rank % GPUs, "cuda:i"): its memory pools are allocated once, collectively, and every run()
// reuses them. Inputs are caller-owned tensors or views; writing input i into input_buffer(i)
// and passing that buffer costs no copy where the plan stages the input (RunStats). Outputs are
// owned tensors, views into the plan's memory (valid until the next run, zero copies), or
// written into caller-owned views. Refuses: wrong input counts, shapes or dtypes (InvalidUsage
// naming the input), a device this build cannot run on.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "symmflow/api/program.hpp"
#include "symmflow/core/tensor.hpp"

namespace symmflow {
class Runtime;  // symmflow/runtime/runtime.hpp
namespace exec {
class Executable;
}
}  // namespace symmflow

namespace symmflow::api {

// The calling rank of a world: a handle on its runtime (not owned).
class Rank {
 public:
  explicit Rank(Runtime& runtime);
  int rank() const;
  int world_size() const;
  std::string transport() const;  // "threads", "mpi", ...
  // Collective over the world group: every rank calls, with `what` naming the call in errors.
  void barrier(const std::string& what);
  std::vector<std::string> allgather(const std::string& bytes, const std::string& what);
  // Marks the world failed so that peers waiting on this rank fail fast naming it.
  void abort(const std::string& why);
  Runtime& runtime() const { return *runtime_; }

 private:
  Runtime* runtime_;
};

// Runs fn on `world_size` ranks, one thread each; rethrows the first rank's error (in rank
// order) prefixed "rank N: ". A rank that throws fails its waiting peers fast.
// `hosts`: simulated hosts, the host id of each rank (Note [hosts] in runtime/bootstrap.hpp;
// empty: one host).
void run_threads(int world_size, const std::function<void(Rank&)>& fn,
                 const std::vector<int>& hosts = {});
// MPI: this process becomes one rank of MPI_COMM_WORLD (finalized at exit); the transport is
// loaded on first use, InvalidUsage saying why when it cannot be (built without MPI, no libmpi).
Rank join_mpi();
bool mpi_available();
// A store: this process becomes rank RANK of WORLD_SIZE meeting through SYMMFLOW_STORE
// (file:<dir> | tcp:<host>:<port>), as a launcher such as torchrun sets them
// (init_store_from_env in symmflow/runtime/runtime.hpp; InvalidUsage naming a missing variable).
Rank join_store_from_env();

// GPUs this process can use: 0 without the cuda backend, a driver or a GPU.
int cuda_device_count();
bool cuda_built();
// A host copy of `t` (itself when on the host); waits for the rank's GPU stream.
Tensor to_host(const Tensor& t);
// Copies src into dst (same shape and dtype; host or device, either way), e.g. an input into
// Session::input_buffer.
void copy_tensor(const Tensor& dst, const Tensor& src);

// Eager symmetric memory and eager GPU calls (the Python package's torch.ops.symmflow).
// A zeroed contiguous tensor in a new symmetric heap of `group` (collective over its members) on
// `device`: "cpu", or "cuda"/"cuda:i" for the calling rank's GPU (rank % GPUs; binds the thread).
Tensor empty_symmetric(const std::string& device, const Shape& shape, DType dtype,
                       const std::string& group);
// While it lives, the eager GPU kernels of the calling thread (symmflow::call on GPU tensors) run
// on `stream` (a cudaStream_t of the thread's GPU, e.g. PyTorch's current stream; a null pointer
// is the legacy default stream) instead of the rank's own; binds the thread to its GPU first and
// waits for the process's queued GPU work (Note [eager GPU calls] in src/api/session.cpp).
// Refuses: no cuda backend or no GPU.
class EagerStream {
 public:
  explicit EagerStream(void* stream);
  ~EagerStream();
  EagerStream(const EagerStream&) = delete;
  EagerStream& operator=(const EagerStream&) = delete;

 private:
  void* saved_ = nullptr;
};

// Waits for everything this process queued on the calling thread's GPU (no-op without the cuda
// backend loaded); raises what failed.
void synchronize_device();
// The GPU kernels chosen by measurement in this process (Note [measured kernel choice] in
// src/kernels/cuda/choice/kernel_choice.hpp), one line each: "op key: chosen (how; times; refused)";
// "" when the cuda backend is not loaded or chose nothing yet.
std::string gpu_kernel_choices();

struct DeviceOptions {
  std::string device = "cpu";  // "cpu", "cuda" (GPU rank % GPUs) or "cuda:i"
  bool cuda_graph = true;      // capture the steps on the first run and replay them later
};
// Checks a device name before ranks start: known, and a GPU visible when it is cuda.
void check_device(const std::string& device);

enum class Outputs {
  owned,  // fresh tensors the caller owns
  views,  // views into the plan's memory, valid until the next run (zero copies)
};

struct RunOptions {
  Outputs outputs = Outputs::owned;
  // Called after each executed step with its index into explain().steps and its begin and end
  // in microseconds of the steady clock. Empty: no clock is read.
  std::function<void(size_t step, double begin_us, double end_us)> on_step;
  bool synchronize = true;  // on a GPU: wait for the run before returning
  // On a GPU: the caller's stream (a cudaStream_t, such as PyTorch's current stream; a null
  // pointer is the legacy default stream) or none. The run follows the work queued there, that
  // stream waits for the run, nothing waits on the host, and a run while the stream is being
  // captured (torch.cuda.graph) joins that capture.
  std::optional<void*> stream;
};

// What one run did (exec::RunStats): data copies the plan needed, copy-ins skipped because the
// input was its staging buffer, and the copies that made outputs.
struct RunStats {
  size_t copies = 0;
  size_t bytes_copied = 0;
  size_t input_copies_skipped = 0;
  size_t output_copies = 0;
  size_t output_bytes = 0;
  // Outputs written straight into run_into's destinations (Note [outputs bound in place] in
  // exec/executable_outputs.cpp).
  size_t outputs_bound = 0;
};

class Session {
 public:
  // Collective: every rank of the program's groups binds the same program.
  Session(const CompiledProgram& program, Rank& rank, const DeviceOptions& device = {});
  ~Session();
  Session(Session&&) noexcept;
  Session& operator=(Session&&) noexcept;

  const std::vector<TensorSpec>& inputs() const { return inputs_; }
  const std::vector<TensorSpec>& outputs() const { return outputs_; }
  // Where to write input i so that run() copies nothing for it (the plan's staging buffer when
  // it has one, else a tensor this session owns).
  Tensor input_buffer(size_t i);

  // Runs on `inputs` (one per program input).
  std::vector<Tensor> run(const std::vector<Tensor>& inputs, const RunOptions& options = {});
  // Runs on caller-owned views and writes output i into outputs[i] (shape and dtype checked) as
  // part of the run (on a GPU, on its stream). A view of input_buffer(i) is bound without a
  // copy, and so is, on a GPU, a contiguous input already on the session's GPU.
  const RunStats& run_into(const std::vector<TensorView>& inputs,
                           const std::vector<TensorView>& outputs,
                           const RunOptions& options = {});

  const RunStats& last_stats() const { return stats_; }
  void synchronize();                     // waits for earlier GPU runs, raising what failed
  std::string device_description() const; // "cpu", or the GPU backend's description

 private:
  void check_inputs(const std::vector<TensorSpec>& specs, const std::vector<Shape>& shapes,
                    const std::vector<DType>& dtypes, const char* what) const;
  std::unique_ptr<exec::Executable> exe_;
  std::vector<TensorSpec> inputs_, outputs_;
  RunStats stats_;
};

}  // namespace symmflow::api
