#!/usr/bin/env bash
# Configures and builds the fuzz targets (schema_fuzz, ir_fuzz) in the `asan` preset's tree, then
# runs each, splitting SECONDS between them: scripts/run-fuzz.sh [SECONDS]
# (default 60, so 30 s each; CI's `FUZZ_SECONDS=60 make fuzz` fuzzes for one minute in all).
# Seeds come from fuzz/corpus/<target>/ (read-only); new inputs go to
# build/asan/fuzz/corpus/<target>/, crashes to build/asan/fuzz/artifacts/. Exits non-zero when a
# fuzzer finds a bug.
# Env: JOBS (build parallelism, default 2).
#
# Note [one sanitizer tree]: the fuzzers and the ASan+UBSan tests share one tree, the `asan` preset
# (clang, -O1 -g1, SYMMFLOW_BUILD_FUZZ=ON): the library's layers are compiled once with ASan, UBSan
# and libFuzzer's coverage (-fsanitize=fuzzer-no-link, fuzz/CMakeLists.txt), the test binaries link
# them as they are and each fuzzer links the objects of the layers it drives. CI compiled the layers
# in a separate fuzz tree before, 400 s of its 90 minutes. After `make test-asan` (CI's order) this
# script builds nothing but two links. clang, not gcc: libFuzzer is clang's, and clang compiles
# ASan+UBSan code in about 60% of gcc's time (a test file: 8.3 s against 13.4 s).
set -euo pipefail

targets=(schema ir)
seconds="${1:-60}"
each=$(( seconds / ${#targets[@]} ))
(( each >= 1 )) || each=1
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

cmake --preset asan >/dev/null
cmake --build --preset asan --target "${targets[@]/%/_fuzz}" -- -j "${JOBS:-2}"

build="build/asan"
out="$build/fuzz"
mkdir -p "$out/artifacts"
for target in "${targets[@]}"; do
  work="$out/corpus/$target"
  mkdir -p "$work"
  dict=()
  [[ -f "fuzz/$target.dict" ]] && dict=(-dict="fuzz/$target.dict")
  echo "== ${target}_fuzz for ${each}s"
  # -timeout: no input may take 10 s; -max_len: room for real programs (the examples are < 4 KB).
  "$build/bin/${target}_fuzz" -max_total_time="$each" -timeout=10 -rss_limit_mb=2048 \
    -max_len=16384 -print_final_stats=1 -artifact_prefix="$out/artifacts/${target}-" \
    "${dict[@]}" "$work" "fuzz/corpus/$target"
done
