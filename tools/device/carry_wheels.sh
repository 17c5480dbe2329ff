#!/usr/bin/env bash
# Fills .whl (git-ignored) with the wheels the GPU machine lacks, for its Python 3.12 on x86-64:
# nanobind and transformers with their dependencies, at the versions of
# scripts/requirements-python.txt, and nvidia-cudnn-frontend (scripts/requirements-cuda.txt).
# Run once on a fresh checkout, then pass carry [".whl"] to the device tool; sf.sh installs them
# into /tmp/site there (carried_wheels in common.sh). Needs PyPI (this machine's index).
set -euo pipefail
cd "$(dirname "$0")/../.."
pin() { grep -h "^$1==" scripts/requirements-python.txt scripts/requirements-cuda.txt; }
mkdir -p .whl
python3 -m pip download -q --dest .whl --only-binary=:all: --python-version 3.12 \
  --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --implementation cp --abi cp312 "$(pin nanobind)" "$(pin transformers)"
python3 -m pip download -q --dest .whl --only-binary=:all: --no-deps --python-version 3.12 \
  --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --implementation cp --abi cp312 "$(pin nvidia-cudnn-frontend)"
# The GPU machine's PyTorch brings its own numpy; a carried one would shadow it in /tmp/site.
rm -f .whl/numpy-*.whl
du -sh .whl  # the device tool carries 64 MiB in all
