#!/usr/bin/env python3
"""tests/apps/run_mlp.py: the MLP example (a second model on the public API) trains: its loss
falls on a learnable byte stream. Usage: run_mlp.py ZT_MLP_BINARY WORKDIR"""
import os, random, struct, subprocess, sys
exe, work = sys.argv[1], sys.argv[2]
os.makedirs(work, exist_ok=True)
rng = random.Random(3)
toks = [(i * 13 + rng.randrange(2)) % 256 for i in range(20000)]
data = os.path.join(work, "mlp.bin")
with open(data, "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, len(toks), *([0] * 253)))
    f.write(struct.pack("<%dH" % len(toks), *toks))
p = subprocess.run([exe, "--data", data, "--steps", "40"], capture_output=True, text=True, timeout=300)
print(p.stdout, p.stderr)
sys.exit(p.returncode)
