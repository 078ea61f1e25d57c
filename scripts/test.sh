#!/usr/bin/env bash
# The README's test command: builds everything (CUDA too when nvcc is found) and runs every
# test through CTest, then installs the Python package into a cached virtual environment and
# runs its tests (scripts/test-python.sh). GPU tests skip cleanly on a machine without a device.
#   GDN_BUILD_DIR   build folder (default build)
#   GDN_CMAKE_ARGS  extra configure arguments, e.g. -DCMAKE_CUDA_ARCHITECTURES=90
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-deps.sh
ggml_dir=$(scripts/setup-ggml.sh)   # a pinned ggml for integrations/ggml, cached in ~/.cache/gdn
build=${GDN_BUILD_DIR:-build}
jobs=$(nproc)
# shellcheck disable=SC2086
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGDN_GGML=ON -DGDN_GGML_DIR="$ggml_dir" \
  -DGDN_BUILD_TESTS=ON -DGDN_BUILD_BENCH=ON ${GDN_CMAKE_ARGS:-}
cmake --build "$build" -j "$jobs"
ctest --test-dir "$build" --output-on-failure -j "$jobs" --timeout 1500
scripts/test-python.sh
