#!/usr/bin/env python3
"""bench/train_vs_torch.py: zt-train against PyTorch training the same GPT-2, back to back.

For each config ("small": V8192 T128 C384 L6 NH6 B8; "gpt2-124M": V50304 T256 C768 L12 NH12 B4)
and each OpenBLAS environment (as the machine has it, and OPENBLAS_CORETYPE=Haswell), it runs,
REPS times in alternation: zt-train, then every PyTorch peer (Debian's torch 1.13 at
/usr/bin/python3 and, with --peer PYTHON, e.g. a current PyTorch in a virtualenv), all from the
same safetensors initialisation, data, config and thread count. Each run's figure is the median
ms/step of its steps after 2 warm-up steps; the table shows the median over the REPS runs and
the ratio zerotask / peer (below 1: zerotask is faster). The last zerotask run of each config
also writes a trace, summarised as the share of worker time per task kind.

Usage: bench/train_vs_torch.py [--configs small,gpt2-124M] [--reps 3] [--steps 6]
                               [--threads 2] [--peer PYTHON]... [--build build] [--out DIR]
Needs a Release build (scripts/demo.sh or cmake -DCMAKE_BUILD_TYPE=Release) and data/fortunes.bin
(scripts/prepare-demo.sh); uses only the standard library itself.
"""
import argparse
import collections
import json
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ORACLE = os.path.join(ROOT, "tests", "ref", "gpt2_torch.py")
CONFIGS = {
    "small": ("bench/configs/small_model.json", "bench/configs/small_ds.json"),
    "gpt2-124M": ("bench/configs/gpt2-124M_model.json", "bench/configs/gpt2-124M_ds.json"),
}


def run(cmd, env, what):
    t0 = time.time()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("train_vs_torch: %s failed (exit %d): %s" % (what, p.returncode,
                                                             (p.stderr or p.stdout)[-2000:]))
    return p.stdout, time.time() - t0


def zt_ms(log):
    with open(log) as f:
        ms = [json.loads(l)["ms"] for l in f]
    return statistics.median(ms[2:])


def peer_ms(out):
    m = re.search(r"^ms/step ([0-9.]+)", out, re.M)
    if not m:
        sys.exit("train_vs_torch: no ms/step line from the peer:\n" + out[-1000:])
    return float(m.group(1))


def peer_version(py, env):
    p = subprocess.run([py, "-c", "import torch; print(torch.__version__)"], env=env,
                       capture_output=True, text=True)
    return p.stdout.strip() if p.returncode == 0 else None


def trace_breakdown(path, top=8):
    with open(path) as f:
        ev = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    last = max(e["args"]["step"] for e in ev)
    ev = [e for e in ev if e["args"]["step"] >= min(3, last)]
    tot = collections.Counter()
    for e in ev:
        k = e["name"]
        tot["sgemm (all matmul)" if k.startswith("matmul") and "bias" not in k else k] += e["dur"]
    busy = sum(tot.values())
    span = max(e["ts"] + e["dur"] for e in ev) - min(e["ts"] for e in ev)
    workers = len({e["tid"] for e in ev})
    lines = ["    %-24s %5.1f%%" % (k, 100.0 * v / busy) for k, v in tot.most_common(top)]
    lines.append("    workers busy %.1f%% of the wall time (%d workers)"
                 % (100.0 * busy / (span * workers), workers))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--configs", default="small,gpt2-124M")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--peer", action="append", default=[],
                    help="another Python with torch (e.g. a virtualenv's); Debian's is always run")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--data", default=os.path.join(ROOT, "data", "fortunes.bin"))
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "bench"))
    a = ap.parse_args()
    if a.steps < 3:
        ap.error("--steps must be >= 3 (2 warm-up steps are not counted)")
    zt = os.path.join(a.build, "apps", "zt-train")
    for f, how in ((zt, "build zerotask (Release)"), (a.data, "run scripts/prepare-demo.sh")):
        if not os.path.exists(f):
            sys.exit("train_vs_torch: %s is missing: %s first" % (f, how))
    os.makedirs(a.out, exist_ok=True)

    # OPENBLAS_NUM_THREADS=1: Debian's torch 1.13 calls OpenBLAS from its own intra-op
    # threads, and OpenBLAS's own thread pool on top of them oversubscribes the cores (1682 vs
    # 1141 ms/step on "small", 2 threads); zerotask sets 1 itself, torch 2 uses MKL
    base = dict(os.environ, OMP_NUM_THREADS=str(a.threads), STARPU_NCPU=str(a.threads),
                OPENBLAS_NUM_THREADS="1", STARPU_SILENT="1")
    base.pop("OPENBLAS_CORETYPE", None)
    envs = [("machine default", base), ("OPENBLAS_CORETYPE=Haswell",
                                        dict(base, OPENBLAS_CORETYPE="Haswell"))]
    peers = []
    for py in ["/usr/bin/python3"] + a.peer:
        v = peer_version(py, base)
        if v is None:
            print("note: %s has no torch; skipped" % py)
        else:
            peers.append((py, "torch " + v))
    print("zerotask %s vs %s; %d threads, %d reps x %d steps (2 warm-up)" %
          (zt, ", ".join(n for _, n in peers), a.threads, a.reps, a.steps))

    rows = []
    for cname in a.configs.split(","):
        if cname not in CONFIGS:
            sys.exit("train_vs_torch: unknown config %r (expected one of %s)"
                     % (cname, ", ".join(CONFIGS)))
        model, ds = (os.path.join(ROOT, p) for p in CONFIGS[cname])
        with open(model) as f:
            shape = json.load(f)
        init = os.path.join(a.out, cname + "_init.safetensors")
        if not os.path.exists(init):
            run(["/usr/bin/python3", ORACLE, "--model", model, "--write-init", init, "--seed",
                 "1"], base, "writing the initialisation")
        for ename, env in envs:
            res = collections.defaultdict(list)
            for r in range(a.reps):
                log = os.path.join(a.out, "%s_zt.jsonl" % cname)
                cmd = [zt, "--ds-config", ds, "--model", model, "--data", a.data, "--init-from",
                       init, "--steps", str(a.steps), "--log", log, "--quiet"]
                trace = os.path.join(a.out, "%s_trace.json" % cname)
                if r == a.reps - 1 and ename == "machine default":
                    cmd += ["--trace", trace]
                run(cmd, env, "zt-train")
                res["zerotask"].append(zt_ms(log))
                for py, pname in peers:
                    out, _ = run([py, ORACLE, "--model", model, "--ds-config", ds, "--data",
                                  a.data, "--init", init, "--steps", str(a.steps), "--dtype",
                                  "float32", "--threads", str(a.threads), "--bench"], env, pname)
                    res[pname].append(peer_ms(out))
                print("  %-10s %-26s rep %d: %s" % (cname, ename, r + 1, "  ".join(
                    "%s %.1f ms" % (k, v[-1]) for k, v in res.items())), flush=True)
            med = {k: statistics.median(v) for k, v in res.items()}
            rows.append((cname, ename, med))
            if ename == "machine default":
                print("  trace of zerotask, %s (share of worker time, steps >= 3):" % cname)
                print(trace_breakdown(trace))

    print()
    print("| config | OpenBLAS env | zerotask ms/step | peer | peer ms/step | ratio zt/peer |")
    print("|---|---|---|---|---|---|")
    for cname, ename, med in rows:
        for _, pname in peers:
            print("| %s | %s | %.1f | %s | %.1f | %.2fx |" % (
                cname, ename, med["zerotask"], pname, med[pname], med["zerotask"] / med[pname]))
    print()
    for cname in dict.fromkeys(r[0] for r in rows):
        best_peer = min((m[p], p, e) for c, e, m in rows if c == cname for _, p in peers)
        best_zt = min((m["zerotask"], e) for c, e, m in rows if c == cname)
        print("%s: zerotask best %.1f ms/step (%s), PyTorch best %.1f ms/step (%s, %s): "
              "ratio %.2fx (target <= 0.70x)" % (cname, best_zt[0], best_zt[1], best_peer[0],
                                                  best_peer[1], best_peer[2],
                                                  best_zt[0] / best_peer[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
