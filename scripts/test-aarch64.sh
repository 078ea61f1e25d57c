#!/usr/bin/env bash
# The AArch64 check: cross-builds the project for 64-bit Arm Linux with Debian's cross compiler
# (cmake/toolchains/aarch64-linux-gnu.cmake) and runs its tests under qemu-user. Builds the
# library, gdn-ops, the examples and every test (no CUDA, Python, ggml or benchmarks), so the whole
# project is known to compile for AArch64, then runs the tests that exercise the cpu backend's
# NEON kernels (list below). Emulation is many times slower than the host, so the other suites
# (ref, reliability, harness, gguf, examples) run on x86-64 only.
#   GDN_AARCH64_BUILD  build folder (default build-aarch64)
#   GDN_AARCH64_LABELS  CTest label regex of the tests to run (default: ^(cpu|varlen|core)$)
#   GDN_AARCH64_EXCLUDE CTest regex of tests left out among those
set -euo pipefail
cd "$(dirname "$0")/.."
triple=aarch64-linux-gnu

# Debian packages: the cross compiler, qemu-user, and GoogleTest's sources (libgtest-dev).
missing=()
command -v cmake >/dev/null || missing+=(cmake)
command -v ninja >/dev/null || missing+=(ninja-build)
command -v $triple-g++ >/dev/null || missing+=(g++-$triple)
command -v qemu-aarch64 >/dev/null || command -v qemu-aarch64-static >/dev/null || missing+=(qemu-user)
[[ -e /usr/src/googletest/CMakeLists.txt ]] || missing+=(libgtest-dev)
scripts/apt-install.sh test-aarch64 "${missing[@]}"

toolchain=$PWD/cmake/toolchains/aarch64-linux-gnu.cmake
jobs=$(nproc)

# GoogleTest for the target, built from the sources Debian ships with libgtest-dev (the same
# version as the host's), cached per version.
gtest_version=$(dpkg-query -W -f '${Version}' libgtest-dev 2>/dev/null || echo unknown)
gtest_prefix=${XDG_CACHE_HOME:-$HOME/.cache}/gdn/aarch64-googletest-${gtest_version//[^A-Za-z0-9.+-]/_}
if [[ ! -e $gtest_prefix/.complete ]]; then
  echo "test-aarch64: building GoogleTest $gtest_version for $triple into $gtest_prefix"
  gtest_build=$(mktemp -d)
  trap 'rm -rf "$gtest_build"' EXIT
  cmake -S /usr/src/googletest -B "$gtest_build" -G Ninja --toolchain "$toolchain" \
    -DCMAKE_BUILD_TYPE=Release -DBUILD_GMOCK=OFF -DINSTALL_GTEST=ON -DCMAKE_INSTALL_PREFIX="$gtest_prefix" >/dev/null
  cmake --build "$gtest_build" -j "$jobs" >/dev/null
  cmake --install "$gtest_build" >/dev/null
  touch "$gtest_prefix/.complete"
fi

build=${GDN_AARCH64_BUILD:-build-aarch64}
cmake -S . -B "$build" -G Ninja --toolchain "$toolchain" -DCMAKE_BUILD_TYPE=Release \
  -DGTest_DIR="$gtest_prefix/lib/cmake/GTest" -DGDN_BUILD_TESTS=ON -DGDN_CUDA=OFF -DGDN_GGML=OFF -DGDN_PYTHON=OFF -DGDN_BUILD_BENCH=OFF
cmake --build "$build" -j "$jobs"

# The tests of the cpu backend (its NEON GEMM and vector loops against the ref oracle, chunked
# forward and backward, packed sequences, bits across thread counts; label cpu), of packed
# sequences (varlen) and of validation and tensor geometry (core). Left out: the ref backend's
# own packed-sequence run (the same code as on x86-64, and ref already runs as the oracle here).
labels=${GDN_AARCH64_LABELS:-^(cpu|varlen|core)$}
exclude=${GDN_AARCH64_EXCLUDE:-PackedEqualsPerSequence.BitForBit/ref_}
ctest --test-dir "$build" --no-tests=error --output-on-failure -j "$jobs" --timeout 900 -L "$labels" -E "$exclude"
