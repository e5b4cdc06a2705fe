#!/usr/bin/python3
"""bench/generate/make_random_export.py: a GPT-2 of a given shape with random weights, written as
`zt-train --export` writes one (safetensors, F32, Hugging Face GPT-2 names, Conv1D layouts), for
the generation benchmark when no trained export is at hand. Initialisation as zerotask's: normal
std 0.02 (output projections 0.02 / sqrt(2 n_layer)), biases 0, layer-norm weights 1.

Usage: /usr/bin/python3 bench/generate/make_random_export.py MODEL.json OUT.safetensors [--seed S]
Needs torch (Debian's python3-torch is enough)."""
import argparse
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_shape  # noqa: E402
import safetensors_io as st  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    try:
        s = gpt2_shape.load_shape(a.model)
    except (OSError, ValueError) as e:
        sys.exit("make_random_export: %s" % e)
    g = torch.Generator().manual_seed(a.seed)
    pstd = 0.02 / math.sqrt(2 * s["n_layer"])
    out = {}
    for name, shape, init in gpt2_shape.tensors(s):
        if init in ("normal", "proj"):
            t = torch.empty(shape).normal_(0.0, 0.02 if init == "normal" else pstd, generator=g)
        else:
            t = torch.full(shape, 1.0 if init == "one" else 0.0)
        out[name] = st.Tensor("F32", shape, t.contiguous().numpy().tobytes())
    st.write(a.out, out, {"format": "pt", "producer": "bench/generate/make_random_export.py"})
    print("make_random_export: %s (%d tensors, seed %d)" % (a.out, len(out), a.seed))


if __name__ == "__main__":
    main()
