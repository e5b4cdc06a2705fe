#!/usr/bin/env bash
# scripts/gpu-nccl-check.sh WORKDIR: the NCCL collectives of the GPU build with two ranks on one
# machine (scripts/gpu-check.sh). Trains a tiny GPT-2 at ZeRO stage 2 on two ranks with
# ZT_NCCL=1 (reduce-scatter and all-gather through NCCL when each rank has one CUDA worker) and
# with ZT_NCCL=0 (MPI), and compares the per-step losses: the same bits are expected, since both
# transports add in rank order (docs/cuda.md). With one GPU both ranks share it, which NCCL
# refuses ("Duplicate GPU detected"): then it says so and exits 77, as it does without a GPU.
set -uo pipefail
work=${1:?usage: gpu-nccl-check.sh WORKDIR}
nvidia-smi -L 2>/dev/null | grep -q GPU || { echo "skip: no GPU"; exit 77; }
zt=$PWD/build-cuda/apps/zt-train
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
python3 - <<'PY'
import json, struct
json.dump({"vocab_size": 64, "seq_len": 16, "n_embd": 32, "n_layer": 2, "n_head": 2},
          open("model.json", "w"))
json.dump({"train_batch_size": 8, "seed": 5, "gradient_clipping": 1.0,
           "optimizer": {"type": "AdamW", "params": {"lr": 3e-3}},
           "zero_optimization": {"stage": 2}}, open("ds.json", "w"))
toks = [(7 * i) % 64 for i in range(4000)]
with open("tokens.bin", "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, len(toks), *([0] * 253)))
    f.write(struct.pack("<%dH" % len(toks), *toks))
PY
for nccl in 0 1; do
  echo "== ZT_NCCL=$nccl: mpirun -np 2 zt-train (ZeRO stage 2, 3 steps)"
  timeout 25 mpirun --oversubscribe -np 2 -x STARPU_NCPU=2 -x ZT_NCCL=$nccl -x STARPU_SILENT=1 \
    -x NCCL_DEBUG=WARN \
    -x LD_LIBRARY_PATH -x OPAL_PREFIX -x PMIX_INSTALL_PREFIX \
    "$zt" --ds-config ds.json --model model.json --data tokens.bin --steps 3 \
    --log "log$nccl.jsonl" --quiet > "nccl$nccl.out" 2>&1
  echo "exit $?"
  cat "nccl$nccl.out"
done
python3 - <<'PY'
import json, sys
def losses(n):
    try:
        return [json.loads(l)["loss"] for l in open("log%d.jsonl" % n)]
    except OSError:
        return None
mpi, nccl = losses(0), losses(1)
print("losses: MPI %s, NCCL %s" % (mpi, nccl))
if mpi and not nccl and "Duplicate GPU detected" in open("nccl1.out").read():
    print("skip: NCCL refuses two ranks on one GPU (Duplicate GPU detected, see above): the "
          "NCCL transport needs a GPU per rank")
    sys.exit(77)
if not mpi or not nccl:
    sys.exit("FAIL: a run wrote no losses (see above)")
sys.exit(0 if mpi == nccl else "FAIL: NCCL's losses differ from MPI's")
PY
