#!/usr/bin/env bash
# Runs `symmflow run --trace` and validates the trace JSON: traceEvents with "X" events (pid 0,
# tid = rank, cat compute/comm, numeric ts/dur) on every rank and "M" thread_name "rank N".
# Usage: run_trace.sh SYMMFLOW GRAPH OUT_JSON; with RUN_TRACE_MPIRUN set (the mpirun command),
# the two ranks are processes: $RUN_TRACE_MPIRUN -np 2 SYMMFLOW run ... --transport mpi.
set -eu
sf=$1 graph=$2 out=$3
rm -f "$out"
if [[ -n "${RUN_TRACE_MPIRUN:-}" ]]; then
  $RUN_TRACE_MPIRUN -np 2 "$sf" run "$graph" --transport mpi --iters 2 --trace "$out"
else
  "$sf" run "$graph" --ranks 2 --iters 2 --trace "$out"
fi
python3 - "$out" <<'PY'
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
x = [e for e in events if e["ph"] == "X"]
m = [e for e in events if e["ph"] == "M"]
assert sorted(e["args"]["name"] for e in m) == ["rank 0", "rank 1"], m
assert all(e["name"] == "thread_name" and e["pid"] == 0 for e in m), m
assert x and {e["tid"] for e in x} == {0, 1}, "X events on both ranks"
for e in x:
    assert e["pid"] == 0 and e["cat"] in ("compute", "comm") and e["name"], e
    assert isinstance(e["ts"], (int, float)) and isinstance(e["dur"], (int, float)) and e["dur"] >= 0, e
assert {e["cat"] for e in x} == {"compute", "comm"}, "both categories"
assert any(e["name"] == "symm_mem::one_shot_all_reduce" and e["cat"] == "comm" for e in x)
print(f"trace OK: {len(x)} steps")
PY
