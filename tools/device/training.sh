#!/usr/bin/env bash
# This session's GPU work (issue 26 training, issue 24's all-to-all), on two GPUs of one host
# (one GPU: two processes share it), in one call of the device tool (carry .whl: nanobind's and
# transformers 5.x's wheels):
#   bash tools/device/training.sh
# Builds (hf_models.sh build), runs the new GPU tests (attention backward, all_to_all, the
# training ops), then train_worker.py on the GPUs: 10 AdamW steps of Llama (DTensor, sequence
# parallel) and Qwen3 compiled by symmflow against eager, step by step, timed beside eager and
# torch.compile's default backend, with PyTorch's peak memory of each. Logs in $OUT; a table last.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
here=$(dirname "$0")
if [[ ! -x build/device/bin/symmflow ]]; then
  bash "$here/hf_models.sh" build || exit 1
fi
FINAL_OUT=${OUT:-/tmp/symmflow-device}
mkdir -p "$FINAL_OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl >/dev/null 2>&1 && export PYTHONPATH=/tmp/site
export PYTHONPATH=$PWD/build/device/python:$PWD/tests/python/torch:${PYTHONPATH:-}
cmake --build build/device -j "$(nproc)" --target test_cuda_symm_ops >"$FINAL_OUT/build.log" 2>&1 \
  || grep -E "error" -A3 "$FINAL_OUT/build.log" | head -30
timeout 120 build/device/tests/cuda/test_cuda_symm_ops --gtest_filter='*AllToAll*' \
  >"$FINAL_OUT/a2a.log" 2>&1
echo "all_to_all gtest: exit $? $(grep -E '^\[  (PASSED|FAILED) ' "$FINAL_OUT/a2a.log" | tr '\n' ' ')"
(cd tests/python/torch && export SYMMFLOW_CLI=$PWD/../../../build/device/bin/symmflow && \
  timeout 150 python3 -m pytest -q test_training.py -k gpu >"$FINAL_OUT/pytest_attention.log" 2>&1; \
  echo "pytest attention backward on the GPU: exit $? $(tail -1 "$FINAL_OUT/pytest_attention.log")"; \
  timeout 120 python3 -m pytest -q test_all_to_all.py -k gpus >"$FINAL_OUT/pytest_a2a.log" 2>&1; \
  echo "pytest all_to_all on GPUs: exit $? $(tail -1 "$FINAL_OUT/pytest_a2a.log")")
results=$(mktemp -d)
n=$(nvidia-smi -L | wc -l); [[ $n -ge 2 ]] && n=2 || n=2
SYMMFLOW_TEST_DEVICE=cuda SYMMFLOW_TRAIN_INDUCTOR=1 SYMMFLOW_TRAIN_VS_F32=1 SYMMFLOW_TEST_RESULTS=$results OMP_NUM_THREADS=4 \
  timeout 420 torchrun --nproc-per-node "$n" --master-port $((29600 + RANDOM % 200)) \
  tests/python/torch/train_worker.py "${CASES:-llama:dtensor:mask,llama:sp:mask,qwen3:dtensor:mask}" \
  "${DTYPES:-f32,bf16}" >"$FINAL_OUT/train.log" 2>&1
echo "train_worker: exit $?"
cp "$results"/*.jsonl "$FINAL_OUT/" 2>/dev/null
python3 - "$results" <<'PY'
import json, os, sys
rows = [json.loads(l) for f in sorted(os.listdir(sys.argv[1])) for l in open(os.path.join(sys.argv[1], f))]
print(f"{'case':22} {'dtype':9} ok  loss_err  grad_err  fw/bw parts  eager ms  symmflow ms  inductor ms  peak MB eager/symmflow/inductor")
for r in rows:
    if r.get("rank") != 0:
        continue
    if "error" in r:
        print(r["case"], r["dtype"], "ERROR", r["error"][-600:])
        continue
    mb = lambda b: f"{b / 2**20:.1f}" if b else "-"
    print(f"{r['case']:22} {r['dtype']:9} {str(r['ok'])[0]}  {r['loss_err']:.2e}  {r['grad_err']:.2e}  "
          f"{r['forward']['partitions']}/{r['backward']['partitions']}  "
          f"{r['eager_step_s']*1e3:8.2f}  {r['symmflow_step_s']*1e3:11.2f}  "
          f"{r.get('inductor_step_s', 0)*1e3:11.2f}  {mb(r['eager_peak'])}/{mb(r['symmflow_peak'])}/{mb(r.get('inductor_peak'))}")
    if "grad_err_vs_f32" in r:
        print(f"    vs the f32 model: symmflow loss {r['loss_err_vs_f32']:.2e} grad {r['grad_err_vs_f32']:.2e}; "
              f"eager loss {r['eager_loss_err_vs_f32']:.2e} grad {r['eager_grad_err_vs_f32']:.2e}")
PY
