#!/usr/bin/env bash
# The GPU work of symmflow in one call of the device tool (nvidia-h200-x2):
#   device run: bash tools/device/run.sh [full|quick|sweep]
# configures and builds only the cuda targets, runs the GPU tests (then a reduced set under
# compute-sanitizer memcheck and racecheck), the all-reduce bench beside NCCL, and PyTorch's
# paths on the same GPUs, and prints the merged table last. Logs go to $OUT.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/symmflow-device}
mkdir -p "$OUT"
mode=${1:-full}
nvidia-smi -L | tee "$OUT/gpus.txt"
start=$(date +%s)
step() { echo "== $* ($(( $(date +%s) - start )) s)"; }

step configure
cmake -S . -B build/device -G Ninja -DCMAKE_BUILD_TYPE=Release -DSYMMFLOW_CUDA=ON \
  -DSYMMFLOW_BUILD_BENCH=ON -DSYMMFLOW_TESTS_CUDA_ONLY=ON >"$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
step build
cmake --build build/device -j "$(nproc)" --target test_cuda bench_cuda_allreduce bench_cuda_mlp \
  >"$OUT/build.log" 2>&1 || { grep -E "error|Error" -A3 "$OUT/build.log" | head -60; exit 1; }

step tests
timeout 300 build/device/tests/cuda/test_cuda 2>&1 | tee "$OUT/test_cuda.log" | grep -E "^\[  (PASSED|FAILED|SKIPPED) |OK \]|Failure|error" | head -40
if [[ "$mode" == full ]]; then
  for tool in memcheck racecheck; do
    step "compute-sanitizer $tool"
    SYMMFLOW_TEST_SMALL=1 timeout 240 compute-sanitizer --tool "$tool" \
      build/device/tests/cuda/test_cuda --gtest_filter='CudaAllReduce.EveryAlgorithm*:CudaAllReduce.Zero*' \
      >"$OUT/sanitizer_$tool.log" 2>&1
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$OUT/sanitizer_$tool.log" | head -5
  done
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
