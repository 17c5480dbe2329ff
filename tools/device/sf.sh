#!/usr/bin/env bash
# The one driver of symmflow's GPU work, run through the device tool from the checkout's root
# (carry .whl: the wheels the GPU machine lacks, see docs/cuda.md "Build and run"):
#
#   bash tools/device/sf.sh build               # configure + build build/device: the CUDA module,
#                                                # the CLI, the Python package, the GPU tests
#   bash tools/device/sf.sh verify [TESTS...]   # the GPU test binaries (default: all of them),
#                                                # cuDNN required (SYMMFLOW_REQUIRE_CUDNN=1)
#   bash tools/device/sf.sh sweep [SWEEP ARGS]  # tools/device/sweep.py on NPROC GPUs (default:
#                                                # all), e.g. --points prefill:1x2048 --iters 10
#   bash tools/device/sf.sh breakdown [ARGS]    # tools/device/breakdown.py: GPU time per kernel
#   bash tools/device/sf.sh train [CASES [DTYPES]]  # tests/python/torch/train_worker.py on NPROC
#                                                # GPUs: compiled training against eager (loss at
#                                                # every step, step 1's gradients), default Llama and
#                                                # Qwen3 at batch 1, 2 and 4, f32 and bf16
#   bash tools/device/sf.sh allreduce           # the all-reduce bench beside NCCL and PyTorch
#
# `build` may come first in front of another subcommand: `bash tools/device/sf.sh build verify`.
# NPROC sets the processes of sweep and breakdown; TARGETS limits what build builds (e.g.
# TARGETS="symmflow_cuda symmflow_python" before a sweep). Logs go to $OUT/logs.tgz, tables to stdout.
set -uo pipefail
source "$(dirname "$0")/common.sh"
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
NPROC=${NPROC:-$gpus}
carried_wheels
export PYTHONPATH=$PWD/build/device/python:/tmp/site
# cudnn.h: the GPU machine's own (PyTorch's nvidia-cudnn-cu13 wheel), else the carried headers.
if ! python3 -c "import nvidia.cudnn, os, sys; d = os.path.join(list(nvidia.cudnn.__path__)[0], \
'include'); sys.exit(not os.path.exists(os.path.join(d, 'cudnn.h')))" 2>/dev/null; then
  [[ -d .whl/cudnn_include ]] && export CUDNN_INCLUDE=$PWD/.whl/cudnn_include
fi

build() {
  nvidia-smi -L | tee "$OUT/gpus.txt"
  step configure
  # The system's compilers, not the machine's default /opt/gcc ones (first in PATH, and in CC/CXX):
  # those link libstdc++ statically into every shared library (Note [one libstdc++] in
  # cmake/Toolchain.cmake). PATH too, for whatever looks up g++ by name (nvcc's host compiler),
  # through a folder of links: /usr/bin first would also put the system's python3 before PyTorch's.
  export CC=${SF_CC:-/usr/bin/gcc} CXX=${SF_CXX:-/usr/bin/g++}
  mkdir -p /tmp/sf-compilers
  ln -sf "$CC" /tmp/sf-compilers/gcc && ln -sf "$CC" /tmp/sf-compilers/cc
  ln -sf "$CXX" /tmp/sf-compilers/g++ && ln -sf "$CXX" /tmp/sf-compilers/c++
  export PATH=/tmp/sf-compilers:$PATH
  export CUDAHOSTCXX=$CXX
  # A fresh cache each time (the tree's objects stay): a kept one would keep an earlier call's
  # compilers, Python and cudnn.h. PyTorch's Python names the cuDNN headers (Note [cudnn loading]).
  rm -f build/device/CMakeCache.txt
  cmake -S . -B build/device -G Ninja -DCMAKE_BUILD_TYPE=Release -DSYMMFLOW_CUDA=ON \
    -DPython3_EXECUTABLE="$(command -v python3)" -DPython_EXECUTABLE="$(command -v python3)" \
    -DCMAKE_CXX_COMPILER="$CXX" -DCMAKE_C_COMPILER="$CC" -DCMAKE_CUDA_HOST_COMPILER="$CXX" \
    -DSYMMFLOW_BUILD_BENCH=OFF -DSYMMFLOW_TESTS_CUDA_ONLY=ON -DSYMMFLOW_PYTHON=ON \
    >"$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; return 1; }
  grep -E "cuDNN|CUDA found" "$OUT/configure.log"
  step build
  cmake --build build/device -j "$(nproc)" ${TARGETS:+--target $TARGETS} >"$OUT/build.log" 2>&1 ||
    { grep -E "error|Error" -A3 "$OUT/build.log" | head -60; return 1; }
  step built
}

verify() {
  local tests=("$@")
  if [[ ${#tests[@]} -eq 0 ]]; then
    mapfile -t tests < <(cd build/device/tests/cuda &&
      find . -maxdepth 1 -type f -executable -name 'test_cuda*' ! -name '*mpi*' -printf '%f\n' | sort)
  fi
  for t in "${tests[@]}"; do
    SYMMFLOW_REQUIRE_CUDNN=1 timeout 300 build/device/tests/cuda/$t >"$OUT/$t.log" 2>&1
    echo "$t: exit $? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$OUT/$t.log" | tr '\n' ' ')"
    grep -E "^\[  FAILED  \] [A-Z]|Failure|error:" "$OUT/$t.log" | head -10
  done
  step verified
}

torchrun_py() {
  local script=$1 log=$2
  shift 2
  PYTHONUNBUFFERED=1 timeout ${PY_TIMEOUT:-500} torchrun --nproc-per-node "$NPROC" \
    --master-port $((29600 + RANDOM % 200)) "$script" "$@" >"$OUT/$log.log" 2>&1
  local rc=$?
  echo "$log: exit $rc"
  tail -${TAIL:-60} "$OUT/$log.log"
}

train() {
  local results
  results=$(mktemp -d)
  step train
  SYMMFLOW_TEST_DEVICE=cuda SYMMFLOW_TRAIN_INDUCTOR=1 SYMMFLOW_TEST_RESULTS=$results \
    OMP_NUM_THREADS=4 PYTHONPATH=$PYTHONPATH:$PWD/tests/python/torch TAIL=${TAIL:-4} \
    torchrun_py tests/python/torch/train_worker.py train \
    "${1:-llama:dtensor:mask:b1,llama:dtensor:mask,llama:dtensor:mask:b4,qwen3:dtensor:b4}" \
    "${2:-f32,bf16}"
  cp "$results"/*.jsonl "$OUT/" 2>/dev/null
  python3 tools/device/train_table.py "$results"
}

[[ $# -eq 0 ]] && { sed -n 2,20p "$0"; exit 2; }
if [[ $1 == build ]]; then
  shift
  build || exit 1
  [[ $# -eq 0 ]] && exit 0
fi
case $1 in
  verify) shift; verify "$@" ;;
  sweep) shift; step sweep; torchrun_py tools/device/sweep.py sweep --out "$OUT/sweep.jsonl" "$@" ;;
  breakdown) shift; step breakdown; torchrun_py tools/device/breakdown.py breakdown "$@" ;;
  train) shift; train "$@" ;;
  allreduce) shift; exec bash tools/device/run.sh quick ;;
  *) echo "unknown subcommand $1 (build, verify, sweep, breakdown, train, allreduce)"; exit 2 ;;
esac
