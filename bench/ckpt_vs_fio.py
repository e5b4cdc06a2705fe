#!/usr/bin/env python3
"""bench/ckpt_vs_fio.py: checkpoint write bandwidth against fio, and how long a save holds training.

One rank trains a gpt2-124M-shaped model (bench/configs/gpt2-124M_*.json, ~1.5 GB of fp32
weights + exp_avg + exp_avg_sq per checkpoint) twice in the same run, under each OpenBLAS
environment (default and OPENBLAS_CORETYPE=Haswell):
  plain   --steps S, no checkpoint
  saving  --steps S --save-dir DIR/ck --save-interval 1 (keep_last 2): a save after every step,
          written in the background while the next step trains (the last one has no step after
          it to overlap)
and fio writes a file of the checkpoint's size sequentially in the same directory before and
after (bs 1M: buffered with a final fsync, as the checkpoint writes; and O_DIRECT io_uring
iodepth 8, the device's raw rate). From the trainer's progress lines ("checkpoint ... saved: X MiB
per rank written in Y ms (Z MB/s) alongside training, which it held H ms"):
  bandwidth  checkpoint MB/s (median over the saves) / fio MB/s (median of before and after),
             target >= 0.80 against the buffered fio (the same write path) and reported against
             O_DIRECT too;
  stall      the time a save held the training loop / the median step of the plain run, target
             < 5%; and the median step time of the saving run against the plain run's.

Usage: python3 bench/ckpt_vs_fio.py [--build build] [--dir /work/.bench_ckpt] [--steps 4]
       [--envs default,Haswell] [--data data/fortunes.bin] [--fio /usr/bin/fio]
DIR is removed at the end. Needs fio and a Release build (cmake --build build).
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys

from benchlib import openblas_envs

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SAVED = re.compile(r"checkpoint (\S+)/step(\d+) saved: ([0-9.]+) MiB per rank written in "
                   r"([0-9.]+) ms \(([0-9.]+) MB/s\) alongside training, which it held "
                   r"([0-9.]+) ms")


def run(cmd, what, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit("ckpt_vs_fio: %s failed (exit %d): %s" % (what, p.returncode,
                                                          (p.stderr or p.stdout)[-2000:]))
    return p.stdout


def fio_write(fio, d, nbytes):
    """MB/s of a sequential 1M write of nbytes: buffered + final fsync, and O_DIRECT io_uring"""
    path = os.path.join(d, "fio_ckpt.%d" % os.getpid())
    out = {}
    try:
        for mode, extra in (("buffered", ["--direct=0", "--ioengine=psync", "--end_fsync=1"]),
                            ("direct", ["--direct=1", "--ioengine=io_uring", "--iodepth=8"])):
            cmd = [fio, "--name=zt-ckpt-vs-fio", "--filename=" + path, "--rw=write", "--bs=1M",
                   "--size=%d" % nbytes, "--numjobs=1", "--fallocate=none",
                   "--output-format=json"] + extra
            job = json.loads(run(cmd, "fio " + mode))["jobs"][0]
            if job.get("error"):
                sys.exit("ckpt_vs_fio: fio %s: error %s" % (mode, job["error"]))
            out[mode] = job["write"]["bw_bytes"] / 1e6
            os.unlink(path)
    finally:
        if os.path.exists(path):
            os.unlink(path)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--dir", default="/work/.bench_ckpt")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--envs", default="default,Haswell")
    ap.add_argument("--data", default=os.path.join(ROOT, "data", "fortunes.bin"))
    ap.add_argument("--fio", default=shutil.which("fio") or "/usr/bin/fio")
    a = ap.parse_args()
    zt = os.path.join(a.build, "apps", "zt-train")
    if not os.path.exists(zt):
        sys.exit("ckpt_vs_fio: %s not found: build first (cmake --build build)" % zt)
    if not os.path.exists(a.fio):
        sys.exit("ckpt_vs_fio: fio not found (apt-get install fio)")
    if not os.path.exists(a.data):
        sys.exit("ckpt_vs_fio: %s not found (scripts/prepare-demo.sh makes it)" % a.data)
    if a.steps < 2:
        sys.exit("ckpt_vs_fio: --steps must be at least 2 (a save needs a step after it)")
    shutil.rmtree(a.dir, ignore_errors=True)
    os.makedirs(a.dir)
    model = os.path.join(HERE, "configs", "gpt2-124M_model.json")
    base = json.load(open(os.path.join(HERE, "configs", "gpt2-124M_ds.json")))
    ck = os.path.join(a.dir, "ck")
    cfgs = {"plain": dict(base), "saving": dict(base, checkpoint={"keep_last": 2})}
    for k, c in cfgs.items():
        cfgs[k] = os.path.join(a.dir, k + "_ds.json")
        with open(cfgs[k], "w") as f:
            json.dump(c, f)
    envs = openblas_envs(a.envs)
    fs = subprocess.run(["df", "-T", a.dir], capture_output=True, text=True).stdout.split("\n")
    print("zerotask ckpt_vs_fio: gpt2-124M shape, 1 rank, STARPU_NCPU=2, %d steps, a save after "
          "every step; fio %s in %s (%s)" % (a.steps, run([a.fio, "--version"], "fio").strip(),
                                             a.dir, fs[1].split()[1] if len(fs) > 1 else "?"))
    rows = []
    for ename, env in envs:
        env = dict(env, STARPU_NCPU="2", STARPU_SILENT="1")
        ms, saves = {}, []
        for k in ("plain", "saving"):
            log = os.path.join(a.dir, k + ".jsonl")
            cmd = [zt, "--ds-config", cfgs[k], "--model", model, "--data", a.data, "--steps",
                   str(a.steps), "--log", log]
            if k == "saving":
                shutil.rmtree(ck, ignore_errors=True)
                cmd += ["--save-dir", ck, "--save-interval", "1"]
            out = run(cmd, "zt-train " + k, env)
            with open(log) as f:
                ms[k] = [json.loads(l)["ms"] for l in f]
            if k == "saving":
                saves = [(int(m.group(2)), float(m.group(3)) * 1048576, float(m.group(4)),
                          float(m.group(6))) for m in SAVED.finditer(out)]
        if len(saves) != a.steps:
            sys.exit("ckpt_vs_fio: expected %d saves, the trainer reported %d" % (a.steps,
                                                                                len(saves)))
        nbytes = int(saves[0][1])
        fio = [fio_write(a.fio, a.dir, nbytes) for _ in range(2)]
        fio = {m: statistics.median(x[m] for x in fio) for m in fio[0]}
        bw = [b / (w * 1e3) for _, b, w, _ in saves]
        step = statistics.median(ms["plain"][1:])  # the first step warms up
        held = [h for _, _, _, h in saves[:-1]]     # saves with a step after them
        print("\nOpenBLAS env: %s" % ename)
        print("| save | MiB | write ms | MB/s | held the loop ms |")
        print("|---|---|---|---|---|")
        for (s, b, w, h), x in zip(saves, bw):
            print("| step%d%s | %.0f | %.0f | %.0f | %.1f |" % (
                s, " (last: nothing to overlap)" if s == a.steps else "", b / 1048576, w, x, h))
        mbw = statistics.median(bw)
        print("fio sequential write of %.0f MiB: buffered+fsync %.0f MB/s, O_DIRECT io_uring "
              "%.0f MB/s" % (nbytes / 1048576, fio["buffered"], fio["direct"]))
        print("checkpoint bandwidth: median %.0f MB/s = %.2f of fio buffered, %.2f of fio O_DIRECT "
              "(target >= 0.80 of the better)" % (mbw, mbw / fio["buffered"],
                                                 mbw / fio["direct"]))
        mh = statistics.median(held)
        sstep = statistics.median(ms["saving"][1:])
        print("stall: a save held the loop %.1f ms (median of %d) = %.2f%% of a %.0f ms step "
              "(target < 5%%); but the step it ran alongside took %.0f ms vs %.0f ms without "
              "saves: %.1f%% slower (its writes share the cores and the disk with training)"
              % (mh, len(held), 100 * mh / step, step, sstep, step, 100 * (sstep / step - 1)))
        best = max(fio.values())
        rows.append((ename, mbw / best, 100 * mh / step, 100 * (sstep / step - 1)))
    print("\n| OpenBLAS env | checkpoint / best fio write | loop held, % of a step | step "
          "slowdown while a save runs |")
    print("|---|---|---|---|")
    for e, r, s, d in rows:
        print("| %s | %.2f | %.2f%% | %.1f%% |" % (e, r, s, d))
    shutil.rmtree(a.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
