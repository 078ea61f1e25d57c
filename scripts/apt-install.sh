#!/usr/bin/env bash
# Installs Debian packages, as root or through sudo: apt-install.sh WHO PACKAGE...
# WHO names the caller in the one line it prints. Everything goes to stderr, so that a caller
# whose stdout is its result (setup-ggml.sh) can use it.
set -euo pipefail
exec >&2
who=$1
shift
(($#)) || exit 0
echo "$who: installing $*"
sudo_cmd=()
[[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
"${sudo_cmd[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "$@"
