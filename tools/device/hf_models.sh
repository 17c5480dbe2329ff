#!/usr/bin/env bash
# transformers models made tensor-parallel, compiled by symmflow on GPUs (issue 24), in two calls
# of the device tool on a warm machine (carry .whl: nanobind's and transformers 5.23's wheels):
#   bash tools/device/hf_models.sh build   # configure + build the CUDA module, CLI, Python module
#                                          # and the GPU tests of the ops these models need
#   bash tools/device/hf_models.sh run     # those GPU tests, then tests/python/torch/hf_worker.py
#                                          # at world 1 and 2 (a GPU each, or sharing one): every
#                                          # case against eager, partitions, boundaries, copies
# CASES1, CASES2 and DTYPES override the worker's cases. Logs go to $OUT (logs.tgz); a table last.
set -uo pipefail
source "$(dirname "$0")/common.sh"
mode=${1:-run}
carried_wheels && export PYTHONPATH=/tmp/site
tests="test_cuda_mask_ops test_cuda_moe_ops test_cuda_llama_ops test_cuda_exec"
if [[ "$mode" == build ]]; then
  nvidia-smi -L | tee "$OUT/gpus.txt"
  step configure
  cmake -S . -B build/device -G Ninja -DCMAKE_BUILD_TYPE=Release -DSYMMFLOW_CUDA=ON \
    -DSYMMFLOW_BUILD_BENCH=OFF -DSYMMFLOW_TESTS_CUDA_ONLY=ON -DSYMMFLOW_PYTHON=ON \
    >"$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
  step build
  cmake --build build/device -j "$(nproc)" --target symmflow_cli symmflow_cuda symmflow_python \
    $tests >"$OUT/build.log" 2>&1 || { grep -E "error|Error" -A3 "$OUT/build.log" | head -60; exit 1; }
  step built
  exit 0
fi
export PYTHONPATH=$PWD/build/device/python:${PYTHONPATH:-}
step "GPU tests of the ops"
for t in $tests; do
  timeout 100 build/device/tests/cuda/$t >"$OUT/$t.log" 2>&1
  echo "$t: exit $? $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/$t.log" | tr '\n' ' ')"
done
# World 1 takes the model families, world 2 the parallel styles (CASES1 / CASES2 override).
CASES1=${CASES1:-llama:dtensor:mask,mistral:dtensor:mask,gpt2:dtensor:mask,mixtral:dtensor:mask}
CASES2=${CASES2:-llama:dtensor:mask,llama:tp_plan:mask,llama:sp:mask,qwen3:dtensor:mask}
DTYPES=${DTYPES:-f32,bf16}
for n in 1 2; do
  [[ $n == 1 ]] && CASES=$CASES1 || CASES=$CASES2
  step "hf_worker at $n process(es)"
  mkdir -p "$OUT/results_$n"
  SYMMFLOW_TEST_DEVICE=cuda SYMMFLOW_TEST_RESULTS="$OUT/results_$n" PYTHONUNBUFFERED=1 \
    timeout ${WORKER_TIMEOUT:-200} torchrun --nproc-per-node $n --master-port $((29600 + RANDOM % 200)) \
    tests/python/torch/hf_worker.py "$CASES" "$DTYPES" >"$OUT/hf_worker_$n.log" 2>&1
  echo "exit $?"
done
step table
python3 - "$OUT" <<'PY'
import glob, json, sys
print(f"{'world':>5} {'case':<22} {'dtype':<9} {'ok':<4} {'max_err':>9} {'parts':>5} {'bnd':>4} "
      f"{'copies':>6} {'symm':>5} {'1st call s':>10}")
for n in (1, 2):
    for path in sorted(glob.glob(f"{sys.argv[1]}/results_{n}/rank0.jsonl")):
        for r in map(json.loads, open(path)):
            if "error" in r:
                print(f"{n:>5} {r['case']:<22} {r['dtype']:<9} ERR  {r['error'][-300:]}")
                continue
            print(f"{n:>5} {r['case']:<22} {r['dtype']:<9} {str(r['ok']):<4} {r['max_err']:>9.2g} "
                  f"{r['partitions']:>5} {len(r['boundaries']):>4} {r['copies_added']:>6} "
                  f"{str(r['symm_inputs_produced']):>5} {r['first_call_s']:>10.2f}")
PY
