#!/usr/bin/env python3
"""bench/ckpt_vs_fio.py: checkpoint write bandwidth against fio, and how long a save holds training.

One rank trains a gpt2-124M-shaped model (bench/configs/gpt2-124M_*.json, ~1.5 GB of fp32
weights + exp_avg + exp_avg_sq per checkpoint) under each OpenBLAS environment (default and
OPENBLAS_CORETYPE=Haswell), --reps times in turn:
  plain   --steps S, no checkpoint (the step time everything is compared with)
  fio     the same run, and once its first step is logged fio writes a file of the checkpoint's
          size sequentially in the same directory while it trains (bs 1M, a final fsync as a
          checkpoint's: O_DIRECT io_uring iodepth 8, then buffered)
  saving  --steps S --save-dir DIR/ck --save-interval 1 (keep_last 2): a save after every step,
          written in the background while the next step trains; the last one has no step after
          it to overlap
  alone   the same two fio writes with nothing else running.
This VM's disk moves from ~0.6 to ~1.8 GB/s within minutes, so each condition is compared with
fio under the same condition, in the same repetition; the saving run and the fio runs take turns
going first (even repetitions save first), and each starts on a settled disk (sync, 3 s: ext4's
discard trims a deleted file's blocks after the unlink):
  bandwidth  checkpoint MB/s / the better fio MB/s, target >= 0.80: saves alongside training
             against fio alongside training, the last save against fio alone (medians over the
             repetitions);
  stall      the time a save held the training loop / the plain run's median step, target
             < 5%; and how much slower the steps are while a save, or fio, writes.
From the trainer's progress lines ("checkpoint ... saved: X MiB per rank written in Y ms (Z MB/s)
alongside training, which it held H ms") and --log.

Usage: python3 bench/ckpt_vs_fio.py [--build build] [--dir /work/.bench_ckpt] [--steps 3]
       [--reps 2] [--envs default,Haswell] [--data data/fortunes.bin] [--fio /usr/bin/fio]
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
import time

from benchlib import openblas_envs, settle

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
    """MB/s of a sequential 1M write of nbytes, durable as a checkpoint's (a final fsync): O_DIRECT
    io_uring, and buffered"""
    path = os.path.join(d, "fio_ckpt.%d" % os.getpid())
    out = {}
    try:
        for mode, extra in (("direct", ["--direct=1", "--ioengine=io_uring", "--iodepth=8",
                                       "--end_fsync=1"]),
                            ("buffered", ["--direct=0", "--ioengine=psync", "--end_fsync=1"])):
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


def train(cmd, env, log, fio=None):
    """run the trainer; with fio=(fio, dir, nbytes), fio writes once its first step is logged.
    Returns (stdout, step ms list, fio MB/s or None, the steps fio overlapped)"""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    bw, during = None, []
    if fio:
        while p.poll() is None and not (os.path.exists(log) and open(log).read().count("\n")):
            time.sleep(0.05)
        if p.poll() is None:
            n0 = open(log).read().count("\n")
            bw = fio_write(*fio)
            n1 = open(log).read().count("\n")
            if p.poll() is not None:
                sys.exit("ckpt_vs_fio: training ended before fio did: raise --steps")
            during = list(range(n0, n1 + 1))  # steps (0-based) that ran while fio wrote
    out, err = p.communicate()
    if p.returncode != 0:
        sys.exit("ckpt_vs_fio: zt-train failed (exit %d): %s" % (p.returncode,
                                                                 (err or out)[-2000:]))
    with open(log) as f:
        ms = [json.loads(l)["ms"] for l in f]
    return out, ms, bw, during


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--dir", default="/work/.bench_ckpt")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--reps", type=int, default=2)
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
    med = statistics.median
    for ename, env in envs:
        env = dict(env, STARPU_NCPU="2", STARPU_SILENT="1")
        r = {k: [] for k in ("step", "fio_step", "save_step", "fio_train", "fio_alone",
                             "save_train", "save_last", "held")}
        nbytes = None  # a checkpoint's size, from the first save
        for rep in range(a.reps):
            def cmd(k, steps):
                log = os.path.join(a.dir, k + ".jsonl")
                if os.path.exists(log):
                    os.unlink(log)
                return [zt, "--ds-config", cfgs["saving" if k == "saving" else "plain"],
                        "--model", model, "--data", a.data, "--steps", str(steps), "--log",
                        log], log
            c, log = cmd("plain", a.steps)
            _, ms, _, _ = train(c, env, log)
            r["step"] += ms[1:]  # the first step warms up

            def saving():
                shutil.rmtree(ck, ignore_errors=True)
                settle()
                c, log = cmd("saving", a.steps)
                out, ms, _, _ = train(c + ["--save-dir", ck, "--save-interval", "1"], env, log)
                saves = [(int(m.group(2)), float(m.group(3)) * 1048576, float(m.group(4)),
                          float(m.group(6))) for m in SAVED.finditer(out)]
                if len(saves) != a.steps:
                    sys.exit("ckpt_vs_fio: expected %d saves, the trainer reported %d" % (
                        a.steps, len(saves)))
                shutil.rmtree(ck, ignore_errors=True)
                bw = [b / (w * 1e3) for _, b, w, _ in saves]
                r["save_train"] += bw[:-1]
                r["save_last"].append(bw[-1])
                r["held"] += [h for _, _, _, h in saves[:-1]]
                r["save_step"] += ms[1:]
                return int(saves[0][1]), bw

            def fio_runs(nbytes):
                settle()
                c, log = cmd("fio", a.steps + 3)
                _, ms, fbw, during = train(c, env, log, (a.fio, a.dir, nbytes))
                r["fio_train"].append(max(fbw.values()))
                r["fio_step"] += [ms[i] for i in during if 0 < i < len(ms)]
                settle()
                r["fio_alone"].append(max(fio_write(a.fio, a.dir, nbytes).values()))

            # the disk's state drifts within minutes: each side goes first in every other
            # repetition, and each write starts on a settled disk
            if rep % 2 == 0 or nbytes is None:
                nbytes, bw = saving()
                fio_runs(nbytes)
            else:
                fio_runs(nbytes)
                nbytes, bw = saving()
            print("%s, repetition %d: saves %s MB/s (the last alone); fio %.0f MB/s alongside "
                  "training, %.0f alone (the better of O_DIRECT and buffered)" % (
                      ename, rep + 1, ", ".join("%.0f" % x for x in bw), r["fio_train"][-1],
                      r["fio_alone"][-1]), flush=True)
        m = {k: med(v) for k, v in r.items()}
        step = m["step"]
        print("\nOpenBLAS env: %s (%.0f MiB per checkpoint, medians of %d repetitions)" % (
            ename, nbytes / 1048576, a.reps))
        print("| while | checkpoint MB/s | fio MB/s | ratio (target >= 0.80) |")
        print("|---|---|---|---|")
        print("| the next step trains | %.0f | %.0f | %.2f |" % (
            m["save_train"], m["fio_train"], m["save_train"] / m["fio_train"]))
        print("| nothing else runs (the last save) | %.0f | %.0f | %.2f |" % (
            m["save_last"], m["fio_alone"], m["save_last"] / m["fio_alone"]))
        print("stall: a save held the loop %.1f ms = %.2f%% of a %.0f ms step (target < 5%%); "
              "steps with a save writing took %.0f ms (+%.1f%%), with fio writing %.0f ms "
              "(+%.1f%%): the writes share the cores and the disk with training" % (
                  m["held"], 100 * m["held"] / step, step, m["save_step"],
                  100 * (m["save_step"] / step - 1), m["fio_step"],
                  100 * (m["fio_step"] / step - 1)))
        rows.append((ename, m["save_train"] / m["fio_train"], m["save_last"] / m["fio_alone"],
                     100 * m["held"] / step, 100 * (m["save_step"] / step - 1),
                     100 * (m["fio_step"] / step - 1)))
    print("\n| OpenBLAS env | save / fio, while training | last save / fio alone | loop held, "
          "% of a step | step slowdown: save | step slowdown: fio |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print("| %s | %.2f | %.2f | %.2f%% | %.1f%% | %.1f%% |" % row)
    shutil.rmtree(a.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
