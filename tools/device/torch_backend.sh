#!/usr/bin/env bash
# The PyTorch bridge (issue 17) on a GPU machine, in two calls of the device tool on a warm
# machine (carry .whl: nanobind's wheel, which the device machine lacks):
#   bash tools/device/torch_backend.sh build   # configure + build CUDA module, CLI, Python module,
#                                              # the GPU tests of the decoder-block ops
#   bash tools/device/torch_backend.sh run     # (or one part: models, failures, timing;
#                                              # CASES=mlp,eager limits models, ITERS timing)
#                                              # the torchrun worker's cases on the GPU with two
#                                              # processes sharing it, then the backend timed at
#                                              # world 1 beside eager and inductor; table last
# (`bash tools/device/run.sh build` builds the same and more; `run.sh verify` runs the GPU tests.)
# Logs go to $OUT.
set -uo pipefail
# Only 8 files come back from $OUT: every log goes to a folder of its own, packed into
# $OUT/logs.tgz at each step (so a call stopped at its time limit still returns what it wrote).
source "$(dirname "$0")/common.sh"
mode=${1:-run}
carried_wheels && export PYTHONPATH=/tmp/site
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
# Two processes sharing the GPU (torch.distributed over gloo; the references on the CPU): every
# case of the CPU torchrun tests on the GPU, the eager ops, PyTorch's CUDA graphs, a raising rank
# and ranks binding different shapes (tests/python/torch/worker.py).
worker() {  # name cases dtypes
  local name=$1
  shift
  mkdir -p "$OUT/results_$name"
  SYMMFLOW_TEST_DEVICE=cuda SYMMFLOW_TEST_RESULTS="$OUT/results_$name" SYMMFLOW_TEST_TIMEOUT_S=20 \
    PYTHONUNBUFFERED=1 timeout 300 torchrun --nproc-per-node 2 --master-port $((29600 + RANDOM % 200)) \
    tests/python/torch/worker.py "$@" >"$OUT/worker_$name.log" 2>&1
  echo "worker $name: exit $? ; $(cat "$OUT"/results_$name/*.jsonl 2>/dev/null | python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin if l.strip()]
bad = [r for r in rows if not r["ok"]]
print(f"{len(rows) - len(bad)}/{len(rows)} ok")
for r in bad:
    print("  FAILED", json.dumps(r)[:1500])
for r in rows:
    if r["case"] in ("raise", "shapes"):
        print("  ", r["case"], "rank", r["rank"], r.get("seconds", ""), r["message"][:300])
')"
}
if [[ "$mode" == run || "$mode" == models ]]; then
  step "two processes sharing the GPU: models, symm_mem cases, eager ops, CUDA graphs"
  cases=mlp,decoder,decoder_sp,decoder_unsupported,input_allreduce,inplace_allreduce,ring,eager,cudagraph
  worker models "${CASES:-$cases}" f32,bf16
fi
if [[ "$mode" == run || "$mode" == failures ]]; then
  step "two processes sharing the GPU: a raising rank, different shapes"
  worker raise raise f32
  worker shapes shapes f32
fi
if [[ "$mode" == run || "$mode" == timing ]]; then
  step "backend: world 1, timed beside eager and inductor"
  PYTHONUNBUFFERED=1 timeout 300 torchrun --nproc-per-node 1 tools/device/torch_backend.py \
    --json "$OUT/torch_backend1.json" --iters "${ITERS:-50}" >"$OUT/torch_backend1.log" 2>&1
  sed -n '/^torch_backend:/,$p' "$OUT/torch_backend1.log"; tail -3 "$OUT/torch_backend1.log"
fi
step done
