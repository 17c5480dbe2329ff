#!/usr/bin/env bash
# One session's GPU work (issues 24 and 27), on two GPUs of one host, in two calls of the device
# tool on a warm machine (carry .whl: nanobind's and transformers 5.23's wheels):
#   bash tools/device/decoder_moe.sh moe     # build (hf_models.sh build + test_cuda_ops), the
#                                            # capture-scratch GPU test, then the MoE models
#                                            # (Mixtral, Qwen3-MoE) and Qwen2 at world 1 and 2
#   bash tools/device/decoder_moe.sh timing  # the decoder layer and the MLP at TP2 through the
#                                            # backend beside eager and inductor, symmflow also
#                                            # without its norm fusions (Note [skipping fusions]),
#                                            # then the decoder layer at world 1
#   bash tools/device/decoder_moe.sh breakdown  # GPU time per kernel (tools/device/breakdown.py;
#                                            # CASES=hf_llama,hf_qwen3 TOP=30 for transformers'
#                                            # stacks)
#   bash tools/device/decoder_moe.sh fused   # the fused-region GPU tests, then timing, then
#                                            # breakdown, in one call
#   bash tools/device/run.sh build && bash tools/device/decoder_moe.sh four  # on four GPUs: the
#                                            # all-reduce beside NCCL and PyTorch's one- and
#                                            # two-shot at 4 ranks, then the decoder layer and
#                                            # the MLP at TP4 through the backend
#   bash tools/device/run.sh build && bash tools/device/decoder_moe.sh allreduce  # the all-reduce
#                                            # tests, then the bench beside NCCL and PyTorch on
#                                            # 4 GPUs (when there are) and on 2
#   bash tools/device/decoder_moe.sh check   # build, the GPU tests of the kernels changed since
#                                            # the last GPU run (test_cuda, _exec, _ops,
#                                            # _llama_ops, _train_ops), then timing; with
#                                            # CHECKS="test_a test_b" those tests alone
#   bash tools/device/decoder_moe.sh attention  # the attention kernel beside PyTorch's
#                                            # (tools/device/attention_bench.py, one GPU)
#   bash tools/device/decoder_moe.sh tp2     # the decoder layer and the MLP at TP2 alone
#   bash tools/device/decoder_moe.sh tp4     # the decoder layer and the MLP at TP4 alone
#   bash tools/device/decoder_moe.sh hf      # transformers' Llama and Qwen3 decoder stacks at
#                                            # hidden 4096, TP2 (tools/device/hf_timing.py;
#                                            # about 7 minutes for both models on 2 H200s:
#                                            # MODELS=llama for one, HF_TIMEOUT to change 540 s)
#   bash tools/device/decoder_moe.sh host    # where a compiled call's host time goes
#                                            # (tools/device/host_path.py, one GPU)
# Logs go to $OUT (logs.tgz); a table last.
set -uo pipefail
mode=${1:-moe}
here=$(dirname "$0")
if [[ ! -x build/device/bin/symmflow ]]; then
  bash "$here/hf_models.sh" build || exit 1
fi
LOGS_NAME=logs_$mode
source "$(dirname "$0")/common.sh"
carried_wheels && export PYTHONPATH=/tmp/site
export PYTHONPATH=$PWD/build/device/python:${PYTHONPATH:-}
if [[ "$mode" == moe ]]; then
  step "build test_cuda_ops"
  cmake --build build/device -j "$(nproc)" --target test_cuda_ops >"$OUT/build_ops.log" 2>&1 \
    || { grep -E "error" -A3 "$OUT/build_ops.log" | head -40; }
  timeout 120 build/device/tests/cuda/test_cuda_ops --gtest_filter='*Capture*' \
    >"$OUT/capture.log" 2>&1
  echo "capture tests: exit $? $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/capture.log" | tr '\n' ' ')"
  OUT="$FINAL_OUT" CASES1=${CASES1:-mixtral:dtensor:mask,qwen3_moe:dtensor:mask,qwen2:dtensor:mask} \
  CASES2=${CASES2:-mixtral:dtensor:mask,qwen3_moe:dtensor:mask,qwen2:tp_plan:mask} \
  WORKER_TIMEOUT=${WORKER_TIMEOUT:-150} bash "$here/hf_models.sh" run
  exit 0
fi
timing() {  # name nproc, then torch_backend.py's extra arguments
  local name=$1 n=$2
  shift 2
  PYTHONUNBUFFERED=1 timeout 280 torchrun --nproc-per-node "$n" \
    --master-port $((29600 + RANDOM % 200)) tools/device/torch_backend.py \
    --json "$OUT/$name.json" --iters "${ITERS:-50}" "$@" >"$OUT/$name.log" 2>&1
  echo "$name: exit $?"
  sed -n '/^torch_backend:/,$p' "$OUT/$name.log"
  [[ -s "$OUT/$name.json" ]] || tail -20 "$OUT/$name.log"
}
if [[ "$mode" == check ]]; then
  step "build and run the GPU tests"
  checks=${CHECKS:-test_cuda test_cuda_exec test_cuda_ops test_cuda_llama_ops test_cuda_train_ops}
  cmake --build build/device -j "$(nproc)" --target $checks >"$OUT/build_checks.log" 2>&1 \
    || { grep -E "error" -A3 "$OUT/build_checks.log" | head -40; }
  for t in $checks; do
    timeout 200 build/device/tests/cuda/$t >"$OUT/$t.log" 2>&1
    echo "$t: exit $? $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/$t.log" | tr '\n' ' ')"
    grep -E '^\[  FAILED  \]|Failure' -A4 "$OUT/$t.log" | head -20
  done
  [[ -n "${CHECKS:-}" ]] || bash "$0" timing
  exit 0
fi
# A tools/device script under torchrun: name (its log, and the line its table starts with),
# processes, timeout, then the script's arguments; prints the table and any error lines.
table_script() {
  local name=$1 n=$2 limit=$3
  shift 3
  PYTHONUNBUFFERED=1 timeout "$limit" torchrun --nproc-per-node "$n" \
    --master-port $((29600 + RANDOM % 200)) "tools/device/$name.py" "$@" >"$OUT/$name.log" 2>&1
  echo "$name: exit $?"
  sed -n "/^$name/,\$p" "$OUT/$name.log"
  grep -E "Error|error" "$OUT/$name.log" | grep -v Warning | head -5
}
if [[ "$mode" == attention ]]; then
  step "attention kernel beside PyTorch's, one GPU"
  table_script attention_bench 1 240
  exit 0
fi
if [[ "$mode" == hf ]]; then
  step "TP2: transformers decoder stacks at hidden 4096"
  table_script hf_timing "${NPROC:-2}" "${HF_TIMEOUT:-540}" --models "${MODELS:-llama,qwen3}" \
    --iters "${ITERS:-20}"
  exit 0
fi
if [[ "$mode" == host ]]; then
  step "host time of a compiled call, world 1"
  PYTHONUNBUFFERED=1 timeout 300 torchrun --nproc-per-node 1 --master-port $((29600 + RANDOM % 200)) \
    tools/device/host_path.py >"$OUT/host_path.log" 2>&1
  echo "host_path: exit $?"
  sed -n '/ncalls/,$p' "$OUT/host_path.log" | grep -v "^\[" | head -60
  exit 0
fi
if [[ "$mode" == fused ]]; then
  step "fused-region GPU tests"
  timeout 120 build/device/tests/cuda/test_cuda_exec >"$OUT/test_cuda_exec.log" 2>&1
  echo "test_cuda_exec: exit $? $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/test_cuda_exec.log" | tr '\n' ' ')"
  grep -E '^\[  FAILED  \]|Failure' -A4 "$OUT/test_cuda_exec.log" | head -20
  bash "$0" timing
  bash "$0" breakdown
  exit 0
fi
if [[ "$mode" == breakdown ]]; then
  step "TP2: GPU time per kernel of the decoder layer, symmflow beside inductor"
  PYTHONUNBUFFERED=1 timeout ${BD_TIMEOUT:-240} torchrun --nproc-per-node 2 --master-port $((29600 + RANDOM % 200)) \
    tools/device/breakdown.py --cases "${CASES:-decoder}" --top "${TOP:-14}" >"$OUT/breakdown.log" 2>&1
  echo "breakdown: exit $?"
  sed -n '/, world /,$p' "$OUT/breakdown.log" | grep -v "^\[\|Warning\|wait_tensor\|^[12]\.\|before the output"
  exit 0
fi
allreduce_bench() {  # ranks: symmflow and NCCL, then PyTorch, then the table
  local n=$1 gpus
  gpus=$(seq -s, 0 $(( n - 1 )))
  CUDA_VISIBLE_DEVICES=$gpus timeout 300 build/device/bin/bench_cuda_allreduce \
    --json "$OUT/symmflow$n.json" >"$OUT/bench$n.txt" 2>"$OUT/bench$n.err" || tail -5 "$OUT/bench$n.err"
  CUDA_VISIBLE_DEVICES=$gpus PYTHONUNBUFFERED=1 timeout 300 torchrun --nproc-per-node "$n" \
    --master-port $((29600 + RANDOM % 200)) tools/device/torch_allreduce.py \
    --json "$OUT/torch$n.json" >"$OUT/torch$n.log" 2>&1 || tail -5 "$OUT/torch$n.log"
  python3 "$here/table.py" "$OUT/symmflow$n.json" "$OUT/torch$n.json"
}
if [[ "$mode" == allreduce ]]; then
  step "all-reduce tests"
  timeout 200 build/device/tests/cuda/test_cuda >"$OUT/test_cuda.log" 2>&1
  echo "test_cuda: exit $? $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/test_cuda.log" | tr '\n' ' ')"
  gpus=$(nvidia-smi -L | wc -l)
  for n in 4 2; do
    (( gpus >= n )) || continue
    step "all-reduce at $n ranks beside NCCL and PyTorch"
    allreduce_bench "$n"
  done
  step done
  exit 0
fi
if [[ "$mode" == tp2 ]]; then  # the decoder layer and the MLP at TP2 alone
  step "TP2: decoder layer and MLP through the backend"
  timing tp2 2
  step done
  exit 0
fi
if [[ "$mode" == tp4 ]]; then  # the decoder layer and the MLP at TP4 alone
  step "TP4: decoder layer and MLP through the backend"
  timing tp4 4
  step done
  exit 0
fi
if [[ "$mode" == four ]]; then
  step "TP4: decoder layer and MLP through the backend"
  timing tp4 4
  step "all-reduce at 4 ranks beside NCCL and PyTorch"
  allreduce_bench 4
  step done
  exit 0
fi
step "TP2: decoder layer and MLP, symmflow (with and without its norm fusions) beside eager and inductor"
timing tp2 2
step "world 1: the decoder layer"
timing world1 1 --cases decoder
step done
