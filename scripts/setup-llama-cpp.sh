#!/usr/bin/env bash
# The pinned llama.cpp and libggml-gdn built against it (docs/GGML.md, "In llama.cpp").
#   1. fetches the llama-cpp-python 0.3.36 sdist from PyPI (it vendors llama.cpp whole, ggml 0.25.3)
#      and checks its sha256;
#   2. builds that llama.cpp CPU-only with dynamic backends (GGML_BACKEND_DL: ggml_backend_load_all
#      then loads what GGML_BACKEND_PATH names), only the targets used here: test-backend-ops,
#      llama-bench and libllama;
#   3. builds libggml-gdn (integrations/ggml-backend) against its ggml, in build-llama-cpp/.
# Steps 1-2 are cached under GDN_LLAMA_CPP_CACHE (default ~/.cache/gdn/llama-cpp), the build in a
# folder named by the version and a hash of its options: a second run only checks them (seconds).
# The first build is about 140 compile steps: 3 min 12 s on 2 cores (Xeon, AVX-512), the unpacking
# a few seconds more.
# Prints, as its last three lines, shell assignments: LLAMA_CPP_SRC (the source, with its
# convert_hf_to_gguf.py), LLAMA_CPP_BIN (llama.cpp's binaries and libraries) and GGML_GDN (the path
# of libggml-gdn.so), for `eval "$(scripts/setup-llama-cpp.sh)"`.
set -euo pipefail
cd "$(dirname "$0")/.."
version=0.3.36
sha256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
file=llama_cpp_python-$version.tar.gz
# The file's address from the package index's simple page (PIP_INDEX_URL when set), as pip finds
# it: the index's shortcut addresses by name are not served everywhere.
index=${PIP_INDEX_URL:-https://pypi.org/simple}
index=${index%/}/llama-cpp-python/
cache=${GDN_LLAMA_CPP_CACHE:-${HOME:-/root}/.cache/gdn/llama-cpp}
jobs=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
say() { echo "setup-llama-cpp: $*" >&2; }
mkdir -p "$cache"

tarball=$cache/$file
if [[ ! -f "$tarball" ]] || ! echo "$sha256  $tarball" | sha256sum -c --quiet - 2>/dev/null; then
  shown_index=$(echo "$index" | sed 's#://[^/@]*@#://#')  # (credentials in the address are not printed)
  say "looking up $file in $shown_index"
  page=$(curl -fsSL --retry 3 "$index") || { say "cannot read $shown_index"; exit 1; }
  href=$(grep -o "href=\"[^\"#]*$file[#\"]" <<<"$page" | head -1 | sed 's/^href="//; s/[#"]$//') || true
  [[ -n $href ]] || { say "$shown_index lists no $file"; exit 1; }
  case $href in
    http://* | https://*) url=$href ;;
    /*) url=$(echo "$index" | sed 's#^\(https\?://[^/]*\).*#\1#')$href ;;
    *) url=$index$href ;;
  esac
  say "fetching $file"
  curl -fsSL --retry 3 -o "$tarball.part" "$url" || { say "cannot fetch $file"; exit 1; }
  echo "$sha256  $tarball.part" | sha256sum -c --quiet - || { say "sha256 mismatch for $file"; exit 1; }
  mv "$tarball.part" "$tarball"
fi

src=$cache/src-$version
if [[ ! -f "$src/.unpacked" ]]; then
  say "unpacking vendor/llama.cpp into $src"
  rm -rf "$src" && mkdir -p "$src"
  tar -xzf "$tarball" -C "$src" --strip-components=3 "llama_cpp_python-$version/vendor/llama.cpp"
  touch "$src/.unpacked"
fi

# The CPU backend for this host's instruction set, each extension ggml can use turned on when the
# host's CPU flags list it: a backend built for more than the host has is not loaded at all
# (ggml checks the CPU's features first: a fixed AVX-512 + AVX-VNNI build was not, on a Zen 4),
# and GGML_NATIVE does not combine with dynamic backends. The flags are in the options, so the
# cache keeps one build per host class. AMX is left out (ggml uses it for quantized types only).
# OpenMP (ggml's default) is what libggml-gdn's threads join.
host_flags=" $( (grep -m1 -E '^flags' /proc/cpuinfo 2>/dev/null || true) | cut -d: -f2) "
has() { local f; for f in "$@"; do [[ $host_flags == *" $f "* ]] || return 1; done; }
isa=()
# ggml option: the flags it compiles for (GGML_AVX512 means F, CD, VL, DQ and BW together).
for entry in AVX:avx AVX2:avx2 FMA:fma F16C:f16c BMI2:bmi2 SSE42:sse4_2 \
             AVX512:avx512f,avx512cd,avx512vl,avx512dq,avx512bw AVX512_BF16:avx512_bf16 AVX512_VBMI:avx512vbmi \
             AVX512_VNNI:avx512_vnni AVX_VNNI:avx_vnni; do
  IFS=, read -r -a needed <<<"${entry#*:}"
  if has "${needed[@]}"; then isa+=("-DGGML_${entry%%:*}=ON"); else isa+=("-DGGML_${entry%%:*}=OFF"); fi
done
options=(
  -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON
  -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=OFF -DGGML_NATIVE=OFF -DGGML_OPENMP=ON "${isa[@]}"
  -DLLAMA_BUILD_TESTS=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF
  -DLLAMA_OPENSSL=OFF
)
hash=$(printf '%s\n' "${options[@]}" | sha256sum | cut -c1-12)
build=$cache/build-$version-$hash
if [[ ! -f "$build/build.ninja" ]]; then  # a configure that failed or was killed leaves a cache, not this
  say "configuring llama.cpp in $build"
  cmake -S "$src" -B "$build" -G Ninja "${options[@]}" >&2
fi
say "building test-backend-ops, llama-bench, llama (in $build)"
cmake --build "$build" -j "$jobs" --target test-backend-ops llama-bench llama >&2

gdn_build=build-llama-cpp/ggml-gdn-$version-$hash  # its cached library paths are those of this build
cmake -S integrations/ggml-backend -B "$gdn_build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DGGML_SOURCE_DIR="$src/ggml" -DGGML_LIBRARY_DIR="$build/bin" -DLLAMA_CPP_DIR="$src" >&2
cmake --build "$gdn_build" -j "$jobs" >&2
printf 'LLAMA_CPP_SRC=%q\nLLAMA_CPP_BIN=%q\nGGML_GDN=%q\n' "$src" "$build/bin" "$PWD/$gdn_build/libggml-gdn.so"
