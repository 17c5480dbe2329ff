#!/usr/bin/env bash
# The one driver of symmflow's GPU work, run through the device tool from the checkout's root
# (carry .whl: the wheels the GPU machine lacks, see docs/cuda.md "Build and run"):
#
#   bash tools/device/sf.sh [build] SUBCOMMAND [ARGS]   # `build` may come first, in the same call
#
# Build and check:
#   build                   configure + build build/device: the CUDA module, the CLI, the Python
#                           package, the GPU tests; TARGETS="a b" limits it, BENCH=1 adds the
#                           benches (kept by later builds; the bench subcommands turn it on)
#   verify [TESTS...]       the GPU test binaries (default: all but test_cuda_mpi), cuDNN required;
#                           GTEST_FILTER='CudaAgreement.*' narrows every binary's tests
#   spanning                test_cuda_spanning: the GPUs as simulated hosts, groups across them
#                           through NCCL; run twice, the second with NCCL kept off peer-to-peer
#                           and shared memory (its network path over lo, as between hosts); then
#                           bench_cuda_allreduce --hosts: symmflow's path beside NCCL alone
#   examples                13 examples through `symmflow run --check` at 1, 2 (and 4) ranks
#                           (EXAMPLES="tp_mlp ..." names others)
#   mpi                     test_cuda_mpi and five examples, one process a rank (mpirun -np 2, 4)
#   sanitize                compute-sanitizer memcheck and racecheck over the collectives', symm
#                           ops', ops' and fused regions' GPU tests
#   models [CASES1 [CASES2]]  tests/python/torch/hf_worker.py at world 1 and 2: transformers
#                           models against eager, partitions, copies (DTYPES, default f32,bf16)
#   decode [CASES [DTYPES]] tests/python/torch/decode_worker.py, NPROC processes: KV-cache decode
#                           and generate against eager (default Llama with symmflow-ro, then
#                           inductor-ro and eager after it in the same processes; Qwen3, Mistral)
#   batch [CASES [DTYPES]]  tests/python/torch/batch_worker.py, NPROC processes: a sequence's
#                           logits alone and in a batch of 8, SYMMFLOW_DETERMINISTIC's promise
#                           (default Llama default, Llama and Qwen3 deterministic; f32, bf16)
#   mesh [CASES [DTYPES]]   tests/python/torch/mesh_worker.py: two torchrun launchers as
#                           simulated hosts (NPROC/2 GPUs each), TP inside, DDP/FSDP across
#                           through NCCL, against eager (NCCL kept off P2P and shared memory)
#   bridge [CASES]          tests/python/torch/worker.py, 2 processes: the backend's model and
#                           symm_mem cases, eager ops, CUDA graphs, a raising rank, other shapes
#   train [CASES [DTYPES]]  tests/python/torch/train_worker.py: compiled training against eager
#                           (loss at every step, step 1's gradients) beside inductor, default
#                           Llama and Qwen3 at batch 1, 2 and 4, f32 and bf16
# Time (NPROC processes, one a GPU, default all of them, unless said; PY_TIMEOUT: 500 s):
#   sweep [ARGS]            tools/device/sweep.py: transformers models at prefill, decode and
#                           training points beside eager and inductor (--points prefill:1x2048)
#   breakdown [ARGS]        tools/device/breakdown.py: GPU time per kernel beside inductor
#   backend [ARGS]          tools/device/torch_backend.py: the decoder layer and the 8-layer MLP
#                           through the backend beside eager and inductor (--cases decoder)
#   attention [ARGS]        tools/device/attention_bench.py, one GPU: attention beside PyTorch's
#   host [ARGS]             tools/device/host_path.py, one GPU: a compiled call's host time
#   allreduce [RANKS...]    bench_cuda_allreduce beside NCCL and PyTorch (torch_allreduce.py), a
#                           table (table.py) per rank count (default NPROC)
#   agreement               the all-reduce with SYMMFLOW_COLLECTIVE_AGREEMENT=1 and =0 alternating
#                           (ROUNDS, default 3), a table of its cost
#   launch                  the two-shot at 64M and 256M per SYMMFLOW_CUDA_THREADS x _BLOCKS_PER_SM
#   gemm                    bench_cuda_gemm: the skinny GEMM beside cuBLAS and cuBLASLt
#   pointwise               bench_cuda_pointwise: the fused pointwise engine beside unfused calls
#   mlp [ROUNDS]            examples/tp_mlp.sf at 1..GPUs ranks (RANKS): as built, no early starts,
#                           cuBLAS only; a carried .base tree's CLI alternating with this one;
#                           bench_cuda_mlp (by hand) and torch_mlp.py (PyTorch)
#   sp                      tools/device/sp_block.py's sequence-parallel block at 2 and 4 ranks,
#                           decomposed and not (SIZES, REPS)
#
# Logs go to $OUT/logs.tgz, tables to stdout. The bodies of the subcommands other than build,
# verify, sweep, breakdown and train are in sf_benches.sh.
set -uo pipefail
subcommands=(verify spanning examples mpi sanitize models decode batch mesh bridge train sweep breakdown backend attention host
  allreduce agreement launch gemm pointwise mlp sp)
# The usage: the comment block at the top of this file.
[[ $# -eq 0 ]] && { sed -n '2,/^[^#]/{/^#/p}' "$0"; exit 2; }
sub=$1
[[ $sub == build ]] && sub=${2:-}
if [[ -n $sub && " ${subcommands[*]} " != *" $sub "* ]]; then
  echo "unknown subcommand $sub (build$(printf ', %s' "${subcommands[@]}"))"
  exit 2
fi
here=$(dirname "$0")
# shellcheck source-path=SCRIPTDIR
source "$here/common.sh"
# shellcheck source-path=SCRIPTDIR
source "$here/sf_benches.sh"
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
NPROC=${NPROC:-$gpus}
carried_wheels
export PYTHONPATH=$PWD/build/device/python:/tmp/site
# cudnn.h: the GPU machine's own (PyTorch's nvidia-cudnn-cu13 wheel), else the carried headers.
if ! python3 -c "import nvidia.cudnn, os, sys; d = os.path.join(list(nvidia.cudnn.__path__)[0], \
'include'); sys.exit(not os.path.exists(os.path.join(d, 'cudnn.h')))" 2>/dev/null; then
  [[ -d .whl/cudnn_include ]] && export CUDNN_INCLUDE=$PWD/.whl/cudnn_include
fi

# The system's compilers, not the machine's default /opt/gcc ones (first in PATH, and in CC/CXX):
# those link libstdc++ statically into every shared library (Note [one libstdc++] in
# cmake/Toolchain.cmake). PATH too, for whatever looks up g++ by name (nvcc's host compiler),
# through a folder of links: /usr/bin first would also put the system's python3 before PyTorch's.
system_compilers() {
  export CC=${SF_CC:-/usr/bin/gcc} CXX=${SF_CXX:-/usr/bin/g++}
  mkdir -p /tmp/sf-compilers
  ln -sf "$CC" /tmp/sf-compilers/gcc && ln -sf "$CC" /tmp/sf-compilers/cc
  ln -sf "$CXX" /tmp/sf-compilers/g++ && ln -sf "$CXX" /tmp/sf-compilers/c++
  [[ $PATH == /tmp/sf-compilers:* ]] || export PATH=/tmp/sf-compilers:$PATH
  export CUDAHOSTCXX=$CXX
}

build() {
  nvidia-smi -L | tee "$OUT/gpus.txt"
  step configure
  system_compilers
  # The benches (bench/: Google Benchmark's and the bench_cuda_* ones) with BENCH=1, none with
  # BENCH=0, else as the last configure had them, so a build keeps built benches current.
  local bench=OFF
  if [[ ${BENCH:-} == 1 ]] ||
    { [[ -z ${BENCH:-} ]] && grep -qs "SYMMFLOW_BUILD_BENCH:BOOL=ON" build/device/CMakeCache.txt; }; then
    bench=ON
  fi
  # A fresh cache each time (the tree's objects stay): a kept one would keep an earlier call's
  # compilers, Python and cudnn.h. PyTorch's Python names the cuDNN headers (Note [cudnn loading]).
  rm -f build/device/CMakeCache.txt
  cmake -S . -B build/device -G Ninja -DCMAKE_BUILD_TYPE=Release -DSYMMFLOW_CUDA=ON \
    -DPython3_EXECUTABLE="$(command -v python3)" -DPython_EXECUTABLE="$(command -v python3)" \
    -DCMAKE_CXX_COMPILER="$CXX" -DCMAKE_C_COMPILER="$CC" -DCMAKE_CUDA_HOST_COMPILER="$CXX" \
    -DSYMMFLOW_BUILD_BENCH=$bench -DSYMMFLOW_TESTS_CUDA_ONLY=ON -DSYMMFLOW_PYTHON=ON \
    >"$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; return 1; }
  grep -E "cuDNN|CUDA found" "$OUT/configure.log"
  step "build${TARGETS:+ $TARGETS}"
  # shellcheck disable=SC2086  # TARGETS: one word a target
  cmake --build build/device -j "$(nproc)" ${TARGETS:+--target $TARGETS} >"$OUT/build.log" 2>&1 ||
    { grep -E "error|Error" -A3 "$OUT/build.log" | head -60; return 1; }
  step built
}

# need TARGET...: builds those of the targets (binaries of bin/ or tests/cuda/) not built yet, with
# the benches configured in when one is a bench_*.
need() {
  local missing=() t bench=${BENCH:-}
  for t; do
    [[ -x build/device/bin/$t || -x build/device/tests/cuda/$t ]] || missing+=("$t")
  done
  (( ${#missing[@]} )) || return 0
  [[ " ${missing[*]}" == *" bench_"* ]] && bench=1
  BENCH=$bench TARGETS="${missing[*]}" build
}

sf_verify() {
  local tests=("$@") t
  if [[ ${#tests[@]} -eq 0 ]]; then
    mapfile -t tests < <(cd build/device/tests/cuda &&
      find . -maxdepth 1 -type f -executable -name 'test_cuda*' ! -name '*mpi*' -printf '%f\n' | sort)
  fi
  for t in "${tests[@]}"; do
    SYMMFLOW_REQUIRE_CUDNN=1 timeout 300 "build/device/tests/cuda/$t" >"$OUT/$t.log" 2>&1
    echo "$t: exit $? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$OUT/$t.log" | tr '\n' ' ')"
    grep -E "^\[  FAILED  \] [A-Z]|Failure|error:" "$OUT/$t.log" | head -10
  done
  step verified
}

sf_spanning() {
  need test_cuda_spanning || return 1
  local t=build/device/tests/cuda/test_cuda_spanning
  timeout 300 "$t" >"$OUT/spanning.log" 2>&1
  echo "spanning (NCCL's own choice of path): exit $? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' \
    "$OUT/spanning.log" | tr '\n' ' ')"
  grep -E "^\[  FAILED  \] [A-Z]|Failure|error:|SKIPPED \]" "$OUT/spanning.log" | head -10
  NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_SOCKET_IFNAME=lo NCCL_DEBUG=INFO \
    timeout 300 "$t" >"$OUT/spanning_net.log" 2>&1
  echo "spanning (NCCL over its network path): exit $? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' \
    "$OUT/spanning_net.log" | tr '\n' ' ')"
  grep -E "^\[  FAILED  \] [A-Z]|Failure|error:" "$OUT/spanning_net.log" | head -10
  grep -m3 -E "via NET|Using network|NET/Socket" "$OUT/spanning_net.log"
  # The all-reduce of a group across the simulated hosts (symmflow's NCCL path) beside NCCL alone.
  need bench_cuda_allreduce || return 1
  local hosts=0,1
  ((gpus >= 4)) && hosts=0,0,1,1
  NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_SOCKET_IFNAME=lo timeout 300 \
    build/device/bin/bench_cuda_allreduce --hosts "$hosts" --min 4K --max "${SPAN_MAX:-64M}" \
    --impls symmflow_spanning,nccl --replays 10 --json "$OUT/spanning_allreduce.json" \
    2>"$OUT/spanning_bench.log" | tee "$OUT/spanning_allreduce.txt"
  step spanning
}

# torchrun_py SCRIPT LOG [ARGS]: SCRIPT under torchrun on NPROC processes, its output in
# $OUT/LOG.log; prints the exit code, then the log from the first line matching FROM (its table)
# to the end, or its last TAIL lines (60) where FROM is unset or matches nothing.
torchrun_py() {
  local script=$1 log=$2 rc
  shift 2
  PYTHONUNBUFFERED=1 timeout "${PY_TIMEOUT:-500}" torchrun --nproc-per-node "$NPROC" \
    --master-port $((29600 + RANDOM % 200)) "$script" "$@" >"$OUT/$log.log" 2>&1
  rc=$?
  echo "$log: exit $rc"
  if [[ -n ${FROM:-} ]] && grep -q -- "$FROM" "$OUT/$log.log"; then
    sed -n "/$FROM/,\$p" "$OUT/$log.log"
  else
    tail -"${TAIL:-60}" "$OUT/$log.log"
  fi
  return $rc
}

sf_sweep() { step sweep; torchrun_py tools/device/sweep.py sweep --out "$OUT/sweep.jsonl" "$@"; }
sf_breakdown() { step breakdown; torchrun_py tools/device/breakdown.py breakdown "$@"; }

sf_train() {
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

if [[ $1 == build ]]; then
  shift
  case ${1:-} in allreduce | agreement | launch | gemm | pointwise | mlp) BENCH=${BENCH:-1} ;; esac
  build || exit 1
  [[ $# -eq 0 ]] && exit 0
fi
cmd=$1
shift
"sf_$cmd" "$@"
