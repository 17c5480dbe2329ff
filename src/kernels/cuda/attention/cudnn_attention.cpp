// Note [cudnn attention]: the forward and backward of scaled_dot_product_attention through
// cuDNN's fused flash-attention kernels, built with the cuDNN frontend's graph API (header-only,
// from the nvidia-cudnn-frontend wheel; cudnn.h from nvidia-cudnn-cu13).
//
// - Each distinct call (dtype, dims, strides, causal, scale, forward with or without stats,
//   backward) builds one frontend graph on first use: validate, operation graph, heuristics
//   mode A's plans, support check, plan build. The graph, its workspace size, or cuDNN's refusal
//   are cached per rank thread and GPU (plans belong to a device; handles to a thread). The
//   handle and plans may be made while a plan's first run is being captured (RelaxedCapture).
// - Operands are read in place through their strides (any layout with unit stride in the head
//   dim, such as a decoder's permuted views); outputs are contiguous. Pointers must be 16-byte
//   aligned, checked per call (a refusal, not an error: the caller runs its own kernel).
// - Workspace: a device allocation per call of the graph's size (a graph allocation inside a
//   capture, Note [scratch inside a capture]).
//
// Note [cudnn masks]: cuDNN takes a mask as an additive bias ([1 or B, 1 or H, L, S] of the
// attention's type, unit stride in S). The caller writes the mask into such a bias
// (attention_bias.cu: a bool mask's dropped keys are -inf; rows padded to a multiple of 8 keys,
// the padding -inf), then asks for the row statistics too: a row whose every key is masked comes
// out of cuDNN as NaN with a non-finite statistic, and launch_fix_masked_rows writes PyTorch's
// zeros there; before a backward it also sets the statistic to +inf, which makes the row's
// probabilities zeros, so its gradients are zeros rather than NaN spread into dk and dv.
//
// Note [cudnn loading]: cuDNN is opened on first use with dlopen (the frontend's dynamic loading:
// nothing links libcudnn, so a machine without it runs everything else). Its major and minor
// version must be the headers' (cudnn.h): the frontend must not meet a library whose interface
// it was not compiled for. $SYMMFLOW_CUDNN_LIBRARY (a path) is the only one tried when set; else
// a libcudnn.so.9 already loaded in the process (PyTorch's) is the only one; else the first of
// the library beside the headers CMake found at configure time, the nvidia/cudnn/lib folder of
// the wheels beside the loaded cuBLAS (site-packages/nvidia/...) and the loader's search path
// whose version matches (a GPU machine may hold the system's cuDNN 9.14 and PyTorch's 9.19).
// Each refusal says why. In that order because a refused candidate cannot be unloaded whole: its
// sub-libraries (libcudnn_graph.so.9, ...) stay, and a later copy would load them by soname.
#include "kernels/cuda/attention/cudnn_attention.hpp"

#include <fmt/format.h>

#include <mutex>

#include "symmflow/core/tensor.hpp"
#include "symmflow/runtime/cuda_memory.hpp"

#if defined(SYMMFLOW_HAVE_CUDNN_FRONTEND)
#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#define CUDNN_FRONTEND_SKIP_JSON_LIB
#define NV_CUDNN_FRONTEND_DISABLE_LOGGING  // Note [cudnn frontend visibility]
#include <dlfcn.h>

#include <filesystem>
#include <unordered_map>

#include "kernels/cuda/choice/kernel_choice.hpp"
#include "kernels/cuda/library_path.hpp"
#include "runtime/cuda/check.hpp"
#include "symmflow/runtime/tunables.hpp"

// Note [cudnn frontend visibility]: the frontend is header-only, and PyTorch's libtorch_cuda.so
// carries its own copy (another version, linked to cuDNN, not dynamically loading it) under the
// same mangled names. With default visibility, this module's calls to the frontend's inline
// functions could bind to whichever copy the process loaded first (ELF interposition), mixing two
// versions' code and layouts. Everything the frontend declares here is hidden, so this module
// binds only to its own copy, and its logging (writes to std::cout when CUDNN_FRONTEND_LOG_INFO
// is set) is compiled out. The SIGSEGV of the first cuDNN plan build inside a PyTorch process was
// not this but a second libstdc++ (Note [one libstdc++] in cmake/Toolchain.cmake).
#pragma GCC visibility push(hidden)
#include <cudnn_frontend.h>

namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;  // the frontend's handle of the dlopen'ed library
}
#pragma GCC visibility pop
#endif

namespace symmflow::cuda {

#if !defined(SYMMFLOW_HAVE_CUDNN_FRONTEND)

const std::string& cudnn_missing() {
  static const std::string why =
      "this symmflow was built without cuDNN's headers (nvidia-cudnn-frontend and "
      "nvidia-cudnn-cu13 were not found at configure time)";
  return why;
}
std::string cudnn_version() { return ""; }
std::string cudnn_attention_refusal(const SdpaShape&, bool) { return cudnn_missing(); }
void cudnn_attention(const SdpaShape&, void*, void*, const void*) {}
std::string cudnn_attention_backward_refusal(const SdpaShape&, const AttentionOperand&) {
  return cudnn_missing();
}
void cudnn_attention_backward(const SdpaShape&, const AttentionOperand&, const void*, const void*,
                              void*, void*, void*, const void*) {}

#else

namespace fe = cudnn_frontend;
namespace {

// ---- Note [cudnn loading] ----------------------------------------------------------------------

void* open_library(const std::string& path, std::string& errors) {
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (!h) errors += fmt::format("; {}: {}", path, dlerror());
  return h;
}

// cuDNN's version as major * 10000 + minor * 100 + patch, or 0 without cudnnGetVersion.
size_t version_of(void* h) {
  using GetVersion = size_t (*)();
  auto get = reinterpret_cast<GetVersion>(dlsym(h, "cudnnGetVersion"));
  return get ? get() : 0;
}

std::string version_text(size_t v) { return fmt::format("{}.{}", v / 10000, v / 100 % 100); }

// "" when `h` is usable: a cuDNN of the headers' major.minor, else why not.
std::string check_version(void* h, const std::string& what) {
  const size_t v = version_of(h);
  if (v == 0) return fmt::format("{} has no cudnnGetVersion", what);
  if (v / 100 == CUDNN_VERSION / 100) return "";
  return fmt::format("{} is cuDNN {} but symmflow was built with cuDNN {}.{}'s headers", what,
                     version_text(v), CUDNN_MAJOR, CUDNN_MINOR);
}

// Note [cudnn loading].
std::string load() {
  std::string errors;
  void* h = nullptr;
  if (const char* env = std::getenv("SYMMFLOW_CUDNN_LIBRARY"); env && *env) {
    h = open_library(env, errors);
    if (!h) return fmt::format("SYMMFLOW_CUDNN_LIBRARY could not be loaded{}", errors);
    if (std::string why = check_version(h, env); !why.empty()) return why;
  } else if ((h = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD))) {
    if (std::string why = check_version(h, "the cuDNN this process already loaded");
        !why.empty()) {
      return why + " (build symmflow against the headers of the cuDNN that PyTorch loads: its "
                   "nvidia-cudnn-cu13 wheel)";
    }
  } else {
    std::vector<std::string> candidates;
#ifdef SYMMFLOW_CUDNN_LIBRARY_HINT
    candidates.push_back(SYMMFLOW_CUDNN_LIBRARY_HINT);
#endif
    candidates.push_back(beside_cublas("cudnn/lib/libcudnn.so.9"));
    candidates.push_back("libcudnn.so.9");
    for (const std::string& path : candidates) {
      if (path.empty() || (path.front() == '/' && !std::filesystem::exists(path))) continue;
      void* c = open_library(path, errors);
      if (!c) continue;
      if (std::string why = check_version(c, path); !why.empty()) {
        errors += "; " + why;
        dlclose(c);
        continue;
      }
      h = c;
      break;
    }
    if (!h) {
      return fmt::format(
          "no libcudnn.so.9 of version {}.{} found (pip install nvidia-cudnn-cu13 of that "
          "version, or set SYMMFLOW_CUDNN_LIBRARY){}",
          CUDNN_MAJOR, CUDNN_MINOR, errors);
    }
  }
  fe::cudnn_dlhandle = h;
  return "";
}

std::string& missing_state() {
  static std::string why;
  return why;
}

// ---- Graphs ------------------------------------------------------------------------------------

enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV, kBias };

struct Plan {
  std::shared_ptr<fe::graph::Graph> graph;  // null: refused
  int64_t workspace = 0;
  std::string refusal;
};

struct ThreadCudnn {
  int device = -1;
  cudnnHandle_t handle = nullptr;
  std::unordered_map<std::string, Plan> plans;
};
thread_local ThreadCudnn tls;

cudnnHandle_t handle() {
  int device = 0;
  SF_CUDA_CHECK(cudaGetDevice(&device));
  if (tls.handle && tls.device == device) return tls.handle;
  RelaxedCapture relaxed;  // a plan's first run captures its steps
  if (tls.handle) fe::detail::destroy_handle(tls.handle);
  tls.handle = nullptr;
  tls.plans.clear();
  const cudnnStatus_t st = fe::detail::create_handle(&tls.handle);
  SF_CHECK(st == CUDNN_STATUS_SUCCESS, "cudnnCreate failed: {}", fe::detail::get_error_string(st));
  tls.device = device;
  return tls.handle;
}

fe::DataType_t io_type(PwType t) {
  return t == PwType::bf16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF;
}

std::vector<int64_t> strides_of(const AttentionOperand& o) {
  return {o.strides[0], o.strides[1], o.strides[2], o.strides[3]};
}
std::vector<int64_t> contiguous4(int64_t a, int64_t b, int64_t c, int64_t d) {
  return {b * c * d, c * d, d, 1};
}

std::shared_ptr<fe::graph::Tensor_attributes> input(fe::graph::Graph& g, const char* name,
                                                    int64_t uid, std::vector<int64_t> dims,
                                                    std::vector<int64_t> strides) {
  return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dims).set_stride(
      strides));
}

// Note [cudnn masks]: the bias input, or null without one.
std::shared_ptr<fe::graph::Tensor_attributes> bias_input(fe::graph::Graph& g, const SdpaShape& s) {
  if (s.bias_row == 0) return nullptr;
  return input(g, "bias", kBias, {s.bias_batch, s.bias_heads, s.q_len, s.kv_len},
               {s.bias_heads * s.q_len * s.bias_row, s.q_len * s.bias_row, s.bias_row, 1});
}

std::string shape_key(const SdpaShape& s, std::string_view mode) {
  auto st = [](const AttentionOperand& o) {
    return fmt::format("{},{},{},{}", o.strides[0], o.strides[1], o.strides[2], o.strides[3]);
  };
  return fmt::format("{} t{} b{} h{}/{} l{} s{} e{}/{} c{} sc{} q{} k{} v{} bias{},{},{}", mode,
                     int(s.type), s.batch, s.heads, s.kv_heads, s.q_len, s.kv_len, s.head_dim,
                     s.v_dim, s.causal, s.scale, st(s.q), st(s.k), st(s.v), s.bias_batch,
                     s.bias_heads, s.bias_row);
}

// Builds `g`'s plans; "" or cuDNN's refusal.
std::string build(fe::graph::Graph& g, int64_t& workspace) {
  cudnnHandle_t h = handle();
  auto step = [](fe::error_t e, const char* what) {
    return e.is_bad() ? fmt::format("cuDNN refused it ({}: {})", what, e.get_message())
                      : std::string();
  };
  std::string why = step(g.validate(), "validate");
  if (why.empty()) why = step(g.build_operation_graph(h), "operation graph");
  if (why.empty()) why = step(g.create_execution_plans({fe::HeurMode_t::A}), "heuristics");
  if (why.empty()) why = step(g.check_support(h), "support");
  if (why.empty()) why = step(g.build_plans(h), "plans");
  if (why.empty()) why = step(g.get_workspace_size(workspace), "workspace");
  return why;
}

std::string common_refusal(const SdpaShape& s) {
  if (!tunables().cuda_cudnn) return "turned off (tunable cuda_cudnn = 0)";
  if (!cudnn_missing().empty()) return cudnn_missing();
  if (s.type != PwType::bf16 && s.type != PwType::f16)
    return "cuDNN's fused attention takes bf16 and f16 only";
  for (const AttentionOperand* o : {&s.q, &s.k, &s.v}) {
    if (o->strides[3] != 1) return "an operand's head dim is strided (cuDNN needs stride 1)";
    if (reinterpret_cast<uintptr_t>(o->data) % 16 != 0)
      return "an operand is not 16-byte aligned";
  }
  return "";
}

// A new graph of s's types in p with q, k and v as its inputs (the forward's and backward's start).
struct QKV {
  std::shared_ptr<fe::graph::Tensor_attributes> q, k, v;
};
QKV start_graph(Plan& p, const SdpaShape& s) {
  p.graph = std::make_shared<fe::graph::Graph>();
  fe::graph::Graph& g = *p.graph;
  g.set_io_data_type(io_type(s.type))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return {input(g, "q", kQ, {s.batch, s.heads, s.q_len, s.head_dim}, strides_of(s.q)),
          input(g, "k", kK, {s.batch, s.kv_heads, s.kv_len, s.head_dim}, strides_of(s.k)),
          input(g, "v", kV, {s.batch, s.kv_heads, s.kv_len, s.v_dim}, strides_of(s.v))};
}

Plan make_forward(const SdpaShape& s, bool stats) {
  Plan p;
  auto [q, k, v] = start_graph(p, s);
  fe::graph::Graph& g = *p.graph;
  auto opts = fe::graph::SDPA_attributes()
                  .set_name("sdpa")
                  .set_generate_stats(stats)
                  .set_attn_scale(float(s.scale));
  if (s.causal) opts.set_causal_mask(true);
  if (auto bias = bias_input(g, s)) opts.set_bias(bias);
  auto [o, st] = g.sdpa(q, k, v, opts);
  o->set_output(true)
      .set_uid(kO)
      .set_dim({s.batch, s.heads, s.q_len, s.v_dim})
      .set_stride(contiguous4(s.batch, s.heads, s.q_len, s.v_dim));
  if (stats) {
    st->set_output(true)
        .set_uid(kStats)
        .set_data_type(fe::DataType_t::FLOAT)
        .set_dim({s.batch, s.heads, s.q_len, 1})
        .set_stride({s.heads * s.q_len, s.q_len, 1, 1});
  }
  p.refusal = build(g, p.workspace);
  if (!p.refusal.empty()) p.graph.reset();
  return p;
}

Plan make_backward(const SdpaShape& s, const AttentionOperand& dout) {
  Plan p;
  auto [q, k, v] = start_graph(p, s);
  fe::graph::Graph& g = *p.graph;
  auto o = input(g, "o", kO, {s.batch, s.heads, s.q_len, s.v_dim},
                 contiguous4(s.batch, s.heads, s.q_len, s.v_dim));
  auto d_o = input(g, "dO", kDO, {s.batch, s.heads, s.q_len, s.v_dim}, strides_of(dout));
  auto stats = input(g, "stats", kStats, {s.batch, s.heads, s.q_len, 1},
                     {s.heads * s.q_len, s.q_len, 1, 1});
  stats->set_data_type(fe::DataType_t::FLOAT);
  auto opts = fe::graph::SDPA_backward_attributes().set_name("sdpa_backward").set_attn_scale(
      float(s.scale));
  if (s.causal) opts.set_causal_mask(true);
  if (auto bias = bias_input(g, s)) opts.set_bias(bias);
  auto [dq, dk, dv] = g.sdpa_backward(q, k, v, o, d_o, stats, opts);
  dq->set_output(true).set_uid(kDQ).set_dim({s.batch, s.heads, s.q_len, s.head_dim}).set_stride(
      contiguous4(s.batch, s.heads, s.q_len, s.head_dim));
  dk->set_output(true)
      .set_uid(kDK)
      .set_dim({s.batch, s.kv_heads, s.kv_len, s.head_dim})
      .set_stride(contiguous4(s.batch, s.kv_heads, s.kv_len, s.head_dim));
  dv->set_output(true)
      .set_uid(kDV)
      .set_dim({s.batch, s.kv_heads, s.kv_len, s.v_dim})
      .set_stride(contiguous4(s.batch, s.kv_heads, s.kv_len, s.v_dim));
  p.refusal = build(g, p.workspace);
  if (!p.refusal.empty()) p.graph.reset();
  return p;
}

std::string backward_key(const SdpaShape& s, const AttentionOperand& dout) {
  return shape_key(s, "bwd") + fmt::format(" do{},{},{},{}", dout.strides[0], dout.strides[1],
                                           dout.strides[2], dout.strides[3]);
}

void check_bias(const SdpaShape& s, const void* bias) {
  SF_CHECK((s.bias_row == 0) == (bias == nullptr) &&
               reinterpret_cast<uintptr_t>(bias) % 16 == 0,
           "cuDNN attention: a bias of rows of {} given {} (16-byte aligned, exactly when the "
           "shape has rows)",
           s.bias_row, bias);
}

template <class Make>
const Plan& plan_for(const std::string& key, Make make) {
  handle();  // a device change drops the plans of the other device
  auto it = tls.plans.find(key);
  if (it == tls.plans.end()) {
    RelaxedCapture relaxed;  // a plan's first run captures its steps
    it = tls.plans.emplace(key, make()).first;
  }
  return it->second;
}

void execute(const Plan& p, std::unordered_map<int64_t, void*>& pack) {
  cudnnHandle_t h = handle();
  auto stream = static_cast<cudaStream_t>(current_stream());
  const cudnnStatus_t st = fe::detail::set_stream(h, stream);
  SF_CHECK(st == CUDNN_STATUS_SUCCESS, "cudnnSetStream failed: {}",
           fe::detail::get_error_string(st));
  int device = 0;
  SF_CUDA_CHECK(cudaGetDevice(&device));
  Tensor workspace;
  if (p.workspace > 0)
    workspace = Tensor::uninitialized({p.workspace}, DType::i8, Device::cuda(device));
  fe::error_t e = p.graph->execute(h, pack, p.workspace > 0 ? workspace.raw_data() : nullptr);
  SF_CHECK(!e.is_bad(), "cuDNN attention failed to run: {}", e.get_message());
}

}  // namespace

const std::string& cudnn_missing() {
  static std::once_flag once;
  std::call_once(once, [] { missing_state() = load(); });
  return missing_state();
}

std::string cudnn_version() {
  if (!tunables().cuda_cudnn || !cudnn_missing().empty()) return "";  // off: never loaded
  const size_t v = fe::detail::get_backend_version();
  return fmt::format("{}.{}.{}", v / 10000, v / 100 % 100, v % 100);
}

std::string cudnn_attention_refusal(const SdpaShape& s, bool stats) {
  if (std::string why = common_refusal(s); !why.empty()) return why;
  return plan_for(shape_key(s, stats ? "fwd+stats" : "fwd"),
                  [&] { return make_forward(s, stats); })
      .refusal;
}

void cudnn_attention(const SdpaShape& s, void* o, void* stats, const void* bias) {
  check_bias(s, bias);
  const bool with_stats = stats != nullptr;
  const Plan& p = plan_for(shape_key(s, with_stats ? "fwd+stats" : "fwd"),
                           [&] { return make_forward(s, with_stats); });
  SF_CHECK(p.graph, "cuDNN attention: {}", p.refusal);
  std::unordered_map<int64_t, void*> pack = {{kQ, const_cast<void*>(s.q.data)},
                                             {kK, const_cast<void*>(s.k.data)},
                                             {kV, const_cast<void*>(s.v.data)},
                                             {kO, o}};
  if (with_stats) pack[kStats] = stats;
  if (bias) pack[kBias] = const_cast<void*>(bias);
  execute(p, pack);
}

std::string cudnn_attention_backward_refusal(const SdpaShape& s, const AttentionOperand& dout) {
  if (std::string why = common_refusal(s); !why.empty()) return why;
  if (dout.strides[3] != 1) return "the output gradient's head dim is strided";
  if (reinterpret_cast<uintptr_t>(dout.data) % 16 != 0)
    return "the output gradient is not 16-byte aligned";
  const std::string& fwd =
      plan_for(shape_key(s, "fwd+stats"), [&] { return make_forward(s, true); }).refusal;
  if (!fwd.empty()) return fwd;
  return plan_for(backward_key(s, dout), [&] { return make_backward(s, dout); }).refusal;
}

void cudnn_attention_backward(const SdpaShape& s, const AttentionOperand& dout, const void* o,
                              const void* stats, void* dq, void* dk, void* dv,
                              const void* bias) {
  check_bias(s, bias);
  const Plan& p = plan_for(backward_key(s, dout), [&] { return make_backward(s, dout); });
  SF_CHECK(p.graph, "cuDNN attention backward: {}", p.refusal);
  std::unordered_map<int64_t, void*> pack = {
      {kQ, const_cast<void*>(s.q.data)}, {kK, const_cast<void*>(s.k.data)},
      {kV, const_cast<void*>(s.v.data)}, {kO, const_cast<void*>(o)},
      {kDO, const_cast<void*>(dout.data)}, {kStats, const_cast<void*>(stats)},
      {kDQ, dq},  {kDK, dk},  {kDV, dv}};
  if (bias) pack[kBias] = const_cast<void*>(bias);
  execute(p, pack);
}

#endif

}  // namespace symmflow::cuda
