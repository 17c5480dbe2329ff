#!/usr/bin/env bash
# Installs what symmflow needs, only what is missing: Debian packages (compilers' tools, OpenBLAS,
# OpenMPI, fmt, JSON, CLI11, GoogleTest, Google Benchmark, LLVM's FileCheck) and, where nvcc is
# present but the toolkit has no cuBLAS / NVRTC (a toolkit from NVIDIA's wheels, as on the
# python-native machines), the pinned wheels of those two libraries from PyPI.
# Works on Debian 12 (LLVM 14) and Debian 13 (LLVM 19).
# The Python package's requirements (scripts/requirements-python.txt: torch, nanobind, pytest,
# numpy, scikit-build-core) are installed with pip when one is missing or at another version.
# Usage: scripts/install-deps.sh [--clang]   (--clang adds clang and its sanitizer and libFuzzer
# runtimes, which the asan preset and the fuzzers need; --fuzz is the same)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

debian_version=12
if [[ -r /etc/os-release ]]; then
  debian_version=$(. /etc/os-release; echo "${VERSION_ID:-12}")
fi
case "$debian_version" in
  12) llvm=14 ;;
  13) llvm=19 ;;
  *) llvm=14 ;;
esac

packages=(build-essential cmake ninja-build pkg-config libopenblas-dev libopenmpi-dev openmpi-bin
          libfmt-dev nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev
          "llvm-${llvm}-tools")
if [[ "${1:-}" == "--clang" || "${1:-}" == "--fuzz" ]]; then
  packages+=(clang "libclang-rt-${llvm}-dev")
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
sudo=""
if [[ $(id -u) -ne 0 ]]; then
  sudo="sudo"
fi
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "install-deps: installing ${missing[*]}" >&2
  if [[ -n "$sudo" ]] && ! command -v sudo >/dev/null; then
    echo "install-deps: need root or sudo to install ${missing[*]}" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# CUDA libraries from wheels: only when nvcc exists and its toolkit lacks them (a full toolkit,
# as on the GPU machines, has both). cmake/Cuda.cmake finds them under site-packages/nvidia/cu13.
nvcc_path=$(command -v nvcc || true)
[[ -z "$nvcc_path" && -x /usr/local/cuda/bin/nvcc ]] && nvcc_path=/usr/local/cuda/bin/nvcc
if [[ -n "$nvcc_path" ]] && command -v python3 >/dev/null; then
  toolkit=$(dirname "$(dirname "$(readlink -f "$nvcc_path")")")
  if ! compgen -G "$toolkit/lib*/libcublas.so*" >/dev/null && \
     ! compgen -G "$toolkit/targets/*/lib/libcublas.so*" >/dev/null; then
    if ! python3 "$root/scripts/check-requirements.py" "$root/scripts/requirements-cuda.txt"; then
      echo "install-deps: installing the CUDA library wheels (scripts/requirements-cuda.txt)" >&2
      # --no-deps: every wheel the build needs is pinned there; the cuDNN frontend's own
      # dependencies (CUTLASS's Python DSL, TVM's FFI: gigabytes) serve its Python API, not its
      # headers.
      python3 -m pip install -q --disable-pip-version-check --no-deps \
        -r "$root/scripts/requirements-cuda.txt"
    fi
  fi
fi

# The Python package (python/, pyproject.toml): pip only when a pinned requirement is missing, so a
# machine that has them all pays one interpreter start.
if command -v python3 >/dev/null; then
  if ! python3 "$root/scripts/check-requirements.py" "$root/scripts/requirements-python.txt"; then
    echo "install-deps: installing the Python requirements (scripts/requirements-python.txt)" >&2
    python3 -m pip install -q --disable-pip-version-check -r "$root/scripts/requirements-python.txt"
  fi
fi
