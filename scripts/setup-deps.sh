#!/usr/bin/env bash
# Installs what the build needs when it is missing (Debian packages; needs root or sudo).
# Called by scripts/test.sh and scripts/run.sh; does nothing when everything is present.
set -euo pipefail
missing=()
command -v cmake >/dev/null || missing+=(cmake)
command -v ninja >/dev/null || missing+=(ninja-build)
command -v c++ >/dev/null || missing+=(g++)
[[ -e /usr/include/gtest/gtest.h ]] || missing+=(libgtest-dev)
[[ -e /usr/include/benchmark/benchmark.h ]] || missing+=(libbenchmark-dev)
# The Python package (scripts/test-python.sh): venv and the headers an extension module builds against.
command -v python3 >/dev/null || missing+=(python3)
if command -v python3 >/dev/null; then
  python3 -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
  python3 -c 'import os, sysconfig; assert os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))' \
    2>/dev/null || missing+=(python3-dev)
fi
"$(dirname "$0")/apt-install.sh" setup-deps "${missing[@]}"
