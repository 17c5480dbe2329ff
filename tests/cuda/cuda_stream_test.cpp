// Plans on the caller's GPU tensors and stream (Note [device inputs] and Note [caller's stream] in
// src/exec/executable_device.cpp), at 1 and 2 ranks (two ranks share the GPU on a one-GPU host),
// every output against the cpu interpreter on the same inputs:
//  - device inputs read in place (no copy), a graph per binding, more bindings than are kept;
//  - runs ordered on a stream of the caller's, with no host wait, outputs into caller tensors,
//    the graph replayed on that stream itself (Note [replay on the caller's stream]);
//  - runs captured into the caller's own CUDA graph (global capture mode at world 1, as
//    torch.cuda.graph uses), replayed with new input values.
// Skipped without a GPU.
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "symmflow/exec/compare.hpp"
#include "symmflow/exec/executable.hpp"
#include "symmflow/exec/interpret.hpp"
#include "symmflow/ir/text.hpp"
#include "symmflow/kernels/cuda.hpp"
#include "symmflow/ops/call.hpp"
#include "symmflow/passes/pipeline.hpp"
#include "symmflow/runtime/cuda_memory.hpp"
#include "symmflow/runtime/runtime.hpp"
#include "support/tensors.hpp"

namespace symmflow::cuda {
namespace {

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

std::string read_example(const std::string& name) {
  std::ifstream in(std::string(SYMMFLOW_EXAMPLES_DIR) + "/" + name);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Uniform in +-1/sqrt(rows) for matrices (sums of many products stay near 1).
Tensor random(const ir::TensorType& t, uint64_t seed) {
  const double scale = t.shape.size() >= 2 ? 1.0 / std::sqrt(double(t.shape[0])) : 1.0;
  return testing::random_tensor(t.shape, t.dtype, seed, -scale, scale);
}

struct Case {
  std::shared_ptr<const passes::Plan> plan;
  std::shared_ptr<ir::Graph> source;
};

Case compile(const std::string& example, int world) {
  const std::string text = read_example(example);
  return {passes::compile(ir::parse_graph(text, {example, world})),
          std::shared_ptr<ir::Graph>(ir::parse_graph(text, {example, world}))};
}

// Host inputs for run `iter` of this rank, and the interpreter's outputs for them.
std::vector<Tensor> host_inputs(const Case& c, int rank, int iter) {
  std::vector<Tensor> in;
  for (const ir::Value* v : c.plan->graph->inputs())
    in.push_back(random(v->type(), uint64_t(1000 * iter + 10 * rank + 1)));
  return in;
}

void expect_matches(const Case& c, const std::vector<Tensor>& host_in,
                    const std::vector<Tensor>& got, const std::string& what) {
  std::vector<Tensor> in;
  for (const Tensor& t : host_in) in.push_back(call("aten::clone", {t}).to_tensor());
  std::vector<Tensor> want = exec::interpret(*c.source, in);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const Tensor host = to_host(got[i]);
    exec::Comparison cmp =
        exec::compare(host, want[i], exec::check_tolerance(want[i].dtype(), 8), what);
    EXPECT_FALSE(cmp.mismatch) << *cmp.mismatch;
  }
}

class CudaStream : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    if (device_count() == 0) GTEST_SKIP() << "no GPU";
  }
};

// Inputs made on the GPU at new addresses each run: read in place (no copy-in of a non-staged
// input), a graph captured per binding; the seventh run reuses the first run's tensors, whose
// binding was evicted (4 are kept), and must still give the right results.
TEST_P(CudaStream, DeviceInputsAreReadInPlaceWithAGraphPerBinding) {
  const int world = GetParam();
  for (const char* example : {"tp_mlp_small.sf", "input_allreduce.sf"}) {
    Case c = compile(example, world);
    const bool staged_example = std::string(example) == "input_allreduce.sf";
    run_threads(world, [&](Runtime& rt) {
      int dev = bind_device();
      exec::Executable exe(c.plan, exec::ExecOptions{Device::cuda(dev)});
      std::vector<std::vector<Tensor>> kept;
      for (int iter = 0; iter < 7; ++iter) {
        const int data = iter == 6 ? 0 : iter;
        std::vector<Tensor> host = host_inputs(c, rt.rank(), data);
        if (iter < 6) {
          std::vector<Tensor> dev_in;
          for (const Tensor& h : host) dev_in.push_back(to_device(h));
          kept.push_back(dev_in);
        }
        std::vector<Tensor> got = exe.run(kept[size_t(data)]);
        expect_matches(c, host, got, fmt::format("{} world {} rank {} run {}", example, world,
                                                 rt.rank(), iter));
        EXPECT_EQ(exe.last_stats().copies, staged_example ? 1u : 0u) << example << " run " << iter;
      }
      // input_allreduce's one input is staged (a symm arg): its binding never changes.
      EXPECT_EQ(exe.device_description().find("input bindings captured") != std::string::npos,
                !staged_example) << exe.device_description();
    }, ThreadsOptions{60});
  }
}

// Note [outputs bound in place]: destinations that alternate between two tensors are written in
// place (their addresses join the graph's key: two graphs, replayed); destinations that move every
// run are too, until the executable gives up binding them (then copied, one graph); every result
// right all along.
TEST_P(CudaStream, OutputsAreWrittenInPlaceUntilTheirDestinationsMoveEveryRun) {
  const int world = GetParam();
  Case c = compile("tp_mlp_small.sf", world);
  run_threads(world, [&](Runtime& rt) {
    int dev = bind_device();
    exec::Executable exe(c.plan, exec::ExecOptions{Device::cuda(dev)});
    std::vector<Tensor> dev_in;
    for (const Tensor& h : host_inputs(c, rt.rank(), 0)) dev_in.push_back(to_device(h));
    const ir::TensorType& t = c.plan->graph->outputs()[0]->type();
    std::vector<Tensor> fixed{Tensor::empty(t.shape, t.dtype, Device::cuda(dev)),
                              Tensor::empty(t.shape, t.dtype, Device::cuda(dev))};
    std::vector<Tensor> kept;  // every moving destination stays allocated: new addresses
    for (int iter = 0; iter < 40; ++iter) {
      const bool moving = iter >= 6;
      if (moving) kept.push_back(Tensor::empty(t.shape, t.dtype, Device::cuda(dev)));
      exec::RunOptions options;
      options.into = {moving ? kept.back() : fixed[size_t(iter % 2)]};
      std::vector<Tensor> got = exe.run(dev_in, options);
      expect_matches(c, host_inputs(c, rt.rank(), 0), got,
                     fmt::format("world {} rank {} run {}", world, rt.rank(), iter));
      const exec::RunStats& st = exe.last_stats();
      if (!moving) {
        EXPECT_EQ(st.outputs_bound, 1u) << "run " << iter;
      }
      if (iter >= 39) {
        EXPECT_EQ(st.outputs_bound, 0u) << "run " << iter << ": still bound";
      }
      EXPECT_EQ(st.outputs_bound + st.output_copies, 1u) << "run " << iter;
    }
  }, ThreadsOptions{120});
}

// Note [views after a replay]: outputs that are views, of a base bound to the destination (p2, r)
// and of an input (xv), with inputs and destinations alternating between two sets: the runs from
// the third on replay the graph of the binding before last, and each must return its own
// binding's values, not the memory of the run before it.
TEST_P(CudaStream, ViewOutputsFollowEachReplaysBinding) {
  const int world = GetParam();
  const std::string text = R"sf(graph views(x: f32[4, 6], w: f32[6, 6], y: f32[3, 6]) {
  m = aten::mm(x, w)
  p1 = aten::permute(m, [1, 0])
  p2 = aten::permute(p1, [1, 0])
  s = aten::sum.dim_IntList(y, [0], True)
  r = aten::reshape(s, [6])
  xv = aten::reshape(x, [24])
  return p2, r, xv
})sf";
  Case c{passes::compile(ir::parse_graph(text, {"views", world})),
         std::shared_ptr<ir::Graph>(ir::parse_graph(text, {"views", world}))};
  run_threads(world, [&](Runtime& rt) {
    int dev = bind_device();
    exec::Executable exe(c.plan, exec::ExecOptions{Device::cuda(dev)});
    std::vector<std::vector<Tensor>> host(2), dev_in(2), into(2);
    for (int k = 0; k < 2; ++k) {
      host[size_t(k)] = host_inputs(c, rt.rank(), k);
      for (const Tensor& h : host[size_t(k)]) dev_in[size_t(k)].push_back(to_device(h));
      for (const ir::Value* v : c.plan->graph->outputs())
        into[size_t(k)].push_back(Tensor::empty(v->type().shape, v->type().dtype, Device::cuda(dev)));
    }
    for (int iter = 0; iter < 6; ++iter) {
      const size_t k = size_t(iter % 2);
      exec::RunOptions options;
      options.into = into[k];
      std::vector<Tensor> got = exe.run(dev_in[k], options);
      expect_matches(c, host[k], got, fmt::format("world {} rank {} run {}", world, rt.rank(), iter));
      EXPECT_EQ(exe.last_stats().outputs_bound, 2u) << "run " << iter;  // p2 through m, r through s
    }
  }, ThreadsOptions{60});
}

// Runs on a stream of the caller's: the caller enqueues the inputs' upload on it, the run follows
// with no host wait, outputs land in the caller's tensors, and the caller's stream waits for them.
TEST_P(CudaStream, RunsFollowAndPrecedeTheCallersStream) {
  const int world = GetParam();
  // Runs 4 and 5 go to the legacy default stream, one per device per process: two rank threads on
  // one GPU would queue one rank's all-reduce behind the other's, which waits for it (a deadlock
  // of the test's making, seen on a one-GPU machine). Separate GPUs per rank, as users run.
  if (device_count() < world) GTEST_SKIP() << "needs a GPU per rank (the legacy default stream)";
  Case c = compile("tp_mlp_small.sf", world);
  run_threads(world, [&](Runtime& rt) {
    int dev = bind_device();
    cudaStream_t caller = nullptr;
    CUDA_OK(cudaStreamCreateWithFlags(&caller, cudaStreamNonBlocking));
    exec::Executable exe(c.plan, exec::ExecOptions{Device::cuda(dev)});
    std::vector<Tensor> dev_in;
    for (const Tensor& h : host_inputs(c, rt.rank(), 0)) dev_in.push_back(to_device(h));
    Tensor out = Tensor::empty(c.plan->graph->outputs()[0]->type().shape,
                               c.plan->graph->outputs()[0]->type().dtype, Device::cuda(dev));
    for (int iter = 0; iter < 3; ++iter) {
      std::vector<Tensor> host = host_inputs(c, rt.rank(), iter + 1);
      for (size_t i = 0; i < host.size(); ++i) {  // the caller's upload, on its stream
        CUDA_OK(cudaMemcpyAsync(dev_in[i].raw_data(), host[i].raw_data(), host[i].nbytes(),
                                cudaMemcpyHostToDevice, caller));
      }
      exec::RunOptions options;
      options.stream = static_cast<void*>(caller);
      options.into = {out};
      std::vector<Tensor> got = exe.run(dev_in, options);
      ASSERT_EQ(got.size(), 1u);
      EXPECT_EQ(got[0].raw_data(), out.raw_data());
      CUDA_OK(cudaStreamSynchronize(caller));
      expect_matches(c, host, {out},
                     fmt::format("world {} rank {} run {}", world, rt.rank(), iter));
    }
    // Note [replay on the caller's stream]: the first run captured the graph and joined back into
    // the caller's stream; the next ones launched it there.
    EXPECT_NE(exe.device_description().find("2 replay(s) launched on the caller's stream"),
              std::string::npos) << exe.device_description();
    // A run of its own after those (the compute stream must follow them), then runs on the legacy
    // default stream (nullptr: the first joins back, the second replays there), then a run on the
    // caller's stream again, whose first run after the others takes the full path.
    for (int iter = 3; iter < 7; ++iter) {
      std::vector<Tensor> host = host_inputs(c, rt.rank(), iter + 1);
      for (size_t i = 0; i < host.size(); ++i) {
        CUDA_OK(cudaMemcpy(dev_in[i].raw_data(), host[i].raw_data(), host[i].nbytes(),
                           cudaMemcpyHostToDevice));
      }
      exec::RunOptions options;
      if (iter == 4 || iter == 5) options.stream = static_cast<void*>(nullptr);
      if (iter == 6) options.stream = static_cast<void*>(caller);
      options.into = {out};
      exe.run(dev_in, options);
      exe.synchronize();  // waits for a graph launched on any stream
      CUDA_OK(cudaStreamSynchronize(caller));
      expect_matches(c, host, {out},
                     fmt::format("world {} rank {} run {}", world, rt.rank(), iter));
    }
    EXPECT_NE(exe.device_description().find("3 replay(s) launched on the caller's stream"),
              std::string::npos) << exe.device_description();
    CUDA_OK(cudaStreamDestroy(caller));
  }, ThreadsOptions{60});
}

// The caller captures a run into its own CUDA graph after one warm-up run, then replays that graph
// with new values written into the same input tensors. At world 1 in global mode, as
// torch.cuda.graph captures (no thread of the process may make an unsafe call meanwhile); at
// world 2 the ranks are threads of one process, each capturing its own stream: thread-local mode.
TEST_P(CudaStream, RunsAreCapturedIntoTheCallersGraph) {
  const int world = GetParam();
  for (const char* example : {"tp_mlp_small.sf", "input_allreduce.sf", "halo_exchange_signal.sf"}) {
    Case c = compile(example, world);
    run_threads(world, [&](Runtime& rt) {
      int dev = bind_device();
      cudaStream_t caller = nullptr;
      CUDA_OK(cudaStreamCreateWithFlags(&caller, cudaStreamNonBlocking));
      exec::Executable exe(c.plan, exec::ExecOptions{Device::cuda(dev)});
      std::vector<Tensor> dev_in, outs;
      for (const Tensor& h : host_inputs(c, rt.rank(), 0)) dev_in.push_back(to_device(h));
      for (const ir::Value* v : c.plan->graph->outputs())
        outs.push_back(Tensor::empty(v->type().shape, v->type().dtype, Device::cuda(dev)));
      exec::RunOptions options;
      options.stream = static_cast<void*>(caller);
      options.into = outs;
      exe.run(dev_in, options);  // warm-up outside the capture
      CUDA_OK(cudaStreamSynchronize(caller));
      cudaGraph_t graph = nullptr;
      cudaGraphExec_t graph_exec = nullptr;
      CUDA_OK(cudaStreamBeginCapture(caller, world == 1 ? cudaStreamCaptureModeGlobal
                                                        : cudaStreamCaptureModeThreadLocal));
      exe.run(dev_in, options);
      CUDA_OK(cudaStreamEndCapture(caller, &graph));
      CUDA_OK(cudaGraphInstantiate(&graph_exec, graph, 0));
      for (int iter = 1; iter < 4; ++iter) {
        std::vector<Tensor> host = host_inputs(c, rt.rank(), iter);
        for (size_t i = 0; i < host.size(); ++i) {
          CUDA_OK(cudaMemcpyAsync(dev_in[i].raw_data(), host[i].raw_data(), host[i].nbytes(),
                                  cudaMemcpyHostToDevice, caller));
        }
        CUDA_OK(cudaGraphLaunch(graph_exec, caller));
        CUDA_OK(cudaStreamSynchronize(caller));
        expect_matches(c, host, outs, fmt::format("{} world {} rank {} replay {}", example, world,
                                                  rt.rank(), iter));
      }
      EXPECT_NE(exe.device_description().find("captured into the caller's graph"),
                std::string::npos) << exe.device_description();
      cudaGraphExecDestroy(graph_exec);
      cudaGraphDestroy(graph);
      CUDA_OK(cudaStreamDestroy(caller));
    }, ThreadsOptions{60});
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, CudaStream, ::testing::Values(1, 2),
                         [](const auto& world) { return fmt::format("W{}", world.param); });

}  // namespace
}  // namespace symmflow::cuda
