#!/usr/bin/env bash
# The PyTorch bridge (issue 17) on a GPU machine, in two calls of the device tool on a warm
# machine (carry .whl: nanobind's wheel, which the device machine lacks):
#   bash tools/device/torch_backend.sh build   # configure + build CUDA module, CLI, Python module,
#                                              # the GPU tests of the decoder-block ops
#   bash tools/device/torch_backend.sh run     # GPU tests, decoder examples --check at 1 and 2
#                                              # ranks, the backend timed at world 1 and checked
#                                              # with two processes sharing the GPU; table last
# Logs go to $OUT.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/symmflow-device}
mkdir -p "$OUT"
mode=${1:-run}
start=$(date +%s)
step() { echo "== $* ($(( $(date +%s) - start )) s)"; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl >/dev/null 2>&1 && export PYTHONPATH=/tmp/site
if [[ "$mode" == build ]]; then
  nvidia-smi -L | tee "$OUT/gpus.txt"
  step configure
  cmake -S . -B build/device -G Ninja -DCMAKE_BUILD_TYPE=Release -DSYMMFLOW_CUDA=ON \
    -DSYMMFLOW_BUILD_BENCH=OFF -DSYMMFLOW_TESTS_CUDA_ONLY=ON -DSYMMFLOW_PYTHON=ON \
    >"$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
  grep -i "python" "$OUT/configure.log" | head -3
  step build
  cmake --build build/device -j "$(nproc)" --target symmflow_cli symmflow_cuda symmflow_python \
    test_cuda test_cuda_exec test_cuda_llama_ops >"$OUT/build.log" 2>&1 \
    || { grep -E "error|Error" -A3 "$OUT/build.log" | head -60; exit 1; }
  step built
  exit 0
fi
export PYTHONPATH=$PWD/build/device/python:${PYTHONPATH:-}
S=build/device/bin/symmflow
for t in test_cuda_llama_ops test_cuda_exec test_cuda; do
  step "$t"
  timeout 300 build/device/tests/cuda/$t 2>&1 | tee "$OUT/$t.log" \
    | grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|rror:" | head -20
done
step "examples on the GPU (--check)"
for ex in decoder_block decoder_block_aten tp_mlp inplace_32_layers inplace_input; do
  for r in 1 2; do
    echo "$ex ranks=$r: $(timeout 120 $S run examples/$ex.sf --device cuda --ranks $r --check \
      --iters 5 2>&1 | grep -E 'check:|rror' | head -2)"
  done
done | tee "$OUT/examples.txt"
step "backend: two processes sharing the GPU (correctness, no inductor)"
PYTHONUNBUFFERED=1 timeout 240 torchrun --nproc-per-node 2 tools/device/torch_backend.py \
  --json "$OUT/torch_backend2.json" --iters 5 --no-inductor --shared-gpu \
  >"$OUT/torch_backend2.log" 2>&1
sed -n '/^torch_backend:/,$p' "$OUT/torch_backend2.log"; tail -3 "$OUT/torch_backend2.log"
step "backend: world 1, timed beside eager and inductor"
PYTHONUNBUFFERED=1 timeout 300 torchrun --nproc-per-node 1 tools/device/torch_backend.py \
  --json "$OUT/torch_backend1.json" --iters 50 >"$OUT/torch_backend1.log" 2>&1
sed -n '/^torch_backend:/,$p' "$OUT/torch_backend1.log"; tail -3 "$OUT/torch_backend1.log"
step done
