#!/usr/bin/env bash
# scripts/demo_bpe.sh: the demo with a trained BPE vocabulary instead of bytes. On a fresh
# Debian 12 machine: install every dependency, build zerotask, train a GPT-2-style byte-level BPE
# of 2048 tokens on the fortunes corpus (data/fortunes-bpe/: tokenizer.json, vocab.json,
# merges.txt, which Hugging Face `tokenizers` loads), tokenize the corpus with it
# (data/fortunes-bpe.bin), and train the demo GPT-2 with that vocabulary
# (configs/demo_bpe_model.json) with progress output. Idempotent: the tokenizer and the token
# file are made once. Extra arguments go to zt-train (e.g. --steps 50).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j2
tok=data/fortunes-bpe
out=data/fortunes-bpe.bin
if [[ -s "$out" && -s "$tok/tokenizer.json" ]]; then
  echo "demo_bpe: $tok and $out exist, nothing to prepare"
else
  mkdir -p data
  build/apps/zt-prepare --fortunes --train-tokenizer "$tok" --vocab-size 2048 --out "$out"
fi
exec build/apps/zt-train --ds-config configs/demo_ds.json --model configs/demo_bpe_model.json \
    --data "$out" --steps 300 --export build/demo-bpe-weights.safetensors \
    --log build/demo-bpe-metrics.jsonl "$@"
