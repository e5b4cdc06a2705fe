#!/usr/bin/env bash
# scripts/setup-deps.sh: install every Debian 12 package zerotask needs to build, test and run
# its demo. Idempotent; run as root (or with sudo available). The only place apt-get appears.
#   --docs            also Chromium, which scripts/trace-screenshot.sh drives headless for docs/img/
#   --deepspeed       also libaio (DeepSpeed's async_io op, for bench/deepspeed/setup)
#   --starpu-src DIR  also enable Debian's source archive (deb-src) and unpack the starpu source
#                     package into DIR (scripts/build-starpu-cuda.sh builds it with CUDA)
set -euo pipefail
PKGS=(
  build-essential cmake pkg-config
  libstarpu-dev libopenblas-dev libcjson-dev libhwloc-dev liburing-dev libpcre2-dev
  libmicrohttpd-dev
  libopenmpi-dev openmpi-bin
  fortunes fortunes-min
  fio gnuplot-nox
  clang libclang-rt-dev
  python3-torch python3-numpy
)
SRC_DIR=""
while [ $# -gt 0 ]; do
  case "$1" in
    --docs) PKGS+=(chromium); shift ;;
    --deepspeed) PKGS+=(libaio-dev); shift ;;
    --starpu-src) SRC_DIR=${2:?--starpu-src: expected a directory}; PKGS+=(dpkg-dev); shift 2 ;;
    *) echo "setup-deps.sh: unknown option $1 (expected --docs, --deepspeed or --starpu-src DIR)" >&2
       exit 2 ;;
  esac
done
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
if [ -n "$SRC_DIR" ]; then
  # Debian 12's source archive, for `apt-get source starpu` (same suite as the binary packages)
  list=/etc/apt/sources.list.d/zt-deb-src.sources
  if ! grep -rqs "^Types:.*deb-src" /etc/apt/sources.list.d/ &&
     ! grep -qs "^deb-src" /etc/apt/sources.list; then
    suite=$(. /etc/os-release && echo "$VERSION_CODENAME")
    printf '%s\n' "Types: deb-src" "URIs: http://deb.debian.org/debian" "Suites: $suite" \
      "Components: main" "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" |
      $SUDO tee "$list" >/dev/null
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  fi
fi
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
if [ -n "$SRC_DIR" ]; then
  mkdir -p "$SRC_DIR"
  if ! ls -d "$SRC_DIR"/starpu-*/configure >/dev/null 2>&1; then
    echo "zerotask setup: fetching Debian's starpu source package into $SRC_DIR"
    (cd "$SRC_DIR" && apt-get source -qq starpu)
  fi
fi
