#!/usr/bin/env bash
# `symmflow run --transport store`: NP processes started by this script as a launcher would
# (RANK, WORLD_SIZE, SYMMFLOW_STORE), meeting through a file store or the TCP store, on one host
# or on two simulated hosts (SYMMFLOW_HOST_ID = rank * 2 / NP); every rank checks its outputs
# against the interpreter and rank 0 reports. Exits non-zero unless every rank exits 0 and rank
# 0's report names the transport and says check: OK.
# Usage: run_store.sh SYMMFLOW GRAPH NP file|tcp [hosts]
set -u
sf=$1 graph=$2 np=$3 kind=$4 hosts=${5:-}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
if [[ $kind == tcp ]]; then
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  export SYMMFLOW_STORE=tcp:127.0.0.1:$port
  SYMMFLOW_STORE_SECRET=$(head -c 24 /dev/urandom | base64)
  export SYMMFLOW_STORE_SECRET
else
  export SYMMFLOW_STORE=file:$dir/store
fi
pids=()
for ((r = 0; r < np; ++r)); do
  host=0
  [[ -n $hosts ]] && host=$((r * 2 / np))
  RANK=$r WORLD_SIZE=$np SYMMFLOW_HOST_ID=$host timeout 60 "$sf" run "$graph" --transport store \
    --check --iters 2 --seed 5 >"$dir/rank$r.log" 2>&1 &
  pids+=($!)
done
failed=0
for ((r = 0; r < np; ++r)); do
  wait "${pids[$r]}" || { echo "rank $r exited $?:"; cat "$dir/rank$r.log"; failed=1; }
done
cat "$dir/rank0.log"
grep -q "on $np ranks (store, cpu)" "$dir/rank0.log" || { echo "no store report"; failed=1; }
grep -q "^check: OK" "$dir/rank0.log" || { echo "no check: OK"; failed=1; }
for ((r = 1; r < np; ++r)); do
  [[ -s $dir/rank$r.log ]] && { echo "rank $r printed:"; cat "$dir/rank$r.log"; failed=1; }
done
exit $failed
