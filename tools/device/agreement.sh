#!/usr/bin/env bash
# The GPU collectives' agreement (issue 25) and the fused pointwise regions (issue 27) on two GPUs
# of one host, in two calls of the device tool on a warm machine (carry .whl: nanobind's and
# transformers' wheels):
#   bash tools/device/agreement.sh quick  # one call: build and run only the agreement and
#                                         # attention tests (a device budget of minutes)
#   bash tools/device/agreement.sh build  # configure + build the CUDA module, CLI, Python module,
#                                         # the GPU tests and the all-reduce bench
#   bash tools/device/agreement.sh run    # the GPU tests (CudaAgreement among them), the
#                                         # all-reduce with the agreement on and off (rounds
#                                         # alternating, same call), the decoder layer and the MLP
#                                         # at TP2 through the backend beside eager and inductor
# Logs go to $OUT (logs_<mode>.tgz); a table last.
set -uo pipefail
mode=${1:-run}
here=$(dirname "$0")
LOGS_NAME=logs_$mode
source "$(dirname "$0")/common.sh"
carried_wheels && export PYTHONPATH=/tmp/site
tests="test_cuda test_cuda_symm_ops test_cuda_exec test_cuda_stream test_cuda_ops"
if [[ "$mode" == quick ]]; then  # one call on a fresh machine: build and run only the new tests
  nvidia-smi -L
  step configure
  cmake -S . -B build/device -G Ninja -DCMAKE_BUILD_TYPE=Release -DSYMMFLOW_CUDA=ON \
    -DSYMMFLOW_BUILD_BENCH=OFF -DSYMMFLOW_TESTS_CUDA_ONLY=ON -DSYMMFLOW_PYTHON=OFF \
    >"$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
  step build
  cmake --build build/device -j "$(nproc)" --target test_cuda test_cuda_llama_ops \
    >"$OUT/build.log" 2>&1 || { grep -E "error|Error" -A3 "$OUT/build.log" | head -60; exit 1; }
  step "tests"
  timeout 90 build/device/tests/cuda/test_cuda \
    --gtest_filter='CudaAgreement.*:CudaAllReduce.RankThatNeverArrives*:CudaAllReduce.GraphReplay*' \
    >"$OUT/test_cuda.log" 2>&1
  echo "test_cuda (agreement): exit $?"
  grep -E '^\[ +(OK|FAILED) +\]' "$OUT/test_cuda.log" | head -12
  grep -B2 -A6 "Failure" "$OUT/test_cuda.log" | head -40
  timeout 60 build/device/tests/cuda/test_cuda_llama_ops --gtest_filter='*Attention*' \
    >"$OUT/attention.log" 2>&1
  echo "test_cuda_llama_ops (attention): exit $?"
  grep -E '^\[ +(OK|FAILED) +\]' "$OUT/attention.log" | head -8
  grep -A6 "Failure" "$OUT/attention.log" | head -30
  step done
  exit 0
fi
if [[ "$mode" == build ]]; then
  nvidia-smi -L | tee "$OUT/gpus.txt"
  step configure
  cmake -S . -B build/device -G Ninja -DCMAKE_BUILD_TYPE=Release -DSYMMFLOW_CUDA=ON \
    -DSYMMFLOW_BUILD_BENCH=ON -DSYMMFLOW_TESTS_CUDA_ONLY=ON -DSYMMFLOW_PYTHON=ON \
    >"$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
  step build
  cmake --build build/device -j "$(nproc)" --target symmflow_cli symmflow_cuda symmflow_python \
    symmflow_mpi bench_cuda_allreduce test_cuda_mpi $tests >"$OUT/build.log" 2>&1 \
    || { grep -E "error|Error" -A3 "$OUT/build.log" | head -60; exit 1; }
  step built
  exit 0
fi
export PYTHONPATH=$PWD/build/device/python:${PYTHONPATH:-}
step "GPU tests"
for t in $tests; do
  timeout 150 build/device/tests/cuda/$t >"$OUT/$t.log" 2>&1
  echo "$t: exit $? $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/$t.log" | tr '\n' ' ')"
  grep -E '^\[  FAILED  \]' "$OUT/$t.log" | head -5
done
grep -E "CudaAgreement" "$OUT/test_cuda.log" | grep -E "OK|FAILED" | head -8
timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 build/device/tests/cuda/test_cuda_mpi \
  >"$OUT/test_cuda_mpi.log" 2>&1
echo "test_cuda_mpi np2: exit $? $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/test_cuda_mpi.log" | sort -u | tr '\n' ' ')"
step "all-reduce, agreement on and off, alternating"
for round in 1 2 3; do
  for on in 1 0; do
    SYMMFLOW_COLLECTIVE_AGREEMENT=$on timeout 120 build/device/bin/bench_cuda_allreduce \
      --impls symmflow --json "$OUT/ar_${on}_$round.json" >"$OUT/ar_${on}_$round.txt" 2>&1
  done
done
python3 - "$OUT" <<'EOF'
import json, sys, glob, statistics
out = sys.argv[1]
rows = {}
for on in ("1", "0"):
    for f in sorted(glob.glob(f"{out}/ar_{on}_*.json")):
        for r in json.load(open(f)):
            rows.setdefault((r["bytes"], on), []).append(r["median_us"])
print("| bytes | agreement on, us | off, us | on / off |")
print("|---|---|---|---|")
for b in sorted({k[0] for k in rows}):
    a, o = statistics.median(rows[(b, "1")]), statistics.median(rows[(b, "0")])
    print(f"| {b} | {a:.2f} | {o:.2f} | {a / o:.3f} |")
EOF
step "TP2: decoder layer and MLP through the backend"
ITERS=${ITERS:-50} bash "$here/decoder_moe.sh" timing 2>&1 | grep -v "^== " | tail -30
step done
