#!/usr/bin/env bash
# scripts/demo.sh: README command 1. On a fresh Debian 12 machine: install every dependency,
# build zerotask, turn the fortunes corpus into a token file, and train the demo GPT-2 on it with
# progress output. Idempotent. Extra arguments go to zt-train (e.g. --steps 50).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j2
bash scripts/prepare-demo.sh build/apps/zt-prepare
exec build/apps/zt-train --ds-config configs/demo_ds.json --model configs/demo_model.json \
    --data data/fortunes.bin --steps 300 --export build/demo-weights.safetensors \
    --log build/demo-metrics.jsonl "$@"
