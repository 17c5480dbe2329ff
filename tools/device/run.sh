#!/usr/bin/env bash
# The GPU work of symmflow in one call of the device tool (nvidia-h200-x2, or one GPU):
#   device run: bash tools/device/run.sh [full|quick|verify|sweep|gemm|mlp|build]
# configures and builds only the cuda targets, runs the GPU tests (then a reduced set under
# compute-sanitizer memcheck and racecheck), every example compiled and run on the GPUs with
# --check (1, 2 and, with four GPUs, 4 ranks; two ranks share a GPU on a one-GPU host), the
# 8-layer MLP compiled by symmflow beside PyTorch, the all-reduce bench beside NCCL and PyTorch's
# paths (two or more GPUs),
# and prints the tables last. Logs go to $OUT. `gemm` builds and runs only the GEMM work: the
# matmul and executor tests, the skinny-GEMM bench beside cuBLAS/cuBLASLt, and the MLP with and
# without it and with and without early starts. `mlp` builds only the CLI and times the 8-layer MLP
# at every rank count up to the GPUs (two rounds of the configurations above), beside PyTorch
# on all GPUs in the same call.
# With a folder .base (a `git archive` of an earlier commit, ignored and carried by the call),
# its CLI is built into build/base and the MLP runs alternate it with this tree's, so a change is
# measured against its base in the same call. `build` only builds (both trees, and the Python
# module when nanobind's wheel is carried in .whl) and exits, so a second call on the still-warm
# machine runs `quick` or `verify` without the build's minutes. `verify` is every GPU test and
# example (about 8 minutes on one H100); `mlp` times the MLP beside its base; then
# `bash tools/device/torch_backend.sh run` checks and times the PyTorch backend. Logs come back
# packed in $OUT/logs.tgz.
set -uo pipefail
# Only 8 files come back from $OUT: every log goes to a folder of its own, packed into
# $OUT/logs.tgz at each step (so a call stopped at its time limit still returns what it wrote).
source "$(dirname "$0")/common.sh"
mode=${1:-full}
nvidia-smi -L | tee "$OUT/gpus.txt"
python=OFF
if ls .whl/nanobind-*.whl >/dev/null 2>&1 && python3 -m pip install -q --no-index --no-deps \
    --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1; then
  export PYTHONPATH=/tmp/site
  python=ON
fi

# The 8-layer MLP compiled by symmflow at 1 and (with two GPUs, or sharing one) 2 ranks: as built
# (skinny GEMM, steps started early), without early starts, and with cuBLAS only, alternating for
# $2 rounds; then PyTorch at world 1 on the same shapes.
mlp_runs() {
  local ranks=$1 rounds=$2
  step "mlp compiled by symmflow"
  for r in $1; do
    for round in $(seq "$2"); do
      for cfg in "16 1" "16 0" "0 1"; do
        set -- $cfg
        echo "ranks=$r skinny_max_rows=$1 early_launch=$2 round=$round: $(SYMMFLOW_CUDA_SKINNY_GEMM_MAX_ROWS=$1 \
          SYMMFLOW_CUDA_EARLY_LAUNCH=$2 timeout 200 build/device/bin/symmflow run examples/tp_mlp.sf \
          --device cuda --ranks $r --iters 100 2>&1 | tee -a "$OUT/mlp_symmflow.txt" \
          | grep -E "replay|rror" | head -2)"
      done
    done
  done
  if [[ -x build/base/bin/symmflow ]]; then
    step "mlp: the base (.base) beside this tree, alternating"
    for r in $ranks; do
      for round in $(seq $(( rounds + 2 ))); do
        for tree in base device; do
          echo "ranks=$r tree=$tree round=$round: $(timeout 200 build/$tree/bin/symmflow run \
            examples/tp_mlp.sf --device cuda --ranks $r --iters 100 2>&1 \
            | tee -a "$OUT/mlp_base.txt" | grep -E "replay|rror" | head -2)"
        done
      done
    done
  fi
  PYTHONUNBUFFERED=1 timeout 200 torchrun --nproc-per-node 1 tools/device/torch_mlp.py \
    --json "$OUT/torch_mlp1.json" 2>&1 | grep -E "torch_mlp|Error|error" | head -5
}

step configure
cmake -S . -B build/device -G Ninja -DCMAKE_BUILD_TYPE=Release -DSYMMFLOW_CUDA=ON \
  -DSYMMFLOW_BUILD_BENCH=ON -DSYMMFLOW_TESTS_CUDA_ONLY=ON -DSYMMFLOW_PYTHON=$python \
  >"$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
if [[ -d .base && ! -x build/base/bin/symmflow ]]; then
  step "build the base (.base)"
  { cmake -S .base -B build/base -G Ninja -DCMAKE_BUILD_TYPE=Release -DSYMMFLOW_CUDA=ON \
      -DSYMMFLOW_BUILD_BENCH=OFF -DSYMMFLOW_BUILD_TESTS=OFF && \
    cmake --build build/base -j "$(nproc)" --target symmflow_cli symmflow_cuda; } >"$OUT/base_build.log" 2>&1 \
    || { echo "base build failed"; tail -20 "$OUT/base_build.log"; }
fi
if [[ "$mode" == mlp ]]; then
  step "build (mlp)"
  cmake --build build/device -j "$(nproc)" --target symmflow_cli >"$OUT/build.log" 2>&1 \
    || { grep -E "error|Error" -A3 "$OUT/build.log" | head -60; exit 1; }
  gpus=$(nvidia-smi -L | wc -l)
  mlp_runs "$(seq -s ' ' "$gpus")" 2
  PYTHONUNBUFFERED=1 timeout 200 torchrun --nproc-per-node "$gpus" tools/device/torch_mlp.py \
    --json "$OUT/torch_mlp.json" 2>&1 | grep -E "torch_mlp|Error|error" | head -5
  step done
  exit 0
fi
if [[ "$mode" == gemm ]]; then
  step "build (gemm)"
  cmake --build build/device -j "$(nproc)" --target test_cuda_ops test_cuda_exec symmflow_cli \
    bench_cuda_gemm \
    >"$OUT/build.log" 2>&1 || { grep -E "error|Error" -A3 "$OUT/build.log" | head -60; exit 1; }
  for t in test_cuda_ops test_cuda_exec; do
    step "$t"
    timeout 400 build/device/tests/cuda/$t 2>&1 | tee "$OUT/$t.log" \
      | grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|rror:" | head -30
  done
  mlp_runs "1 2" 2
  step "gemm: skinny kernel, cuBLAS, cuBLASLt"
  timeout 300 build/device/bin/bench_cuda_gemm --json "$OUT/gemm.json" | tee "$OUT/gemm.txt"
  exit 0
fi
step build
gpu_tests="test_cuda test_cuda_symm_ops test_cuda_ops test_cuda_exec test_cuda_llama_ops test_cuda_stream"
gpu_tests+=" test_cuda_mask_ops test_cuda_moe_ops test_cuda_train_ops"
targets="$gpu_tests test_cuda_mpi symmflow_mpi"
targets+=" symmflow_cli symmflow_cuda"
[[ "$mode" != verify ]] && targets+=" bench_cuda_allreduce bench_cuda_mlp bench_cuda_pointwise bench_cuda_gemm"
[[ $python == ON ]] && targets+=" symmflow_python"
cmake --build build/device -j "$(nproc)" --target $targets \
  >"$OUT/build.log" 2>&1 || { grep -E "error|Error" -A3 "$OUT/build.log" | head -60; exit 1; }
if [[ "$mode" == build ]]; then
  step "built"
  exit 0
fi

gpus=$(nvidia-smi -L | wc -l)
rank_counts="1 2"; (( gpus >= 4 )) && rank_counts="1 2 4"
S=build/device/bin/symmflow
for t in $gpu_tests; do
  step "$t"
  timeout 400 build/device/tests/cuda/$t 2>&1 | tee "$OUT/$t.log" | grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|error|rror:" | head -30
done
np=$(( gpus >= 4 ? 4 : 2 ))
step "one process per rank (mpirun -np $np)"
MPIRUN="mpirun --allow-run-as-root --oversubscribe -np $np"
timeout 200 $MPIRUN build/device/tests/cuda/test_cuda_mpi --gtest_color=no 2>&1 | tee "$OUT/test_cuda_mpi.log" \
  | grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|rror|tests failed" | head -20
for ex in tp_mlp tp_mlp_small input_allreduce inplace_allreduce halo_exchange_signal; do
  echo "$ex (symmflow run --transport mpi): $(timeout 200 $MPIRUN $S run examples/$ex.sf \
    --transport mpi --device cuda --check --iters 3 2>&1 | grep -E 'check:|rror' | head -2)"
done | tee "$OUT/examples_mpi.txt"
step "examples on the GPU (--check)"
for ex in tp_mlp tp_mlp_small pointwise_then_allreduce input_allreduce inplace_allreduce halo_exchange \
  halo_exchange_signal decoder_block decoder_block_aten inplace_32_layers inplace_input reduce_to_root; do
  for r in $rank_counts; do
    echo "$ex ranks=$r: $(timeout 120 $S run examples/$ex.sf --device cuda --ranks $r --check --iters 5 2>&1 | grep -E 'check:|rror' | head -2)"
  done
done | tee "$OUT/examples.txt"
for r in $rank_counts; do  # symm_mem::fused_all_reduce_add_rms_norm: one fused kernel on the GPU
  echo "allreduce_rmsnorm ranks=$r: $(timeout 120 $S run examples/allreduce_rmsnorm.sf --device cuda --ranks $r \
    --check --iters 5 2>&1 | grep -E 'check:|rror' | head -2)"
done | tee -a "$OUT/examples.txt"
if [[ "$mode" == verify ]]; then  # the MLP beside its base: `run.sh mlp` (one call each fits)
  step done
  exit 0
fi
mlp_runs "1 2" 1
step "pointwise: unfused calls, the register-program engine, a hand-written kernel"
timeout 120 build/device/bin/bench_cuda_pointwise | tee "$OUT/pointwise.txt"
step "gemm: skinny kernel, cuBLAS, cuBLASLt"
timeout 300 build/device/bin/bench_cuda_gemm --json "$OUT/gemm.json" | tee "$OUT/gemm.txt"
if [[ "$mode" == full ]]; then
  for tool in memcheck racecheck; do
    step "compute-sanitizer $tool"
    SYMMFLOW_TEST_SMALL=1 timeout 240 compute-sanitizer --tool "$tool" \
      build/device/tests/cuda/test_cuda --gtest_filter='CudaAllReduce.EveryAlgorithm*:CudaAllReduce.Zero*' \
      >"$OUT/sanitizer_$tool.log" 2>&1
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$OUT/sanitizer_$tool.log" | head -5
    timeout 240 compute-sanitizer --tool "$tool" build/device/tests/cuda/test_cuda_symm_ops \
      --gtest_filter='CudaSymmOps.PutSignal*:CudaSymmOps.CollectivePermute*:CudaSymmOps.ReduceToRoot*' >"$OUT/sanitizer_symm_$tool.log" 2>&1
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$OUT/sanitizer_symm_$tool.log" | head -5
    timeout 240 compute-sanitizer --tool "$tool" build/device/tests/cuda/test_cuda_ops \
      --gtest_filter='CudaOps.Binary*:CudaOps.Copies*:CudaOps.RmsNorm*:CudaOps.Skinny*' >"$OUT/sanitizer_ops_$tool.log" 2>&1
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$OUT/sanitizer_ops_$tool.log" | head -5
    timeout 240 compute-sanitizer --tool "$tool" build/device/tests/cuda/test_cuda_exec \
      --gtest_filter='CudaFused.*' >"$OUT/sanitizer_fused_$tool.log" 2>&1
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$OUT/sanitizer_fused_$tool.log" | head -5
  done
fi

if (( gpus < 2 )); then
  step "one GPU: the two-GPU benches are skipped"
  exit 0
fi

if [[ "$mode" == sweep ]]; then
  # Launch shapes of the two-shot at large sizes (tunables SYMMFLOW_CUDA_THREADS, _BLOCKS_PER_SM).
  for threads in 256 512 1024; do
    for per_sm in 1 2 4; do
      r=$(SYMMFLOW_CUDA_THREADS=$threads SYMMFLOW_CUDA_BLOCKS_PER_SM=$per_sm timeout 120 \
        build/device/bin/bench_cuda_allreduce --min 64M --max 256M --impls symmflow_two_shot 2>/dev/null | tail -2 | awk '{print $4}' | xargs)
      echo "two_shot threads=$threads blocks_per_sm=$per_sm: 64M 256M us = $r"
    done
  done
fi
step "bench symmflow + nccl"
timeout 300 build/device/bin/bench_cuda_allreduce --json "$OUT/symmflow.json" 2>"$OUT/bench.err" \
  | tee "$OUT/bench.txt"
tail -5 "$OUT/bench.err"
step "bench pytorch"
PYTHONUNBUFFERED=1 timeout 300 torchrun --nproc-per-node "$(nvidia-smi -L | wc -l)" \
  tools/device/torch_allreduce.py --json "$OUT/torch.json" >"$OUT/torch.log" 2>&1
grep -vE "^\s+torch_" "$OUT/torch.log" | grep -v "^W1\|^$" | tail -8
step "mlp: symmflow (cuBLAS + all-reduce by hand) and pytorch"
timeout 120 build/device/bin/bench_cuda_mlp --json "$OUT/mlp.json" 2>&1 | tail -3
PYTHONUNBUFFERED=1 timeout 200 torchrun --nproc-per-node "$(nvidia-smi -L | wc -l)" \
  tools/device/torch_mlp.py --json "$OUT/torch_mlp.json" 2>&1 | grep -E "torch_mlp|Error|error" | head -5
step done
python3 tools/device/table.py "$OUT/symmflow.json" "$OUT/torch.json" | tee "$OUT/table.txt"
