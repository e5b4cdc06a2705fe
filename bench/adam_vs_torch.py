#!/usr/bin/env python3
"""bench/adam_vs_torch.py: zerotask's CPU AdamW task against torch.optim.AdamW, back to back,
with a STREAM-style triad as the memory-bandwidth ceiling.

For each OpenBLAS environment (OPENBLAS_CORETYPE unset, and OPENBLAS_CORETYPE=Haswell; the peers
and we run in the same one) and each shard size P (50M and 200M fp32 parameters) it runs, one
after the other (never both at once: 200M parameters x 4 tensors = 3.2 GB per side):
  zt-adam-bench (bench/adam_bench.c): p, g, m, v as [P] zt_tensors in groups of 2^20 elements,
      one zt_task_adamw per group and step, then zt_runtime_wait_all; STARPU_NCPU=2 workers.
  each PyTorch peer (Debian's torch at /usr/bin/python3 and every --peer PYTHON):
      torch.optim.AdamW with torch.set_num_threads(2) on one flat [P] tensor and on P / 2^20
      tensors of 2^20 elements, each with foreach=False and foreach=True (and fused=True where
      the torch has a CPU fused AdamW, torch >= 2.4).
Same hyper-parameters (lr 1e-3, betas 0.9/0.999, eps 1e-8, weight decay 0.01); gradients set
once, m and v from zero. A run's figure is the median step time over STEPS steps after 2 warm-up
steps (ours: submission of every group's task + wait; torch: optimizer.step()). Effective GB/s
counts 28 bytes per parameter (read p, g, m, v; write p, m, v). The triad (a = b + s*c over 3 x
200M floats, 2 threads, best of 5; run by zt-adam-bench right after each of our AdamW runs, since
this VM's bandwidth moves with its neighbours' load) is printed both as STREAM counts it (12 B/element) and as the
traffic it causes (16 B/element: a is read into the cache before being written, a cost AdamW
does not have); "of triad" is a contender's GB/s over the triad's traffic GB/s (the target for
zerotask is >= 0.8); the ratio is zerotask's ms/step over the peer's (below 1: zerotask faster).

Usage: bench/adam_vs_torch.py [--sizes 50M,200M] [--steps 10] [--peer PYTHON]...
                              [--envs unset,haswell] [--build build]
The driver uses only the standard library; the peers run this file with --worker.
"""
import argparse
import os
import re
import statistics
import sys
import time

import benchlib  # bench/benchlib.py: median_step_ms (the peers run this file too)
from benchlib import kv

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENVS = {"unset": "OPENBLAS_CORETYPE unset", "haswell": "OPENBLAS_CORETYPE=Haswell"}
GROUP = 1 << 20
BYTES_PER_PARAM = 28


def count(s):
    mult = {"K": 10**3, "M": 10**6, "G": 10**9}
    s = s.strip().upper()
    return int(float(s[:-1]) * mult[s[-1]]) if s[-1] in mult else int(s)


# ---------------------------------------------------------------------------------------------
# peer side (runs under the peer's Python, with torch)
def worker(P, steps, warmup):
    import torch
    torch.set_num_threads(2)
    variants = [("flat", False, False), ("flat", True, False), ("1M-tensors", False, False),
                ("1M-tensors", True, False)]
    major, minor = (int(x) for x in re.match(r"(\d+)\.(\d+)", torch.__version__).groups())
    if (major, minor) >= (2, 4):
        variants += [("flat", False, True), ("1M-tensors", False, True)]
    print("torch %s threads %d" % (torch.__version__, torch.get_num_threads()), flush=True)
    for layout, foreach, fused in variants:
        if layout == "flat":
            sizes = [P]
        else:
            sizes = [GROUP] * (P // GROUP) + ([P % GROUP] if P % GROUP else [])
        params = []
        for n in sizes:
            p = torch.nn.Parameter(torch.empty(n).uniform_(-5.0, 5.0))
            p.grad = torch.empty(n).uniform_(-0.5, 0.5)
            params.append(p)
        kw = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01}
        if fused:
            kw["fused"] = True
        else:
            kw["foreach"] = foreach
        opt = torch.optim.AdamW(params, **kw)
        with torch.no_grad():
            med = benchlib.median_step_ms(opt.step, steps, warmup)
        name = "%s %s" % (layout, "fused" if fused else "foreach=%s" % foreach)
        print("peer variant=%s params=%d tensors=%d ms_per_step=%.3f params_per_s=%.4g "
              "GBps=%.3f" % (name.replace(" ", "_"), P, len(sizes), med, P / (med * 1e-3),
                             BYTES_PER_PARAM * P / (med * 1e-3) / 1e9), flush=True)
        del opt, params


# ---------------------------------------------------------------------------------------------
# driver
def run(cmd, env, what):
    return benchlib.run_or_exit("adam_vs_torch", cmd, env, what)


def make_env(e):
    env = dict(os.environ, OMP_NUM_THREADS="2", MKL_NUM_THREADS="2", OPENBLAS_NUM_THREADS="1",
               STARPU_NCPU="2", STARPU_SILENT="1")
    env.pop("OPENBLAS_CORETYPE", None)
    if e == "haswell":
        env["OPENBLAS_CORETYPE"] = "Haswell"
    return env


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="50M,200M")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--peer", action="append", default=[])
    ap.add_argument("--envs", default="unset,haswell")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--triad", default="200M")
    a = ap.parse_args()
    exe = os.path.join(a.build, "bench", "zt-adam-bench")
    if not os.access(exe, os.X_OK):
        sys.exit("adam_vs_torch: %s not found: build first (cmake --build build)" % exe)
    peers = ["/usr/bin/python3"] + a.peer
    sizes = [count(s) for s in a.sizes.split(",")]
    envs = a.envs.split(",")
    t_start = time.time()
    print("zerotask %s (zt_task_adamw, STARPU_NCPU=2, groups of %d) vs torch.optim.AdamW "
          "(set_num_threads(2)) of %s; %d steps after 2 warm-up; %d B/param"
          % (exe, GROUP, ", ".join(peers), a.steps, BYTES_PER_PARAM), flush=True)
    rows = []  # (env, P, contender, ms, params/s, GB/s)
    triads = {}
    for e in envs:
        env = make_env(e)
        for P in sizes:
            out = run([exe, "--params", str(P), "--group", str(GROUP), "--steps", str(a.steps),
                       "--triad", str(count(a.triad))], env, "zt-adam-bench")
            z = kv([l for l in out.splitlines() if l.startswith("adam_bench ")][0])
            t = kv([l for l in out.splitlines() if l.startswith("triad ")][0])
            triads[(e, P)] = (float(t["GBps"]), float(t["traffic_GBps"]))
            rows.append((e, P, "zerotask", float(z["ms_per_step"]), float(z["params_per_s"]),
                         float(z["GBps"])))
            print("  %-26s P %4dM zerotask (%s workers, %s groups): %.2f ms/step, %.3g params/s, "
                  "%.2f GB/s; triad right after: %.2f GB/s (STREAM count), %.2f GB/s traffic"
                  % (ENVS[e], P // 10**6, z["workers"], z["groups"], float(z["ms_per_step"]),
                     float(z["params_per_s"]), float(z["GBps"]), *triads[(e, P)]), flush=True)
            for py in peers:
                out = run([py, os.path.abspath(__file__), "--worker", str(P), str(a.steps), "2"],
                          env, "peer " + py)
                ver = re.search(r"^torch (\S+)", out, re.M).group(1)
                ver = ".".join(ver.split(".")[:2])
                for l in out.splitlines():
                    if l.startswith("peer "):
                        d = kv(l)
                        name = "torch %s %s" % (ver, d["variant"].replace("_", " "))
                        rows.append((e, P, name, float(d["ms_per_step"]),
                                     float(d["params_per_s"]), float(d["GBps"])))
                        print("  %-26s P %4dM %s: %.2f ms/step, %.3g params/s, %.2f GB/s"
                              % (ENVS[e], P // 10**6, name, float(d["ms_per_step"]),
                                 float(d["params_per_s"]), float(d["GBps"])), flush=True)
    print()
    print("| env | params | contender | ms/step | params/s | GB/s (28 B/param) | of triad traffic "
          "| ratio zerotask/peer time |")
    print("|---|---|---|---|---|---|---|---|")
    verdict = []
    for e in envs:
        for P in sizes:
            sel = [r for r in rows if r[0] == e and r[1] == P]
            ours = [r for r in sel if r[2] == "zerotask"][0]
            for r in sel:
                frac = r[5] / triads[(e, P)][1]
                print("| %s | %dM | %s | %.2f | %.3g | %.2f | %.2f | %s |"
                      % (ENVS[e], P // 10**6, r[2], r[3], r[4], r[5], frac,
                         "" if r is ours else "%.2fx" % (ours[3] / r[3])))
            best = min((r for r in sel if r is not ours), key=lambda r: r[3])
            verdict.append("%s, %dM: zerotask %.2f of the triad's traffic GB/s (target >= 0.8: "
                           "%s); %.2fx the time of the fastest torch (%s, %.2f ms)"
                           % (ENVS[e], P // 10**6, ours[5] / triads[(e, P)][1],
                              "yes" if ours[5] / triads[(e, P)][1] >= 0.8 else "no",
                              ours[3] / best[3], best[2], best[3]))
    print()
    for (e, P), tr in triads.items():
        print("triad (%s, after the %dM run): %.2f GB/s STREAM count, %.2f GB/s traffic"
              % (ENVS[e], P // 10**6, *tr))
    for v in verdict:
        print(v)
    print("\ntotal time %.0f s" % (time.time() - t_start))


if __name__ == "__main__":
    main()
