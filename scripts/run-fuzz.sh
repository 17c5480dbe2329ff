#!/usr/bin/env bash
# Configures and builds the `fuzz` preset (clang, libFuzzer, ASan+UBSan), then runs every fuzz
# target (schema_fuzz, ir_fuzz), splitting SECONDS between them: scripts/run-fuzz.sh [SECONDS]
# (default 60, so 30 s each; CI's `FUZZ_SECONDS=60 make fuzz` fuzzes for one minute in all).
# Seeds come from fuzz/corpus/<target>/ (read-only); new inputs go to build/fuzz/corpus/<target>/,
# crashes to build/fuzz/artifacts/. Exits non-zero when a fuzzer finds a bug.
# Env: JOBS (build parallelism, default 2).
set -euo pipefail

targets=(schema ir)
seconds="${1:-60}"
each=$(( seconds / ${#targets[@]} ))
(( each >= 1 )) || each=1
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

cmake --preset fuzz
cmake --build --preset fuzz --target "${targets[@]/%/_fuzz}" -- -j "${JOBS:-2}"

build="build/fuzz"
mkdir -p "$build/artifacts"
for target in "${targets[@]}"; do
  work="$build/corpus/$target"
  mkdir -p "$work"
  dict=()
  [[ -f "fuzz/$target.dict" ]] && dict=(-dict="fuzz/$target.dict")
  echo "== ${target}_fuzz for ${each}s"
  # -timeout: no input may take 10 s; -max_len: room for real programs (the examples are < 4 KB).
  "$build/bin/${target}_fuzz" -max_total_time="$each" -timeout=10 -rss_limit_mb=2048 \
    -max_len=16384 -print_final_stats=1 -artifact_prefix="$build/artifacts/${target}-" \
    "${dict[@]}" "$work" "fuzz/corpus/$target"
done
