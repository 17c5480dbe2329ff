#!/usr/bin/env bash
# Sequence parallelism's collective matmuls on GPUs (issue 26 item 4, issue 27 item 4), in one call
# of the device tool on two GPUs of one host (carry .whl: nanobind's and transformers 5.x's wheels):
#   bash tools/device/sp_matmul.sh
# Builds (hf_models.sh build, plus test_cuda_train_ops), runs test_cuda_train_ops (the compiled
# sequence-parallel block at 2, 3 and 4 ranks against the interpreter, as the GPUs allow) and the
# GPU tests named in GTESTS, the examples named in EXAMPLES at 1, 2 and 4 ranks with --check, then
#   - the SP block at a real size (hidden 4096, 2 x 2048 tokens, bf16; tools/device/sp_block.py
#     writes it) through `symmflow run --device cuda` at 2 and 4 ranks, decomposed and not
#     (SYMMFLOW_SKIP_PASSES=decompose_collective_matmul), the CUDA graph's replay time (50);
#   - train_worker.py: 10 AdamW steps of Llama and Qwen3 in their sequence-parallel form against
#     eager, decomposed at every size (SYMMFLOW_COLLECTIVE_MATMUL_MIN_BYTES=0: these models are
#     tiny), timed beside eager and torch.compile's default backend, with the collective ops of
#     the forward and the backward; and Llama at the default size rule (SKIP_TRAIN=1: neither).
# Logs in $OUT; a table last.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
here=$(dirname "$0")
FINAL_OUT=${OUT:-/tmp/symmflow-device}
mkdir -p "$FINAL_OUT"
bash "$here/hf_models.sh" build || exit 1
cmake --build build/device -j "$(nproc)" --target test_cuda_train_ops test_cuda_ops test_cuda \
  >"$FINAL_OUT/build.log" 2>&1 \
  || { grep -E "error" -A3 "$FINAL_OUT/build.log" | head -30; exit 1; }
logs=/tmp/sp-logs; mkdir -p $logs
for t in test_cuda_train_ops ${GTESTS:-}; do  # GTESTS: more GPU tests (the matmul's callers)
  timeout 200 build/device/tests/cuda/$t >"$logs/$t.log" 2>&1
  echo "$t: exit $? $(grep -E '^\[  (PASSED|FAILED) ' "$logs/$t.log" | tr '\n' ' ')"
  grep -E "Failure|exception|expected" "$logs/$t.log" | head -10
done
gpus=$(nvidia-smi -L | wc -l)
for ex in ${EXAMPLES:-}; do  # examples at every rank count up to the GPUs, one each, --check
  for n in 1 2 4; do
    (( n > gpus )) && continue
    echo "$ex at $n: $(timeout 100 build/device/bin/symmflow run examples/$ex --device cuda --ranks $n \
      --check 2>&1 | tail -1)"
  done
done
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl >/dev/null 2>&1 && export PYTHONPATH=/tmp/site
export PYTHONPATH=$PWD/build/device/python:$PWD/tests/python/torch:${PYTHONPATH:-}
for n in 2 4; do
  (( n > gpus )) && continue
  python3 "$here/sp_block.py" check $n >"/tmp/sp_check_$n.sf"
  timeout 120 build/device/bin/symmflow run --ranks $n --device cuda --iters 3 --check \
    /tmp/sp_check_$n.sf >"$logs/sp_check_$n.log" 2>&1
  echo "sp block --check at $n ranks: exit $? $(tail -1 "$logs/sp_check_$n.log")"
  for size in ${SIZES:-big}; do  # SIZES: big, or t<tokens> (sp_block.py)
    python3 "$here/sp_block.py" "$size" $n >"/tmp/sp_${size}_$n.sf"
    for rep in $(seq ${REPS:-2}); do  # the replay line: the plan's CUDA graph alone, inputs bound
      for skip in "" decompose_collective_matmul; do
        log="$logs/sp_${size}_${n}_$rep${skip:+_skip}.log"
        SYMMFLOW_COLLECTIVE_MATMUL_MIN_BYTES=0 SYMMFLOW_SKIP_PASSES=$skip timeout 120 \
          build/device/bin/symmflow run --ranks $n --device cuda --iters 50 /tmp/sp_${size}_$n.sf >"$log" 2>&1
        echo "sp block $size at $n ranks, ${skip:-decomposed}: $(grep -o 'replay: [0-9.]* us' "$log" || tail -2 "$log")"
      done
    done
  done
done
tar -czf "$FINAL_OUT/sp_logs.tgz" -C "$logs" .
[[ -n "${SKIP_TRAIN:-}" ]] && exit 0
results=$(mktemp -d); results_skip=$(mktemp -d)
SYMMFLOW_COLLECTIVE_MATMUL_MIN_BYTES=0 SYMMFLOW_TEST_DEVICE=cuda SYMMFLOW_TRAIN_INDUCTOR=1 \
  SYMMFLOW_TEST_RESULTS=$results OMP_NUM_THREADS=4 \
  timeout 300 torchrun --nproc-per-node 2 --master-port $((29600 + RANDOM % 200)) \
  tests/python/torch/train_worker.py "${CASES:-llama:sp:mask,qwen3:sp:mask}" "${DTYPES:-f32,bf16}" \
  >"$FINAL_OUT/train.log" 2>&1
echo "train_worker: exit $?"
SYMMFLOW_TEST_DEVICE=cuda SYMMFLOW_TEST_RESULTS=$results_skip \
  OMP_NUM_THREADS=4 timeout 200 torchrun --nproc-per-node 2 --master-port $((29600 + RANDOM % 200)) \
  tests/python/torch/train_worker.py llama:sp:mask f32 >"$FINAL_OUT/train_skip.log" 2>&1
echo "train_worker at the default size rule (these tiny models: no decomposition): exit $?"
cp "$results"/rank0.jsonl "$FINAL_OUT/train.jsonl"; cp "$results_skip"/rank0.jsonl "$FINAL_OUT/train_skip.jsonl"
python3 - "$results" "$results_skip" <<'PY'
import json, os, sys
print(f"{'case':16} {'dtype':9} ok  loss_err  grad_err  parts  eager ms  symmflow ms  inductor ms  collective matmuls fw | bw")
for label, d in (("(decomposed at every size)", sys.argv[1]), ("(default size rule)", sys.argv[2])):
    for f in sorted(os.listdir(d)):
        for r in map(json.loads, open(os.path.join(d, f))):
            if r.get("rank") != 0:
                continue
            if "error" in r:
                print(r["case"], r["dtype"], "ERROR", r["error"][-600:]); continue
            cm = lambda g: ",".join(o.split("::")[1].replace("fused_", "") for o in r[g].get("collective_ops", []))
            print(f"{r['case']:16} {r['dtype']:9} {str(r['ok'])[0]}  {r['loss_err']:.2e}  {r['grad_err']:.2e}  "
                  f"{r['forward']['partitions']}/{r['backward']['partitions']}  {r['eager_step_s']*1e3:8.2f}  "
                  f"{r['symmflow_step_s']*1e3:11.2f}  {r.get('inductor_step_s', 0)*1e3:11.2f}  "
                  f"{cm('forward')} | {cm('backward')} {label}")
PY
