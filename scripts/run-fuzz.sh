#!/usr/bin/env bash
# Configures and builds the `fuzz` preset (clang, libFuzzer, ASan+UBSan), then runs every fuzz
# target for N seconds each (default 30): scripts/run-fuzz.sh [SECONDS]
# Seeds come from fuzz/corpus/<target>/ (read-only); new inputs go to build/fuzz/corpus/<target>/,
# crashes to build/fuzz/artifacts/. Exits non-zero when a fuzzer finds a bug.
# Env: JOBS (build parallelism, default 2).
set -euo pipefail

seconds="${1:-30}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

cmake --preset fuzz
cmake --build --preset fuzz --target schema_fuzz -- -j "${JOBS:-2}"

build="build/fuzz"
mkdir -p "$build/artifacts"
for target in schema; do
  work="$build/corpus/$target"
  mkdir -p "$work"
  dict=()
  [[ -f "fuzz/$target.dict" ]] && dict=(-dict="fuzz/$target.dict")
  echo "== ${target}_fuzz for ${seconds}s"
  "$build/bin/${target}_fuzz" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$build/artifacts/${target}-" "${dict[@]}" \
    "$work" "fuzz/corpus/$target"
done
