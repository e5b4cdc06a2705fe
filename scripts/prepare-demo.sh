#!/usr/bin/env bash
# scripts/prepare-demo.sh: build the demo corpus data/fortunes.bin (the text of Debian's fortunes
# and fortunes-min packages as byte-level tokens, vocabulary 256) with zt-prepare, unless it
# already exists. Idempotent: a second run does nothing.
# Usage: scripts/prepare-demo.sh [PATH/TO/zt-prepare]   (default build/apps/zt-prepare)
set -euo pipefail
cd "$(dirname "$0")/.."
prepare="${1:-build/apps/zt-prepare}"
out=data/fortunes.bin
if [[ -s "$out" ]]; then
  echo "prepare-demo: $out exists, nothing to do"
  exit 0
fi
if [[ ! -x "$prepare" ]]; then
  echo "zerotask: error: zt-prepare not found at $prepare (build first: cmake --build build)" >&2
  exit 1
fi
mkdir -p data
"$prepare" --fortunes --out "$out"
