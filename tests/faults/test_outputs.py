#!/usr/bin/env python3
"""tests/faults/test_outputs.py: zt-train fails before any work on an output it could not write,
an output that would overwrite an input, and a model too large to size.

Cases (one rank; each exits with its code and one line within seconds, before step 1: no
progress line, no file created or changed in the work folder):
  - --export, --trace, --log and --dump-grads into a directory that does not exist, under a path
    whose parent is a file, or naming a directory: exit 1 (the file system, as for a missing
    input), the flag and the path named;
  - --save-dir (or the config's checkpoint.dir) naming a file, or under a file: exit 1;
  - an output naming an input (--export onto --data, also through another spelling of its path;
    --log onto --model; --trace onto --ds-config; --export onto --init-from) or another output
    (--log onto --export): exit 2, "is also the --data file", the input left untouched;
  - a model shape whose arrays cannot be sized (n_embd 2e9: 12 n_embd^2 overflows 64 bits;
    seq_len 2^20 with a micro-batch of 4096: the attention scores): exit 2 naming the field, its
    value and the 2^56 limit; a shape that can be sized but not held (vocab_size 1e9 x n_embd
    1e6) says how much memory and names the field of its largest part (exit 1).

Usage: test_outputs.py APPS_DIR MPIEXEC WORKDIR
"""
import hashlib
import os
import time

import faultlib as F

F.setup()
ZT = F.prog("zt-train")
base = F.tiny_run()
data = base[base.index("--data") + 1]
model = base[base.index("--model") + 1]
ds = base[base.index("--ds-config") + 1]
weights = F.path("init.safetensors")
p = F.run([ZT] + base + ["--export", weights], 120)
F.check("make --init-from weights", p is not None and p.returncode == 0,
        "exit %s" % (p.returncode if p else "(hang)"))
with open(F.path("a_file"), "w") as f:
    f.write("not a directory\n")
os.makedirs(F.path("a_dir"))


def snapshot():
    """every file under WORK with a digest of its contents"""
    out = {}
    for root, _, files in os.walk(F.WORK):
        for n in files:
            q = os.path.join(root, n)
            with open(q, "rb") as f:
                out[q] = hashlib.sha256(f.read()).hexdigest()
    return out


def early(label, args, code, words):
    """zt-train args fails with code and one line holding words, within 10 s, before step 1,
    creating or changing no file"""
    before, t0 = snapshot(), time.time()
    p = F.expect(label, [ZT] + args, code, words, timeout=60)
    if p is None:
        return
    took, after = time.time() - t0, snapshot()
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    F.check(label + " (before any work)", took < 10 and not changed and "step" not in p.stdout,
            "%.1f s, files created or changed: %s" % (took, changed))


missing = F.path("no_such_dir/out")
under_file = F.path("a_file/out")
for flag in ("--export", "--trace", "--log", "--dump-grads"):
    early("%s into a missing directory" % flag, base + [flag, missing], 1,
          [flag, missing, "does not exist"])
    early("%s under a file" % flag, base + [flag, under_file], 1,
          [flag, under_file, "is not a directory"])
    early("%s naming a directory" % flag, base + [flag, F.path("a_dir")], 1,
          [flag, F.path("a_dir"), "is a directory"])
early("--save-dir naming a file", base + ["--save-dir", F.path("a_file")], 1,
      ["--save-dir", F.path("a_file"), "is not a directory"])
early("--save-dir under a file", base + ["--save-dir", F.path("a_file/ckpt/x")], 1,
      ["--save-dir", F.path("a_file/ckpt/x"), "is not a directory"])
ds_ckpt = F.write_json("ds_ckpt.json", {"train_batch_size": 2,
                                        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
                                        "checkpoint": {"dir": F.path("a_file/ckpt")}})
early("checkpoint.dir under a file", F.with_arg(base, "--ds-config", ds_ckpt), 1,
      ["checkpoint.dir", F.path("a_file/ckpt"), "is not a directory"])

# outputs onto inputs, and onto each other
other_spelling = os.path.join(F.WORK, "a_dir", "..", os.path.basename(data))
early("--export onto --data", base + ["--export", data], 2,
      ["--export", data, "is also the --data file"])
early("--export onto --data (another spelling)", base + ["--export", other_spelling], 2,
      ["--export", other_spelling, "is also the --data file"])
early("--log onto --model", base + ["--log", model], 2, ["--log", model, "is also the --model"])
early("--trace onto --ds-config", base + ["--trace", ds], 2,
      ["--trace", ds, "is also the --ds-config"])
early("--export onto --init-from", base + ["--init-from", weights, "--export", weights], 2,
      ["--export", weights, "is also the --init-from"])
out = F.path("out.safetensors")
early("--log onto --export", base + ["--export", out, "--log", out], 2,
      ["--log", out, "is also the --export"])

# model sizes
big_embd = F.write_json("m_embd.json", {"vocab_size": 64, "seq_len": 8, "n_embd": 2000000000,
                                        "n_layer": 1, "n_head": 2})
early("n_embd 2e9", F.with_arg(base, "--model", big_embd), 2,
      ["model shape", big_embd, "n_embd", "2000000000", "2^56"])
long_seq = F.write_json("m_seq.json", {"vocab_size": 64, "seq_len": 1 << 20, "n_embd": 16,
                                       "n_layer": 64, "n_head": 1})
ds_micro = F.write_json("ds_micro.json", {"train_batch_size": 4096,
                                          "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}})
early("seq_len 2^20, micro-batch 4096",
      F.with_arg(F.with_arg(base, "--model", long_seq), "--ds-config", ds_micro), 2,
      ["model shape", long_seq, "seq_len", "1048576", "with a micro-batch of 4096", "2^56"])
wide = F.write_json("m_wide.json", {"vocab_size": 1000000000, "seq_len": 8, "n_embd": 1000000,
                                    "n_layer": 1, "n_head": 2})
early("vocab_size 1e9 x n_embd 1e6", F.with_arg(base, "--model", wide), 1,
      ["model", wide, "GiB of host memory", "vocab_size 1000000000"])
F.finish()
