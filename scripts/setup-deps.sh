#!/usr/bin/env bash
# scripts/setup-deps.sh: install every Debian 12 package zerotask needs to build, test and run
# its demo. Idempotent; run as root (or with sudo available). The only place apt-get appears.
#   --docs  also Chromium, which scripts/trace-screenshot.sh drives headless for docs/img/
set -euo pipefail
PKGS=(
  build-essential cmake pkg-config
  libstarpu-dev libopenblas-dev libcjson-dev libhwloc-dev liburing-dev
  libopenmpi-dev openmpi-bin
  fortunes fortunes-min
  fio gnuplot-nox
  python3-torch python3-numpy
)
if [ "${1:-}" = "--docs" ]; then PKGS+=(chromium); fi
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "zerotask setup: installing ${missing[*]}"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "zerotask setup: all packages present"
fi
