#!/usr/bin/env bash
# Installs a pinned upstream ggml (libggml*.so, include/ggml*.h and a find_package(ggml) config)
# into its own Python venv, built from source by the `ggml-python` package (about a CPU-minute).
# Idempotent: when the venv already holds the pinned version it does nothing, so CI reuses it on
# the same machine. Prints, as its last line, the folder to pass as -DGDN_GGML_DIR=...
#   GDN_GGML_VENV  the venv (default /root/.cache/gdn/ggml-venv, or ~/.cache/gdn/ggml-venv)
set -euo pipefail
pin=0.0.45   # ggml-python 0.0.45 vendors ggml 0.15.3 (the version docs/GGML.md is written against)
venv=${GDN_GGML_VENV:-${HOME:-/root}/.cache/gdn/ggml-venv}

prefix_of() {   # the package installs include/, lib/ and lib/cmake/ggml at the root of site-packages
  "$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'
}

installed=$("$venv/bin/python" -m pip show ggml-python 2>/dev/null | sed -n 's/^Version: //p' || true)
if [[ "$installed" != "$pin" ]]; then
  echo "setup-ggml: installing ggml-python==$pin into $venv (builds ggml from source)" >&2
  command -v python3 >/dev/null || { echo "setup-ggml: python3 is required" >&2; exit 1; }
  if [[ ! -x "$venv/bin/python" ]] && ! python3 -m venv "$venv" >&2; then
    rm -rf "$venv"   # Debian's python3 needs python3-venv for this
    "$(dirname "$0")/apt-install.sh" setup-ggml python3-venv
    python3 -m venv "$venv"
  fi
  CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "ggml-python==$pin" >&2
fi
prefix=$(prefix_of)
[[ -f "$prefix/include/ggml.h" ]] || { echo "setup-ggml: no include/ggml.h under $prefix" >&2; exit 1; }
echo "$prefix"
