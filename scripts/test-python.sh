#!/usr/bin/env bash
# The Python package's tests (called by scripts/test.sh): installs the package with `pip install .`
# into a virtual environment kept between runs, with the pinned test requirements, and runs pytest
# there and again with the newest transformers release (python/requirements-test-newest.txt).
#   GDN_VENV        the environment (default ~/.cache/gdn/venv; reused while the pins are unchanged)
#   GDN_VENV_NEWEST the second one (default $GDN_VENV-newest)
#   GDN_CMAKE_ARGS  extra CMake arguments for the package's build (passed as CMAKE_ARGS)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${GDN_VENV:-$HOME/.cache/gdn/venv}
requirements=python/requirements-test.txt
stamp="$venv/.gdn-requirements"
if [[ ! -x $venv/bin/python ]]; then
  python3 -m venv "$venv"
fi
# FLA's naive references, beside the environment rather than in it: an importable FLA makes
# transformers route its layers to FLA's GPU kernels.
fla_site="$venv/fla-site"
if ! cmp -s "$requirements" "$stamp"; then
  "$venv/bin/python" -m pip install --quiet --upgrade pip
  "$venv/bin/python" -m pip install --quiet -r "$requirements"
  rm -rf "$fla_site"
  "$venv/bin/python" -m pip install --quiet --no-deps --target "$fla_site" "fla-core==0.6.0"
  cp "$requirements" "$stamp"
fi
export GDN_FLA_SITE="$fla_site"
# The build requirements are pinned in the environment, so the package builds without isolation
# (no download per build) and reuses its CMake build folder (build/python) between runs.
CMAKE_ARGS="${GDN_CMAKE_ARGS:-}" "$venv/bin/python" -m pip install --quiet --no-build-isolation --no-deps .
# The newest transformers release with its default dependencies, in a second environment layered
# over the first (a .pth file puts the pinned environment's packages, gdn included, behind its own).
newest=${GDN_VENV_NEWEST:-$venv-newest}
newest_requirements=python/requirements-test-newest.txt
if [[ ! -x $newest/bin/python ]]; then
  python3 -m venv "$newest"
fi
"$newest/bin/python" - "$venv" <<'PY'
import pathlib, subprocess, sys, sysconfig
base = subprocess.run([sys.argv[1] + "/bin/python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                      capture_output=True, text=True, check=True).stdout.strip()
pathlib.Path(sysconfig.get_paths()["purelib"], "gdn-pinned-environment.pth").write_text(base + "\n")
PY
if ! cmp -s "$newest_requirements" "$newest/.gdn-requirements"; then
  "$newest/bin/python" -m pip install --quiet -r "$newest_requirements"
  cp "$newest_requirements" "$newest/.gdn-requirements"
fi
# Run from python/tests so that the installed package, not the source folder, is imported.
cd python/tests
for environment in "$venv" "$newest"; do
  echo "test-python: $("$environment/bin/python" -c 'import torch, transformers; print(f"torch {torch.__version__}, transformers {transformers.__version__}")')"
  OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} "$environment/bin/python" -m pytest -q -p no:cacheprovider "$@"
done
