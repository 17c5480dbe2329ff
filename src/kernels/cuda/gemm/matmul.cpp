// cuda kernels of aten::mm, bmm, addmm (+ out variants, addmm_) through cuBLAS: f32, bf16, f16
// with f32 accumulation (no TF32), f64 in double; bf16/f16 GEMMs of few rows (x row-major, w
// row-major or transposed: nn.Linear's layout) take the weight-streaming kernel instead when
// skinny_gemm_split finds it a split (Note [skinny GEMM]; a split above 1 only with the tunable
// cuda_skinny_gemm_split, Note [skinny GEMM split]).
// Row-major operands map onto cuBLAS's column-major GEMM as C^T = B^T A^T; an operand with unit
// stride in either dim is passed as is (transposed or not), anything else is first copied
// contiguous. The handle and its workspace are made once per rank thread (before any capture:
// the executor warms them up), so every GEMM can be captured into a CUDA graph.
#include <functional>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "kernels/cuda/gemm/blas.hpp"
#include "kernels/cuda/pointwise/program.hpp"
#include "kernels/cuda/gemm/ordered_gemm.hpp"
#include "kernels/cuda/gemm/skinny_gemm.hpp"
#include "kernels/families.hpp"
#include "ops/aten/meta.hpp"
#include "runtime/cuda/check.hpp"
#include "symmflow/ops/aten.hpp"
#include "symmflow/ops/library.hpp"
#include "symmflow/kernels/cuda.hpp"
#include "symmflow/runtime/cuda_memory.hpp"
#include "symmflow/runtime/tunables.hpp"

#define SF_CUBLAS_CHECK(call)                                                             \
  do {                                                                                    \
    cublasStatus_t sf_st_ = (call);                                                       \
    if (sf_st_ != CUBLAS_STATUS_SUCCESS)                                                  \
      ::symmflow::throw_error(::symmflow::ErrorCode::Cuda, "{} failed: {} ({})", #call,   \
                              cublasGetStatusString(sf_st_), cublasGetStatusName(sf_st_)); \
  } while (0)

namespace symmflow::cuda {

int skinny_gemm_split_in_force(const SkinnyGemm& g, int sms) {
  const int split = skinny_gemm_split(g, tunables().cuda_skinny_gemm_max_rows, sms);
  return split > 1 && !tunables().cuda_skinny_gemm_split ? 0 : split;
}

namespace {

constexpr size_t kWorkspaceBytes = 32 << 20;

struct Blas {
  cublasHandle_t handle = nullptr;
  void* workspace = nullptr;
  int device = -1;
  void reset() {
    if (handle) cublasDestroy(handle);
    if (workspace) cudaFree(workspace);
    handle = nullptr;
    workspace = nullptr;
  }
  ~Blas() { reset(); }
};
thread_local Blas tls_blas;

cudaDataType_t cuda_type(std::string_view op, DType d) {
  switch (d) {
    case DType::f32: return CUDA_R_32F;
    case DType::bf16: return CUDA_R_16BF;
    case DType::f16: return CUDA_R_16F;
    case DType::f64: return CUDA_R_64F;
    default: break;
  }
  invalid_usage("{}: dtype {} has no cuda kernel (f32, bf16, f16, f64)", op, dtype_name(d));
}

// A matrix operand as cuBLAS sees it: its data, whether it is transposed and its leading dim.
struct Operand {
  Tensor t;
  cublasOperation_t op = CUBLAS_OP_N;
  int64_t ld = 0;
};

// `t` (the last two dims a [rows, cols] matrix) as a row-major operand.
Operand as_operand(const Tensor& t) {
  const int64_t d = t.dim();
  const int64_t rows = t.size(d - 2), cols = t.size(d - 1);
  const int64_t rs = t.strides()[size_t(d - 2)], cs = t.strides()[size_t(d - 1)];
  if ((cs == 1 || cols == 1) && rs >= std::max<int64_t>(cols, 1)) return {t, CUBLAS_OP_N, rs};
  if ((rs == 1 || rows == 1) && cs >= std::max<int64_t>(rows, 1)) return {t, CUBLAS_OP_T, cs};
  return {aten::clone(t), CUBLAS_OP_N, cols};  // contiguous
}

int64_t batch_stride(const Tensor& t) { return t.dim() == 3 ? t.strides()[0] : 0; }

// Deterministic mode (Note [skinny GEMM rows] in skinny_gemm.cu): a row's bits do not depend on
// the number of rows. The skinny kernel's rows where it takes the shape, else the ordered GEMM;
// never cuBLAS, whose algorithm (and split of k) depends on the rows. Which of the two runs
// depends on the dtype, n, k, the layouts and the alignment, never on the rows.
void deterministic_gemm(const Tensor& out, const Operand& A, const Operand& M, double alpha,
                        double beta, int64_t batch, int64_t out_batch_stride) {
  const int64_t d = out.dim();
  const int64_t rows = out.size(d - 2), cols = out.size(d - 1);
  const int64_t k = A.t.size(A.t.dim() - 1);
  const DType dt = out.dtype();
  const bool half = dt == DType::bf16 || dt == DType::f16;
  if (batch == 1 && A.op == CUBLAS_OP_N && half) {
    SkinnyGemm g{A.t.raw_data(), M.t.raw_data(), out.raw_data(), rows, cols, k, A.ld, M.ld, cols,
                 float(alpha), float(beta), dt == DType::f16, M.op == CUBLAS_OP_T};
    g.split = 1;
    if (skinny_gemm_takes_rows(g)) {
      SF_CUDA_CHECK(cudaError_t(launch_skinny_gemm(g, current_stream())));
      return;
    }
  }
  OrderedGemm g;
  g.a = A.t.raw_data(), g.b = M.t.raw_data(), g.c = out.raw_data();
  g.m = rows, g.n = cols, g.k = k, g.batch = batch;
  g.a_row = A.op == CUBLAS_OP_N ? A.ld : 1, g.a_col = A.op == CUBLAS_OP_N ? 1 : A.ld;
  g.b_row = M.op == CUBLAS_OP_N ? M.ld : 1, g.b_col = M.op == CUBLAS_OP_N ? 1 : M.ld;
  g.a_batch = batch_stride(A.t), g.b_batch = batch_stride(M.t);
  g.c_row = cols, g.c_batch = out_batch_stride;
  g.alpha = alpha, g.beta = beta;
  g.type = dt == DType::f64 ? GemmType::f64
           : dt == DType::bf16 ? GemmType::bf16
           : dt == DType::f16  ? GemmType::f16
                               : GemmType::f32;
  SF_CUDA_CHECK(cudaError_t(launch_ordered_gemm(g, current_stream())));
}

// out[b] = alpha * a[b] @ m[b] + beta * out[b] for `batch` matrices (batch strides in elements).
void gemm(std::string_view op, const Tensor& out, const Tensor& a, const Tensor& m, double alpha,
          double beta, int64_t batch) {
  const int64_t d = out.dim();
  const int64_t rows = out.size(d - 2), cols = out.size(d - 1), k = a.size(a.dim() - 1);
  if (out.numel() == 0) return;
  cudaDataType_t type = cuda_type(op, out.dtype());
  SF_CHECK(a.dtype() == out.dtype() && m.dtype() == out.dtype(),
           "{}: operands of dtypes {} and {} into {}: cuda matmul needs one dtype", op,
           dtype_name(a.dtype()), dtype_name(m.dtype()), dtype_name(out.dtype()));
  // Rows of contiguous elements; a batch (3-d) may have any stride (gemm_rows' slices).
  SF_CHECK(out.strides()[size_t(d - 1)] == 1 && (rows <= 1 || out.strides()[size_t(d - 2)] == cols),
           "{}: internal: the cuda GEMM writes rows of contiguous elements", op);
  const int64_t out_batch_stride = d == 3 ? out.strides()[0] : rows * cols;
  Operand A = as_operand(a), M = as_operand(m);
  if (tunables().deterministic)
    return deterministic_gemm(out, A, M, alpha, beta, batch, out_batch_stride);
  if (batch == 1 && A.op == CUBLAS_OP_N && (type == CUDA_R_16BF || type == CUDA_R_16F)) {
    SkinnyGemm g{A.t.raw_data(), M.t.raw_data(), out.raw_data(), rows, cols, k, A.ld, M.ld, cols,
                 float(alpha), float(beta), type == CUDA_R_16F, M.op == CUBLAS_OP_T};
    g.split = skinny_gemm_split_in_force(g, multiprocessors());
    if (g.split > 0) {
      const StepLaunch& launch = current_launch();  // Note [early launch]
      const int64_t w_elements = g.w_t ? (cols - 1) * M.ld + k : (k - 1) * M.ld + cols;
      const size_t w_bytes = size_t(w_elements) * dtype_size(out.dtype());
      g.early = launch.early;
      g.w_stable = launch.after_communication && launch.is_stable(g.w, w_bytes);
      SF_CUDA_CHECK(cudaError_t(launch_skinny_gemm(g, current_stream())));
      return;
    }
  }
  auto h = static_cast<cublasHandle_t>(blas_handle());
  SF_CUBLAS_CHECK(cublasSetStream(h, static_cast<cudaStream_t>(current_stream())));
  const bool wide = out.dtype() == DType::f64;
  const float fa = float(alpha), fb = float(beta);
  const void* pa = wide ? static_cast<const void*>(&alpha) : &fa;
  const void* pb = wide ? static_cast<const void*>(&beta) : &fb;
  cublasComputeType_t compute = wide ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
  if (k == 0) {  // no products: out = beta * out (alpha * 0)
    ProgramBuilder b(out.shape());
    int x = b.load(out, out.dtype());
    b.store(out, b.op(PwOp::mul, x, b.konst(beta, out.dtype()), out.dtype()));
    b.launch();
    return;
  }
  // Column-major: out^T (cols x rows) = m^T (cols x k) @ a^T (k x rows).
  SF_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      h, M.op, A.op, int(cols), int(rows), int(k), pa, M.t.raw_data(), type, int(M.ld),
      batch_stride(M.t), A.t.raw_data(), type, int(A.ld), batch_stride(A.t), pb, out.raw_data(),
      type, int(cols), out_batch_stride, int(batch), compute, CUBLAS_GEMM_DEFAULT));
  // Note [errors cuBLAS recovered from]: a GEMM of odd sizes at an unaligned address returns
  // success but may leave the error of a configuration it tried and dropped as the thread's last
  // CUDA error; the collectives' launchers read cudaGetLastError() after their launch and would
  // report it as theirs (seen: "invalid argument" from a barrier after the collective matmuls'
  // chunk GEMMs, 2 ranks, K = 17). cuBLAS said success, and a sticky error would come back from
  // every later call, so a non-sticky one left here is cleared.
  (void)cudaGetLastError();
}

// The destination of an out/in-place variant: itself when contiguous, else a temporary copied
// back at the end.
void into(const Tensor& dst, const std::function<void(const Tensor&)>& compute) {
  if (dst.is_contiguous()) return compute(dst);
  Tensor tmp = aten::clone(dst);
  compute(tmp);
  aten::copy_(dst, tmp);
}

Kernel mm_kernel(bool batched, const char* written) {
  return [=](KernelCall& call) {
    const std::string& op = call.op.name();
    const Tensor& self = call.arg("self").to_tensor();
    const Tensor& mat2 = call.arg("mat2").to_tensor();
    TensorSpec spec = batched ? aten_meta::bmm_spec(op, self, mat2)
                              : aten_meta::mm_spec(op, self, mat2);
    const Tensor& dst = *written ? call.arg(written).to_tensor() : call.out(0);
    if (*written) aten_meta::check_out(op, written, dst, spec, /*exact_dtype=*/true);
    into(dst, [&](const Tensor& o) {
      gemm(op, o, self, mat2, 1.0, 0.0, batched ? self.size(0) : 1);
    });
  };
}

Kernel addmm_kernel(const char* written) {
  return [=](KernelCall& call) {
    const std::string& op = call.op.name();
    const Tensor& self = call.arg("self").to_tensor();
    const Tensor& mat1 = call.arg("mat1").to_tensor();
    const Tensor& mat2 = call.arg("mat2").to_tensor();
    const double beta = call.arg("beta").to_double(), alpha = call.arg("alpha").to_double();
    TensorSpec spec =
        aten_meta::addmm_spec(op, self, mat1, mat2, call.arg("beta"), call.arg("alpha"));
    const Tensor& dst = *written ? call.arg(written).to_tensor() : call.out(0);
    if (*written) aten_meta::check_out(op, written, dst, spec, /*exact_dtype=*/true);
    into(dst, [&](const Tensor& o) {
      if (beta != 0 && o.raw_data() != self.raw_data()) {  // o = self (broadcast), then the GEMM
        ProgramBuilder b(o.shape());
        b.store(o, b.load(self, o.dtype()));
        b.launch();
      }
      gemm(op, o, mat1, mat2, alpha, beta, 1);
    });
  };
}

}  // namespace

void gemm_rows(std::string_view op, const Tensor& out, const Tensor& a, const Tensor& m) {
  gemm(op, out, a, m, 1.0, 0.0, out.dim() == 3 ? out.size(0) : 1);
}

void* blas_handle() {
  int device = 0;
  SF_CUDA_CHECK(cudaGetDevice(&device));
  if (tls_blas.handle && tls_blas.device == device) return tls_blas.handle;
  check_not_capturing("creating the cuBLAS handle");
  tls_blas.reset();
  SF_CUBLAS_CHECK(cublasCreate(&tls_blas.handle));
  SF_CUDA_CHECK(cudaMalloc(&tls_blas.workspace, kWorkspaceBytes));
  SF_CUBLAS_CHECK(cublasSetWorkspace(tls_blas.handle, tls_blas.workspace, kWorkspaceBytes));
  tls_blas.device = device;
  return tls_blas.handle;
}

SYMMFLOW_LIBRARY_IMPL(aten, cuda, m) {
  kernels::register_matmul_kernels(m, mm_kernel, addmm_kernel, float_only);
}

}  // namespace symmflow::cuda
