#!/usr/bin/env python3
"""tests/apps/run_mlp.py: the MLP example (a second model on the public API) trains: its loss
falls on a learnable byte stream; and with --checkpoint (every block recomputes its hidden
activations in the backward, from a window of one set: ZT_RECOMPUTE_WINDOW=1) it prints the
same losses, saves the same weights bit for bit and holds a third of the hidden activations.
Usage: run_mlp.py ZT_MLP_BINARY WORKDIR"""
import os, random, re, struct, subprocess, sys
exe, work = sys.argv[1], sys.argv[2]
os.makedirs(work, exist_ok=True)
rng = random.Random(3)
toks = [(i * 13 + rng.randrange(2)) % 256 for i in range(20000)]
data = os.path.join(work, "mlp.bin")
with open(data, "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, len(toks), *([0] * 253)))
    f.write(struct.pack("<%dH" % len(toks), *toks))


def run(*extra):
    out = os.path.join(work, "plain.safetensors" if not extra else "ckpt.safetensors")
    env = dict(os.environ, ZT_RECOMPUTE_WINDOW="1")
    p = subprocess.run([exe, "--data", data, "--steps", "40", "--depth", "3", "--save", out,
                        *extra], capture_output=True, text=True, timeout=300, env=env)
    print(p.stdout, p.stderr)
    if p.returncode != 0:
        sys.exit("zt-mlp-example %s: exit %d (the loss must fall)" % (" ".join(extra),
                                                                      p.returncode))
    kib = float(re.search(r"h and hg take ([0-9.]+) KiB", p.stdout).group(1))
    steps = [l for l in p.stdout.splitlines() if l.startswith("step")]
    with open(out, "rb") as f:
        return kib, steps, f.read()


kib0, steps0, w0 = run()
kib1, steps1, w1 = run("--checkpoint")
assert steps0 and steps0 == steps1, "losses differ with --checkpoint:\n%s\n%s" % (steps0, steps1)
assert w0 == w1, "the weights saved with --checkpoint differ from those without"
assert abs(kib1 * 3 - kib0) < 1e-6, "hidden activations: %.1f KiB checkpointed, %.1f without " \
    "(a third expected: 1 set for 3 blocks)" % (kib1, kib0)
print("ok: losses and weights bit-identical with --checkpoint; hidden activations %.0f -> %.0f KiB"
      % (kib0, kib1))
