#!/usr/bin/env python3
"""tests/graph/test_actckpt_nvme.py: activation checkpointing with the checkpointed layers'
inputs on NVMe ("activation_checkpointing": {"offload": {"device": "nvme", "nvme_path": D}}):
the inputs of the layers that recompute wait in a swap file between their forward and backward.

- Bit-identical losses and exported weights against storing everything: ZeRO stages 0-3, 1-2
  ranks, accumulation 1-2, fp32/bf16 (rows not 4096-aligned: the bounce buffer)/fp16, recompute
  full and mlp, and with the parameters on NVMe too.
- The swaps are real: the trace has a swap-out and a swap-in of layer 0's input per micro-batch,
  the memory plan names them, and the run removes its swap directory.
- Memory: the plan's activations fall by the inputs that no longer have a tensor of their own.
- Bad input: a missing nvme_path, a device that does not exist, "none" against
  cpu_checkpointing true: one line, exit 2; a disk that fills up during the swap-outs (two ranks,
  room for one; root and mkfs.ext4): one line naming the file, exit non-zero.

Usage: test_actckpt_nvme.py ZT_TRAIN MPIEXEC WORKDIR
"""
import collections
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from trainlib import Runner  # noqa: E402

R = Runner(sys.argv[1], sys.argv[2], sys.argv[3], {"STARPU_SILENT": "1"})
V, T, C, L = 64, 16, 32, 3
model = R.write("model.json", {"vocab_size": V, "seq_len": T, "n_embd": C, "n_layer": L,
                               "n_head": 2})
data = R.tokens("tokens.bin", [(i * 7 + i // 13) % V for i in range(5000)])
SWAP = R.path("swap")
os.makedirs(SWAP, exist_ok=True)
NV = {"device": "nvme", "nvme_path": SWAP}


config = R.ckpt_config


def swapdirs():
    return [d for d in os.listdir(SWAP) if d.startswith("zerotask-swap-")]


model6 = R.write("model6.json", {"vocab_size": V, "seq_len": T, "n_embd": C, "n_layer": 6,
                                 "n_head": 2})


def run(label, n, cfg, args=(), window="1", mdl=model):
    # window 1, 3 layers: layers 0 and 1 recompute, their inputs share 1 set, layer 0's is
    # swapped; window 2, 6 layers: layers 0-3 recompute, 2 sets, the inputs of 0 and 1 swapped
    recs, out, p = R.train(label, n, ["--ds-config", cfg, "--model", mdl, "--data", data,
                                      "--steps", "3"] + list(args),
                           {"ZT_RECOMPUTE_WINDOW": window})
    with open(out, "rb") as f:
        return [r["loss"] for r in recs], f.read(), p


# ---- the same bits ---------------------------------------------------------------------------
CASES = [  # label, stage, ranks, accum, precision, checkpoint section, parameters on NVMe, window
    ("s0a2", 0, 1, 2, None, {"offload": NV}, None, "1"),
    ("s1fp16", 1, 1, 2, "fp16", {"cpu_checkpointing": True, "offload": NV}, None, "1"),
    ("s2mlp", 2, 1, 1, None, {"recompute": "mlp", "offload": NV}, None, "1"),
    ("s3bf16n2", 3, 2, 1, "bf16", {"offload": NV}, None, "1"),
    ("s1n2a2", 1, 2, 2, None, {"offload": NV}, None, "1"),
    ("s3par", 3, 1, 1, None, {"offload": NV}, dict(NV, nvme_path=R.path("par")), "1"),
    # the engine's swap files and the inputs' under one nvme_path: each its own directory
    ("s3same", 3, 1, 2, None, {"offload": NV}, NV, "1"),
    ("w2s0a2", 0, 1, 2, None, {"offload": NV}, None, "2"),
    ("w2s3bf16n2", 3, 2, 1, "bf16", {"recompute": "attention", "offload": NV}, None, "2"),
    ("w2s1fp16", 1, 1, 2, "fp16", {"offload": NV}, None, "2"),
]
os.makedirs(R.path("par"), exist_ok=True)
for label, stage, n, accum, prec, ckpt, par, window in CASES:
    mdl = model if window == "1" else model6
    base = run(label + "_plain", n, config(label + "_plain", stage, n, accum, None, prec, par),
               window=window, mdl=mdl)
    got = run(label + "_nvme", n, config(label + "_nvme", stage, n, accum, ckpt, prec, par),
              window=window, mdl=mdl)
    R.check(got[0] == base[0] and got[1] == base[1] and swapdirs() == [],
            "%s (stage %d, %d rank(s), accumulation %d, %s, %s, window %s, %s layers): losses "
            "and weights bit-identical with the checkpointed inputs on NVMe, swap directory "
            "removed" % (label, stage, n, accum, prec or "fp32", ckpt, window,
                         3 if window == "1" else 6))

# ---- the swaps are real ----------------------------------------------------------------------
trace = R.path("swaps.json")
_, _, p = run("traced", 1, config("traced", 0, 1, 2, {"offload": NV}), ["--trace", trace])
with open(trace) as f:
    events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
swaps = collections.Counter((e["args"]["kind"], e["args"]["layer"]) for e in events
                            if e["args"]["kind"] in ("swap_in", "swap_out"))
R.check(swaps == {("swap_out", 0): 6, ("swap_in", 0): 6},
        "3 steps x 2 micro-batches: layer 0's input out and in each time, nothing else (%s)" %
        dict(swaps))
R.check("checkpointed inputs: 2 in 1 set(s)" in p.stdout and "1 through NVMe" in p.stdout,
        "the memory plan names the inputs on NVMe")
# window 2: a swap-in is prefetched at the backward of the recomputing layer above, marked
_, _, p = run("traced2", 1, config("traced2", 0, 1, 1, {"offload": NV}), ["--trace", trace],
              window="2", mdl=model6)
with open(trace) as f:
    events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
swaps = collections.Counter((e["args"]["kind"], e["args"]["layer"], e["args"].get("recompute", 0))
                            for e in events if e["args"]["kind"] in ("swap_in", "swap_out"))
R.check(swaps == {("swap_out", 0, 0): 3, ("swap_out", 1, 0): 3, ("swap_in", 0, 1): 3,
                  ("swap_in", 1, 1): 3} and "checkpointed inputs: 4 in 2 set(s)" in p.stdout,
        "window 2, 6 layers: the inputs of layers 0 and 1 out and in each step, the swap-ins "
        "marked recompute (%s)" % dict(swaps))

# ---- memory ----------------------------------------------------------------------------------
MEM = re.compile(r"activations ([0-9.]+) MiB")
big = R.write("big_model.json", {"vocab_size": V, "seq_len": 128, "n_embd": 64, "n_layer": 6,
                                  "n_head": 4})


def acts(label, ckpt):
    q = R.launch(1, ["--ds-config", config(label, 0, 1, 1, ckpt, batch=8), "--model", big,
                     "--data", data, "--steps", "1"], {"ZT_RECOMPUTE_WINDOW": "1"})
    m = MEM.search(q.stdout)
    return float(m.group(1)) if q.returncode == 0 and m else -1


a_mem, a_nv = acts("mem_ckpt", {}), acts("mem_nvme", {"offload": NV})
want = (5 - 1) * 8 * 128 * 64 * 4 / 2**20  # 5 layers recompute: 5 inputs in 1 set
R.check(a_mem > 0 and abs((a_mem - a_nv) - want) < 1e-3,
        "memory plan: activations %.3f -> %.3f MiB with the inputs on NVMe (%.3f MiB less "
        "expected: 4 of the 5 inputs of the recomputing layers have no tensor)" %
        (a_mem, a_nv, want))

# ---- bad input -------------------------------------------------------------------------------
for ckpt, text, code in (
        ({"offload": dict(NV, nvme_path=R.path("missing"))},
         "activation_checkpointing.offload.nvme_path", 2),
        ({"offload": {"device": "disk"}}, "activation_checkpointing.offload.device", 2),
        ({"cpu_checkpointing": True, "offload": {"device": "none"}}, "contradicts", 2),
        # nothing moves (window 8 of 3 layers: none recomputes): the path is checked all the same
        ({"number_checkpoints": 2, "offload": dict(NV, nvme_path=R.path("missing"))},
         "activation_checkpointing.offload.nvme_path", 2)):
    q = R.launch(1, ["--ds-config", config("bad", 0, 1, 1, ckpt), "--model", model, "--data",
                     data, "--steps", "1"],
                 {"ZT_RECOMPUTE_WINDOW": "8" if "number_checkpoints" in ckpt else "1"})
    R.check(q.returncode == code and text in q.stderr and q.stderr.count("\n") == 1,
            "%s: exit %d, one line (%s)" % (ckpt, q.returncode, q.stderr.strip()[:240]))

START = "MiB free, but this rank's swap files need"
WRITE = re.compile(r"ckpt_inputs\.swp: write at offset \d+ failed: No space left on device")


def full_run(room):
    """two ranks on a fresh small ext4 with room KiB left: each rank's swap file is 2 row
    blocks of 4 KiB (2 sequences of 16 x 32 fp32 values), plus what its directory takes; returns
    (exit code, error lines)"""
    with R.small_ext4("small", mib=2) as mnt:
        if not mnt:
            return None
        st = os.statvfs(mnt)
        with open(os.path.join(mnt, "filler"), "wb") as f:
            os.posix_fallocate(f.fileno(), 0, st.f_bavail * st.f_frsize - room * 1024)
        cfg = config("full", 1, 2, 1, {"offload": dict(NV, nvme_path=mnt)}, batch=4)
        q = R.launch(2, ["--ds-config", cfg, "--model", model, "--data", data, "--steps", "2"],
                     {"ZT_RECOMPUTE_WINDOW": "1"}, timeout=120)
        return q.returncode, [l for l in q.stderr.splitlines() if "zerotask: error" in l]


if os.geteuid() == 0 and subprocess.run(["which", "mkfs.ext4"], capture_output=True).returncode \
        == 0:
    # where the room runs out depends on the filesystem and on which rank gets there first: a
    # sweep of rooms, each of which must end in success, the start check's error, or a failed
    # write's, and some in the last (the disk filled up during the swap-outs)
    outcomes = {room: full_run(room) for room in (8, 12, 16, 20, 24)}
    writes = [r for r, o in outcomes.items() if o and o[0] == 1 and any(WRITE.search(l)
                                                                          for l in o[1])]
    clean = all(o is None or o[0] == 0 or (o[0] == 1 and o[1] and (START in o[1][0] or
                                                                     WRITE.search(o[1][0])))
                for o in outcomes.values())
    R.check(clean and writes, "disk full: every room ends in success or a one-line error at "
            "start or at the write that ran out (exit 1); rooms %s KiB ran out during the "
            "swap-outs (%s)" % (writes, {r: (o[0], o[1][:1]) if o else None
                                         for r, o in outcomes.items()}))
else:
    print("skip: a full filesystem needs root and mkfs.ext4")
sys.exit(R.finish("test_actckpt_nvme"))
