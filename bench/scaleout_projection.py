#!/usr/bin/env python3
"""bench/scaleout_projection.py: the scale-out projection of docs/traces.md, regenerated.

Records one trace per ZeRO stage (0-3) of the same model on 2 ranks (STARPU_NCPU=1 each), then
`zt-trace project` replays each as one of N = 8..1024 ranks, one rank per node, collectives as
alpha-beta ring collectives (--alpha-us, --bw-gbs), and prints the table (step time, exposed
communication share, communication volume, tokens/s, memory per rank) and draws the plot.

Usage: python3 bench/scaleout_projection.py [--build build] [--model M] [--steps 3]
           [--alpha-us 10] [--bw-gbs 12.5] [--plot docs/img/scaleout.png]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--model", default=os.path.join(HERE, "configs", "small_model.json"))
    ap.add_argument("--data", default=os.path.join(ROOT, "data", "fortunes.bin"))
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--alpha-us", default="10")
    ap.add_argument("--bw-gbs", default="12.5")
    ap.add_argument("--plot", default=os.path.join(ROOT, "docs", "img", "scaleout.png"))
    args = ap.parse_args()
    zt = os.path.join(args.build, "apps", "zt-train")
    ztt = os.path.join(args.build, "apps", "zt-trace")
    with open(os.path.join(ROOT, "configs", "demo_zero2_ds.json")) as f:
        base = json.load(f)
    base.pop("scheduler", None)
    traces = []
    with tempfile.TemporaryDirectory() as work:
        for stage in range(4):
            ds = dict(base, train_batch_size=2 * base["train_micro_batch_size_per_gpu"])
            ds["zero_optimization"] = dict(base["zero_optimization"], stage=stage)
            p = os.path.join(work, "ds%d.json" % stage)
            with open(p, "w") as f:
                json.dump(ds, f)
            tr = os.path.join(work, "stage%d.json" % stage)
            cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", "-x",
                   "STARPU_NCPU=1", zt, "--ds-config", p, "--model", args.model, "--data",
                   args.data, "--steps", str(args.steps), "--trace", tr, "--quiet"]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit("zt-train stage %d failed: %s" % (stage, r.stderr[-2000:]))
            traces.append(tr[:-5] + ".ztr")
        r = subprocess.run([ztt, "project"] + traces + ["--alpha-us", args.alpha_us, "--bw-gbs",
                                                        args.bw_gbs, "--plot", args.plot],
                           capture_output=True, text=True)
        sys.stdout.write(r.stdout)
        if r.returncode != 0:
            sys.exit(r.stderr)


if __name__ == "__main__":
    main()
