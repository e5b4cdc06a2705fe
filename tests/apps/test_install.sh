#!/usr/bin/env bash
# tests/apps/test_install.sh: install the build tree into a scratch prefix, then build a small app
# out of tree against it twice: with CMake's find_package(zerotask) and with pkg-config.
# Usage: test_install.sh BUILD_DIR SOURCE_DIR WORK_DIR
set -euo pipefail
build=$1 src=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
cmake --install "$build" --prefix "$work/prefix" >/dev/null
cmake -S "$src/tests/apps/consumer" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/cmake-build" >/dev/null
"$work/cmake-build/consumer"
export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig:${PKG_CONFIG_PATH:-}"
[ -d "$work/prefix/lib/pkgconfig" ] || export PKG_CONFIG_PATH="$(dirname "$(find "$work/prefix" -name zerotask.pc)"):${PKG_CONFIG_PATH}"
cc -std=c11 "$src/tests/apps/consumer/main.c" -o "$work/consumer-pc" $(pkg-config --cflags --libs zerotask) \
   -Wl,-rpath,"$(pkg-config --variable=libdir zerotask)"
"$work/consumer-pc"
echo "install: find_package and pkg-config consumers ok"
