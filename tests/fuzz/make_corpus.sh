#!/usr/bin/env bash
# tests/fuzz/make_corpus.sh BUILD_DIR: writes the seed corpora of the fuzz targets
# (tests/fuzz/corpus/<reader>/) from one tiny real run of BUILD_DIR's zt-train: its token file,
# configs, exported weights, checkpoint (meta.json and a shard) and replay file. Run it again
# when a format changes; the seeds are small on purpose (libFuzzer mutates them). The seeds of
# corpus/tokenizer (texts) and corpus/prompts (prompts files and inference configs) are written
# by hand and left alone here, and so are corpus/replay's other seeds (v3.ztr: a replay file of
# the older version 3, which the reader still reads; recompute.ztr: tasks marked recompute).
set -euo pipefail
build=$(cd "${1:?usage: make_corpus.sh BUILD_DIR}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
/usr/bin/python3 - <<'PY'
import json, struct
json.dump({"vocab_size": 16, "seq_len": 4, "n_embd": 8, "n_layer": 1, "n_head": 2},
          open("model.json", "w"))
json.dump({"train_batch_size": 2, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}},
          open("ds.json", "w"))
with open("tokens.bin", "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, 40, *([0] * 253)))
    f.write(struct.pack("<40H", *[i % 16 for i in range(40)]))
PY
STARPU_NCPU=1 STARPU_SILENT=1 "$build/apps/zt-train" --ds-config ds.json --model model.json \
  --data tokens.bin --steps 1 --quiet --export w.safetensors --save-dir ckpt --trace t.json
c=$here/corpus
rm -rf "$c"/{safetensors,tokens,config,ckpt_meta,ckpt_shard}  # not tokenizer, prompts, replay
mkdir -p "$c"/{safetensors,tokens,config,ckpt_meta,ckpt_shard,replay}
cp w.safetensors "$c/safetensors/export.safetensors"
cp tokens.bin "$c/tokens/tokens.bin"
cp ds.json "$c/config/tiny_ds.json"
cp model.json "$c/config/tiny_model.json"
cp "$here"/../../configs/*.json "$c/config/"
cp ckpt/step1/meta.json "$c/ckpt_meta/meta.json"
cp "$(ls ckpt/step1/* | grep -v meta.json | head -1)" "$c/ckpt_shard/rank0.shard"
cp t.ztr "$c/replay/t.ztr"
du -sh "$c"/*
