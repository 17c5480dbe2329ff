# The bodies of tools/device/sf.sh's subcommands other than build, verify, sweep, breakdown and
# train (sourced by it; its header says what each does). They use sf.sh's gpus, NPROC, step, need
# and torchrun_py; logs go to $OUT.
# shellcheck shell=bash disable=SC2154  # gpus, NPROC: set by sf.sh

S=build/device/bin/symmflow

sf_examples() {
  local ranks="1 2" ex r
  (( gpus >= 4 )) && ranks="1 2 4"
  step "examples on the GPU (--check; ranks may share a GPU)"
  for ex in ${EXAMPLES:-tp_mlp tp_mlp_small pointwise_then_allreduce input_allreduce \
      inplace_allreduce halo_exchange halo_exchange_signal decoder_block decoder_block_aten \
      inplace_32_layers inplace_input reduce_to_root allreduce_rmsnorm}; do
    for r in $ranks; do
      echo "$ex ranks=$r: $(timeout 120 "$S" run "examples/$ex.sf" --device cuda --ranks "$r" --check \
        --iters 5 2>&1 | grep -E 'check:|rror' | head -2)"
    done
  done | tee "$OUT/examples.txt"
}

sf_mpi() {
  local np=$(( gpus >= 4 ? 4 : 2 )) ex
  local mpirun=(timeout 200 mpirun --allow-run-as-root --oversubscribe -np "$np")
  need test_cuda_mpi || return 1
  step "one process per rank (mpirun -np $np)"
  "${mpirun[@]}" build/device/tests/cuda/test_cuda_mpi --gtest_color=no >"$OUT/test_cuda_mpi.log" 2>&1
  echo "test_cuda_mpi np$np: exit $? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' \
    "$OUT/test_cuda_mpi.log" | sort -u | tr '\n' ' ')"
  grep -E "Failure|tests failed" "$OUT/test_cuda_mpi.log" | head -10
  for ex in tp_mlp tp_mlp_small input_allreduce inplace_allreduce halo_exchange_signal; do
    echo "$ex (--transport mpi): $("${mpirun[@]}" "$S" run "examples/$ex.sf" --transport mpi \
      --device cuda --check --iters 3 2>&1 | grep -E 'check:|rror' | head -2)"
  done | tee "$OUT/examples_mpi.txt"
}

sf_sanitize() {
  local tool spec t filter
  local specs=("test_cuda CudaAllReduce.EveryAlgorithm*:CudaAllReduce.Zero*"
    "test_cuda_symm_ops CudaSymmOps.PutSignal*:CudaSymmOps.CollectivePermute*:CudaSymmOps.ReduceToRoot*"
    "test_cuda_ops CudaOps.Binary*:CudaOps.Copies*:CudaOps.RmsNorm*:CudaOps.Skinny*"
    "test_cuda_exec CudaFused.*")
  for tool in memcheck racecheck; do
    step "compute-sanitizer $tool"
    for spec in "${specs[@]}"; do
      read -r t filter <<<"$spec"
      SYMMFLOW_TEST_SMALL=1 timeout 240 compute-sanitizer --tool "$tool" \
        "build/device/tests/cuda/$t" --gtest_filter="$filter" >"$OUT/sanitizer_${tool}_$t.log" 2>&1
      echo "$t: exit $? $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^\[  (PASSED|FAILED) " \
        "$OUT/sanitizer_${tool}_$t.log" | head -5 | tr '\n' ' ')"
    done
  done
}

sf_models() {
  local n cases
  for n in 1 2; do  # world 1 takes the model families, world 2 the parallel styles
    if (( n == 1 )); then
      cases=${1:-llama:dtensor:mask,mistral:dtensor:mask,gpt2:dtensor:mask,mixtral:dtensor:mask}
    else
      cases=${2:-llama:dtensor:mask,llama:tp_plan:mask,llama:sp:mask,qwen3:dtensor:mask}
    fi
    step "hf_worker at $n process(es)"
    mkdir -p "$OUT/models_$n"
    SYMMFLOW_TEST_DEVICE=cuda SYMMFLOW_TEST_RESULTS="$OUT/models_$n" NPROC=$n TAIL=3 \
      PY_TIMEOUT=${PY_TIMEOUT:-200} torchrun_py tests/python/torch/hf_worker.py "models_$n" \
      "$cases" "${DTYPES:-f32,bf16}"
  done
  python3 - "$OUT" <<'PY'
import glob, json, sys
print(f"{'world':>5} {'case':<22} {'dtype':<9} {'ok':<4} {'max_err':>9} {'parts':>5} {'bnd':>4} "
      f"{'copies':>6} {'symm':>5} {'1st call s':>10}")
for n in (1, 2):
    for path in sorted(glob.glob(f"{sys.argv[1]}/models_{n}/rank0.jsonl")):
        for r in map(json.loads, open(path)):
            if "error" in r:
                print(f"{n:>5} {r['case']:<22} {r['dtype']:<9} ERR  {r['error'][-300:]}")
                continue
            print(f"{n:>5} {r['case']:<22} {r['dtype']:<9} {str(r['ok']):<4} {r['max_err']:>9.2g} "
                  f"{r['partitions']:>5} {len(r['boundaries']):>4} {r['copies_added']:>6} "
                  f"{str(r['symm_inputs_produced']):>5} {r['first_call_s']:>10.2f}")
PY
}

# run_worker NAME SCRIPT CASES DTYPES: a test worker on the GPUs (SYMMFLOW_TEST_DEVICE=cuda), NPROC
# processes under torchrun_py (log NAME), its per-rank results in $OUT/NAME/rank<r>.jsonl.
run_worker() {
  local name=$1 script=$2
  mkdir -p "$OUT/$name"
  SYMMFLOW_TEST_DEVICE=cuda SYMMFLOW_TEST_RESULTS="$OUT/$name" TAIL=3 \
    PY_TIMEOUT=${PY_TIMEOUT:-400} torchrun_py "$script" "$name" "$3" "$4"
}

sf_batch() {
  local cases=${1:-default:llama,deterministic:llama,deterministic:qwen3}
  step "tests/python/torch/batch_worker.py, $NPROC processes: a sequence alone and in a batch of 8"
  run_worker batch tests/python/torch/batch_worker.py "$cases" "${2:-f32,bf16}"
  python3 - "$OUT/batch" <<'PY'
import glob, json, sys
print(f"{'case':<22} {'dtype':<9} {'rank':>4} {'ok':<5} {'identical':<9} {'max_diff':>9} "
      f"{'max_err':>9}")
for path in sorted(glob.glob(f"{sys.argv[1]}/rank*.jsonl")):
    for r in map(json.loads, open(path)):
        if "error" in r:
            print(f"{r['case']:<22} {r['dtype']:<9} {r['rank']:>4} ERR  {r['error'][-600:]}")
            continue
        print(f"{r['case']:<22} {r['dtype']:<9} {r['rank']:>4} {str(r['ok']):<5} "
              f"{str(r['identical']):<9} {r['max_diff']:>9.2g} {r['max_err']:>9.2g}")
PY
}

sf_mesh() {
  local cases=${1:-llama:replicate,llama:fully_shard} hosts=2 per=$((NPROC / 2)) port h
  ((per >= 1)) || { echo "mesh: needs two GPUs (one simulated host each)"; return 1; }
  step "tests/python/torch/mesh_worker.py: $hosts launchers of $per GPU(s), simulated hosts"
  mkdir -p "$OUT/mesh"
  port=$((29700 + RANDOM % 200))
  local pids=()
  for ((h = 0; h < hosts; h++)); do
    SYMMFLOW_HOST_ID=$h SYMMFLOW_TEST_DEVICE=cuda SYMMFLOW_TEST_RESULTS="$OUT/mesh" \
      NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_SOCKET_IFNAME=lo PYTHONUNBUFFERED=1 \
      timeout "${PY_TIMEOUT:-500}" torchrun --nnodes "$hosts" --node-rank "$h" \
      --nproc-per-node "$per" --master-addr 127.0.0.1 --master-port "$port" --max-restarts 0 \
      tests/python/torch/mesh_worker.py "$cases" "${2:-f32}" >"$OUT/mesh_host$h.log" 2>&1 &
    pids+=($!)
  done
  for h in "${!pids[@]}"; do
    wait "${pids[$h]}"
    echo "host $h: exit $?"
  done
  tail -3 "$OUT"/mesh_host*.log
  python3 - "$OUT/mesh" <<'PY'
import glob, json, sys
for path in sorted(glob.glob(f"{sys.argv[1]}/rank*.jsonl")):
    for r in map(json.loads, open(path)):
        if "error" in r:
            print(f"{r['case']:<18} {r['rank']:>3} ERR {r['error'][-600:]}")
            continue
        dp = sorted({(c["op"].split("::")[-1], c["cuda"]) for c in r["collectives"]
                     if c["dim"] == "dp"})
        print(f"{r['case']:<18} {r['dtype']:<8} rank {r['rank']} dp {r['dp']} tp {r['tp']} "
              f"ok {r['ok']} loss_err {r['loss_err']:.1e} grad_err {r['grad_err']:.1e} "
              f"partitions {r['partitions']} dp collectives {dp}")
PY
}

sf_decode() {
  local cases=${1:-llama:dtensor:after,qwen3:dtensor,mistral:dtensor}
  step "tests/python/torch/decode_worker.py, $NPROC processes: the KV-cache decode and generate"
  run_worker decode tests/python/torch/decode_worker.py "$cases" "${2:-f32}"
  python3 - "$OUT/decode" <<'PY'
import glob, json, sys
print(f"{'case':<22} {'rank':>4} {'ok':<5} {'max_err':>9} {'tokens':<6} {'generate':<8} "
      f"{'parts':<8} {'bnd':<4} {'copies (B)':<14} {'direct':<12} after: err, tokens")
for path in sorted(glob.glob(f"{sys.argv[1]}/rank*.jsonl")):
    for r in map(json.loads, open(path)):
        if "error" in r:
            print(f"{r['case']:<22} {r['rank']:>4} ERR  {r['error'][-600:]}")
            continue
        after = " ".join(f"{k} {v['max_err']:.1e} {v['tokens_equal']}"
                         for k, v in r["after"].items())
        print(f"{r['case']:<22} {r['rank']:>4} {str(r['ok']):<5} {r['max_err']:>9.2g} "
              f"{str(r['tokens_equal']):<6} {str(r['generate_equal']):<8} "
              f"{str(r['partitions']):<8} {sum(map(len, r['boundaries'])):<4} "
              f"{str([sum(b for _, b in c) for c in r['copies']]):<14} "
              f"{','.join(r['direct_call']):<12} {after}")
PY
}

# bridge_worker NAME CASES DTYPES: worker.py at 2 processes (torch.distributed over gloo, the
# references on the CPU), then how many of its results are ok and the failed ones.
bridge_worker() {
  local name=bridge_$1 rc
  shift
  mkdir -p "$OUT/$name"
  SYMMFLOW_TEST_DEVICE=cuda SYMMFLOW_TEST_RESULTS="$OUT/$name" SYMMFLOW_TEST_TIMEOUT_S=20 NPROC=2 \
    PY_TIMEOUT=300 TAIL=0 torchrun_py tests/python/torch/worker.py "$name" "$@"
  rc=$?
  cat "$OUT/$name"/*.jsonl 2>/dev/null | python3 -c '
import json, sys
rows = [json.loads(line) for line in sys.stdin if line.strip()]
bad = [r for r in rows if not r["ok"]]
print(f"  {len(rows) - len(bad)}/{len(rows)} ok")
for r in bad:
    print("  FAILED", json.dumps(r)[:1500])
for r in rows:
    if r["case"] in ("raise", "shapes"):
        print("  ", r["case"], "rank", r["rank"], r.get("seconds", ""), r["message"][:300])
'
  return $rc
}

sf_bridge() {
  local rc=0 cases=mlp,decoder,decoder_sp,decoder_unsupported,input_allreduce,inplace_allreduce
  cases+=,ring,eager,cudagraph
  step "two processes: models, symm_mem cases, eager ops, CUDA graphs"
  bridge_worker models "${1:-$cases}" f32,bf16 || rc=1
  step "two processes: a raising rank, different shapes"
  bridge_worker raise raise f32 || rc=1
  bridge_worker shapes shapes f32 || rc=1
  return $rc
}

sf_backend() {
  step "the decoder layer and the MLP through the backend, world $NPROC"
  FROM=^torch_backend: torchrun_py tools/device/torch_backend.py backend --json "$OUT/backend.json" "$@"
}

sf_attention() {
  step "attention kernel beside PyTorch's, one GPU"
  NPROC=1 FROM=^attention_bench torchrun_py tools/device/attention_bench.py attention_bench "$@"
}

sf_host() {
  step "host time of a compiled call, world 1"
  NPROC=1 FROM=ncalls torchrun_py tools/device/host_path.py host_path "$@"
}

sf_allreduce() {
  local n devices
  need bench_cuda_allreduce || return 1
  for n in "${@:-$NPROC}"; do
    (( n <= gpus )) || { echo "allreduce at $n ranks: only $gpus GPUs"; continue; }
    devices=$(seq -s, 0 $(( n - 1 )))
    step "all-reduce at $n ranks beside NCCL and PyTorch"
    CUDA_VISIBLE_DEVICES=$devices timeout 300 build/device/bin/bench_cuda_allreduce \
      --json "$OUT/symmflow$n.json" >"$OUT/bench$n.txt" 2>"$OUT/bench$n.err" || tail -5 "$OUT/bench$n.err"
    CUDA_VISIBLE_DEVICES=$devices NPROC=$n PY_TIMEOUT=300 TAIL=5 \
      torchrun_py tools/device/torch_allreduce.py "torch_allreduce$n" --json "$OUT/torch$n.json"
    python3 tools/device/table.py "$OUT/symmflow$n.json" "$OUT/torch$n.json" | tee "$OUT/table$n.txt"
  done
}

sf_agreement() {
  local round on
  need bench_cuda_allreduce || return 1
  step "all-reduce, agreement on and off, alternating"
  for round in $(seq "${ROUNDS:-3}"); do
    for on in 1 0; do
      SYMMFLOW_COLLECTIVE_AGREEMENT=$on timeout 120 build/device/bin/bench_cuda_allreduce \
        --impls symmflow --json "$OUT/ar_${on}_$round.json" >"$OUT/ar_${on}_$round.txt" 2>&1
    done
  done
  python3 - "$OUT" <<'PY'
import glob, json, statistics, sys
rows = {}
for on in ("1", "0"):
    for f in sorted(glob.glob(f"{sys.argv[1]}/ar_{on}_*.json")):
        for r in json.load(open(f)):
            rows.setdefault((r["bytes"], on), []).append(r["median_us"])
print("| bytes | agreement on, us | off, us | on / off |")
print("|---|---|---|---|")
for b in sorted({k[0] for k in rows}):
    a, o = statistics.median(rows[(b, "1")]), statistics.median(rows[(b, "0")])
    print(f"| {b} | {a:.2f} | {o:.2f} | {a / o:.3f} |")
PY
}

sf_launch() {
  local threads per_sm us
  need bench_cuda_allreduce || return 1
  step "two_shot launch shapes (µs at 64M, 256M)"
  for threads in 256 512 1024; do
    for per_sm in 1 2 4; do
      us=$(SYMMFLOW_CUDA_THREADS=$threads SYMMFLOW_CUDA_BLOCKS_PER_SM=$per_sm timeout 120 \
        build/device/bin/bench_cuda_allreduce --min 64M --max 256M --impls symmflow_two_shot \
        2>/dev/null | tail -2 | awk '{print $4}' | xargs)
      echo "two_shot threads=$threads blocks_per_sm=$per_sm: $us"
    done
  done | tee "$OUT/launch.txt"
}

sf_gemm() {
  need bench_cuda_gemm || return 1
  step "gemm: skinny kernel, cuBLAS, cuBLASLt"
  timeout 300 build/device/bin/bench_cuda_gemm --json "$OUT/gemm.json" | tee "$OUT/gemm.txt"
}

sf_pointwise() {
  need bench_cuda_pointwise || return 1
  step "pointwise: unfused calls, the register-program engine, a hand-written kernel"
  timeout 120 build/device/bin/bench_cuda_pointwise | tee "$OUT/pointwise.txt"
}

# mlp_replay TREE RANKS: examples/tp_mlp.sf through build/TREE's CLI, its replay line.
mlp_replay() {
  timeout 200 "build/$1/bin/symmflow" run examples/tp_mlp.sf --device cuda --ranks "$2" \
    --iters 100 2>&1 | tee -a "$OUT/mlp_$1.txt" | grep -E "replay|rror" | head -2
}

sf_mlp() {
  local rounds=${1:-2} ranks r round cfg rows early tree n
  ranks=${RANKS:-$(seq -s ' ' $(( gpus > 2 ? gpus : 2 )))}
  need bench_cuda_mlp || return 1
  if [[ -d .base && ! -x build/base/bin/symmflow ]]; then  # a `git archive` of an earlier commit
    step "build the base (.base)"
    system_compilers
    { cmake -S .base -B build/base -G Ninja -DCMAKE_BUILD_TYPE=Release -DSYMMFLOW_CUDA=ON \
        -DSYMMFLOW_BUILD_BENCH=OFF -DSYMMFLOW_BUILD_TESTS=OFF &&
      cmake --build build/base -j "$(nproc)" --target symmflow_cli symmflow_cuda; } \
      >"$OUT/base_build.log" 2>&1 || { echo "base build failed"; tail -20 "$OUT/base_build.log"; }
  fi
  step "mlp compiled by symmflow"
  for r in $ranks; do
    for round in $(seq "$rounds"); do
      for cfg in "16 1" "16 0" "0 1"; do
        read -r rows early <<<"$cfg"
        echo "ranks=$r skinny_max_rows=$rows early_launch=$early round=$round: $(
          SYMMFLOW_CUDA_SKINNY_GEMM_MAX_ROWS=$rows SYMMFLOW_CUDA_EARLY_LAUNCH=$early mlp_replay device "$r")"
      done
      [[ -x build/base/bin/symmflow ]] || continue
      for tree in base device; do
        echo "ranks=$r tree=$tree round=$round: $(mlp_replay "$tree" "$r")"
      done
    done
  done
  step "mlp by hand (cuBLAS + the all-reduce) and PyTorch"
  timeout 120 build/device/bin/bench_cuda_mlp --json "$OUT/mlp.json" 2>&1 | tail -3
  for n in $(printf '%s\n' 1 "$gpus" | sort -u); do
    NPROC=$n PY_TIMEOUT=200 FROM=torch_mlp torchrun_py tools/device/torch_mlp.py "torch_mlp$n" \
      --json "$OUT/torch_mlp$n.json"
  done
}

sf_sp() {
  local n size rep skip log
  (( gpus >= 2 )) || echo "sp: one GPU, nothing to run"
  for n in 2 4; do
    (( n > gpus )) && continue
    python3 tools/device/sp_block.py check $n >"$OUT/sp_check_$n.sf"
    timeout 120 "$S" run --ranks $n --device cuda --iters 3 --check "$OUT/sp_check_$n.sf" \
      >"$OUT/sp_check_$n.log" 2>&1
    echo "sp block --check at $n ranks: exit $? $(tail -1 "$OUT/sp_check_$n.log")"
    for size in ${SIZES:-big}; do  # big, or t<tokens> (sp_block.py)
      python3 tools/device/sp_block.py "$size" $n >"$OUT/sp_${size}_$n.sf"
      for rep in $(seq "${REPS:-2}"); do  # the replay line: the plan's CUDA graph alone
        for skip in "" decompose_collective_matmul; do
          log="$OUT/sp_${size}_${n}_$rep${skip:+_skip}.log"
          SYMMFLOW_COLLECTIVE_MATMUL_MIN_BYTES=0 SYMMFLOW_SKIP_PASSES=$skip timeout 120 \
            "$S" run --ranks $n --device cuda --iters 50 "$OUT/sp_${size}_$n.sf" >"$log" 2>&1
          echo "sp block $size at $n ranks, ${skip:+not }decomposed: $(grep -o 'replay: [0-9.]* us' "$log" ||
            tail -2 "$log")"
        done
      done
    done
  done
}
