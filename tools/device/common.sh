# shellcheck shell=bash
# What tools/device/sf.sh starts with (sourced): the NVLS switches kept off, the logs folder packed
# into $OUT/logs.tgz at every step and at exit (only 8 files come back from $OUT, and a call
# stopped at its time limit still returns what it wrote), `step` to print a timed heading, and
# `carried_wheels` to install the wheels carried in .whl into /tmp/site.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
FINAL_OUT=${OUT:-/tmp/symmflow-device}
OUT=/tmp/symmflow-device-logs
mkdir -p "$OUT" "$FINAL_OUT"
pack_logs() { tar -czf "$FINAL_OUT/logs.tgz" -C "$OUT" . 2>/dev/null; }
trap pack_logs EXIT
start=$(date +%s)
step() { pack_logs; echo "== $* ($(( $(date +%s) - start )) s)"; }
carried_wheels() {
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl >/dev/null 2>&1
}
