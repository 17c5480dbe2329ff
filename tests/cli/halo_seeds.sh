#!/usr/bin/env bash
# Runs one example with --ranks 4 --check for many seeds (issue 4's acceptance: halo_exchange
# passes for 100 different seeds); each run checks 2 back-to-back iterations on new inputs.
# Usage: halo_seeds.sh SYMMFLOW GRAPH SEEDS
set -u
sf=$1 graph=$2 seeds=$3
failed=0
for ((seed = 0; seed < seeds; ++seed)); do
  if ! out=$("$sf" run "$graph" --ranks 4 --check --iters 2 --seed "$seed" 2>&1) ||
    [[ $out != *"check: OK"* ]]; then
    printf 'seed %s failed:\n%s\n' "$seed" "$out"
    failed=$((failed + 1))
  fi
done
echo "$graph: $((seeds - failed))/$seeds seeds passed"
[[ $failed -eq 0 ]]
