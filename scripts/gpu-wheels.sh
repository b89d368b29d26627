#!/usr/bin/env bash
# Fetch, on a machine that reaches PyPI, the few wheels infless needs beyond a CUDA PyTorch
# image (Python 3.12, x86-64: aiohttp, numpy, torch, pytest ... already there) into .whl/,
# for scripts/gpu-check.sh on a GPU machine that has no package registry.
#   ./scripts/gpu-wheels.sh            # then copy the repository, .whl/ included, over there
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-python3}"
mkdir -p .whl
for wheel in msgspec==0.22.0 orjson==3.13.0 httptools==0.9.0 pytest-asyncio==1.5.0; do
  "$python" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any \
    -d .whl "$wheel"
done
ls -1 .whl
