#!/usr/bin/env bash
# CI: libgdn as a user gets it. Configures a plain CPU build (no tests, benchmarks, tools or
# examples) in a temporary folder, installs it, moves the installed tree elsewhere (it must be
# relocatable), and builds and runs the programs of tests/consumer against it: C and C++, shared
# and static, through find_package(gdn) and through pkg-config (static: a fully static program
# from `pkg-config --static --libs`). Each prints gdn_version() and checks one forward against a
# value it computes itself. About 30 s on 2 idle cores, the library's build most of it.
#   GDN_CI_JOBS   parallel build jobs (default: nproc)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${GDN_CI_JOBS:-$(nproc)}
start=$SECONDS
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
command -v pkg-config >/dev/null || scripts/apt-install.sh ci-consumers pkg-config

cmake -S . -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DGDN_CUDA=OFF -DGDN_GGML=OFF -DGDN_BUILD_TESTS=OFF \
  -DGDN_BUILD_BENCH=OFF -DGDN_BUILD_TOOLS=OFF -DGDN_BUILD_EXAMPLES=OFF >"$work/configure.log" \
  || { cat "$work/configure.log"; exit 1; }
grep '^-- gdn [0-9]' "$work/configure.log"
cmake --build "$work/build" -j "$jobs" >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
cmake --install "$work/build" --prefix "$work/staged" >/dev/null
mv "$work/staged" "$work/prefix"
prefix=$work/prefix
echo "ci-consumers: libgdn built and installed in $((SECONDS - start)) s"

failed=0
# run NAME PROGRAM: runs it, and for a static program also checks that it needs no libgdn.so.
run() {
  local name=$1 program=$2
  if ! "$program" >"$work/$name.out" 2>&1 || ! grep -qx ok "$work/$name.out"; then
    echo "ci-consumers: FAIL $name"
    cat "$work/$name.out"
    failed=1
  elif [[ $name == *static* ]] && ldd "$program" 2>/dev/null | grep -q libgdn; then
    echo "ci-consumers: FAIL $name links libgdn.so"
    failed=1
  else
    echo "ci-consumers: ok $name ($(head -1 "$work/$name.out"))"
  fi
}

for language in C CXX; do
  for linkage in shared static; do
    name=cmake-$language-$linkage
    static=OFF
    [[ $linkage == static ]] && static=ON
    if cmake -S tests/consumer -B "$work/$name" -DCMAKE_PREFIX_PATH="$prefix" -DGDN_CONSUMER_LANGUAGE=$language \
      -DGDN_CONSUMER_STATIC=$static >"$work/$name.log" 2>&1 && cmake --build "$work/$name" >>"$work/$name.log" 2>&1; then
      run "$name" "$work/$name/consumer"
    else
      echo "ci-consumers: FAIL $name does not build"
      cat "$work/$name.log"
      failed=1
    fi
  done
done

export PKG_CONFIG_PATH
PKG_CONFIG_PATH=$(dirname "$(find "$prefix" -name gdn.pc)")
libdir=$(pkg-config --variable=libdir gdn)
read -r -a cflags <<<"$(pkg-config --cflags gdn)"
read -r -a libs <<<"$(pkg-config --libs gdn)"
read -r -a static_libs <<<"$(pkg-config --static --libs gdn)"
pkg_build() {  # pkg_build NAME COMPILER SOURCE FLAGS...
  local name=$1 compiler=$2 source=$3
  shift 3
  if "$compiler" -o "$work/$name" "tests/consumer/$source" "${cflags[@]}" "$@" >"$work/$name.log" 2>&1; then
    run "$name" "$work/$name"
  else
    echo "ci-consumers: FAIL $name does not build"
    cat "$work/$name.log"
    failed=1
  fi
}
pkg_build pkg-config-C-shared cc consumer.c "${libs[@]}" -lm -Wl,-rpath,"$libdir"
pkg_build pkg-config-CXX-shared c++ consumer.cpp -std=c++17 "${libs[@]}" -Wl,-rpath,"$libdir"
pkg_build pkg-config-C-static cc consumer.c -static "${static_libs[@]}" -lm
pkg_build pkg-config-CXX-static c++ consumer.cpp -std=c++17 -static "${static_libs[@]}"

echo "ci-consumers: done in $((SECONDS - start)) s"
exit $failed
