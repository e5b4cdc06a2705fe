#!/usr/bin/env python3
"""bench/gemm_bf16_vs_torch.py: zerotask's bf16 GEMM against PyTorch's (oneDNN) on the task shapes.

What it measures, per product of the bench models (zt-gemm-bench's list: the forward NN, input
gradient NT and weight gradient TN of each linear layer on one rank's row blocks, the tied
head, the attention products; small and gpt2-124M):
  ours   zt-gemm-bench --bf16 --engines ENGINE: zt_kern_gemm_bf16_c16 (bf16 A, B and C, fp32
         sums; the weight gradients add into C as their tasks do) on 1 thread, then on --threads
         pinned threads, each computing its own share of C's rows as StarPU workers would
  torch  torch.matmul on bf16 tensors of the same shapes, the transposed operands as .t() views
         of the stored ones, into a preallocated bf16 C (out=), under torch.inference_mode(),
         with torch.set_num_threads(1), then (--threads): PyTorch's own threading (OpenMP)
         splits each product, and oneDNN picks its kernel (AMX where the CPU has it)
Both sides time a product the same way: runs of 1, 2, 4, ... products until --warmup-ms is spent
(untimed), then one run of about --min-ms; the GFLOP/s are 2 M N K / time. --rounds rounds
alternate the sides (ours, every peer, ours, ...), each a fresh process; the table shows the
median over the rounds. The compute ceiling comes from zt-bf16-peak --threads N, run first: the
AMX one (TDPBF16PS in a loop), per thread and on N threads; "% ceil" is GFLOP/s over it (the
issue's target: ours at 80% or more). ours/torch is the time ratio (below 1: ours is faster).
A geomean row per model; one "gemm_bf16_vs_torch peer=..." line per peer closes the output
(for scripts).

The peers: each --peer PYTHON with torch (e.g. a virtualenv's torch 2.x; give --peer twice for
two, e.g. Debian's /usr/bin/python3 with torch 1.13); /usr/bin/python3 when none is given. The
torch side runs this file under the peer's interpreter (--torch-worker); the script itself uses
only the standard library.

Usage: bench/gemm_bf16_vs_torch.py [--peer PYTHON]... [--rounds 3] [--threads 2]
                                   [--min-ms 150] [--warmup-ms 30] [--models small,gpt2-124M]
                                   [--engine amx] [--build build]
  e.g. bench/gemm_bf16_vs_torch.py --peer /work/venv/hf/bin/python --peer /usr/bin/python3
Needs a Release build holding bench/zt-gemm-bench and bench/zt-bf16-peak (cmake -S . -B build
-DCMAKE_BUILD_TYPE=Release && cmake --build build --target zt-gemm-bench zt-bf16-peak); run on
an idle machine: both sides use every thread they are given.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = ("small", "gpt2-124M")


def torch_worker(spec):
    """(under the peer's Python) time torch.matmul on spec's shapes, on each thread count of
    spec; one JSON line per shape and thread count: {"key": [model, what], "threads": n,
    "s": seconds per product}"""
    import torch
    torch.manual_seed(1)
    warm_s, min_s = spec["warmup_ms"] / 1e3, spec["min_ms"] / 1e3
    for n in spec["threads"]:
        torch.set_num_threads(n)
        for model, what, op, M, N, K in spec["shapes"]:
            ta, tb = op == "TN", op == "NT"
            a = torch.rand(K, M) if ta else torch.rand(M, K)
            b = torch.rand(N, K) if tb else torch.rand(K, N)
            a, b = (a - 0.5).bfloat16(), (b - 0.5).bfloat16()
            opa, opb = a.t() if ta else a, b.t() if tb else b
            c = torch.empty(M, N, dtype=torch.bfloat16)
            with torch.inference_mode():
                def run(reps):
                    t0 = time.perf_counter()
                    for _ in range(reps):
                        torch.matmul(opa, opb, out=c)
                    return time.perf_counter() - t0
                spent, reps = 0.0, 1
                while True:
                    t = run(reps)
                    spent += t
                    if spent >= warm_s:
                        break
                    reps *= 2
                reps = max(1, int(math.ceil(min_s / (t / reps)))) if t > 0 else 1
                s = run(reps) / reps
            print(json.dumps({"key": [model, what], "threads": n, "s": s}), flush=True)
    return 0


def run(cmd, env, what):
    t0 = time.time()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("gemm_bf16_vs_torch: %s failed (exit %d): %s" % (what, p.returncode,
                                                                 (p.stderr or p.stdout)[-2000:]))
    return p.stdout, time.time() - t0


def kv_lines(out, prefix):
    """the key=value fields of out's lines starting with prefix + ' '"""
    return [dict(f.split("=", 1) for f in l.split()[1:] if "=" in f)
            for l in out.splitlines() if l.startswith(prefix + " ")]


def peer_version(py, env):
    try:
        p = subprocess.run([py, "-c", "import torch; print(torch.__version__)"], env=env,
                           capture_output=True, text=True)
    except OSError:
        return None
    return p.stdout.strip() if p.returncode == 0 else None


def fmt(v, spec="%.1f"):
    return "-" if v is None else spec % v


def geomean(vs):
    vs = [v for v in vs if v]
    return math.exp(sum(math.log(v) for v in vs) / len(vs)) if vs else None


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--torch-worker":
        return torch_worker(json.loads(sys.argv[2]))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--peer", action="append", default=[],
                    help="a Python with torch (repeat for several; default /usr/bin/python3)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--min-ms", type=float, default=150)
    ap.add_argument("--warmup-ms", type=float, default=30)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--engine", default=None,
                    help="our bf16 engine: amx or avx512bf16 (default: amx where available)")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"),
                    help="build directory holding bench/zt-gemm-bench and bench/zt-bf16-peak")
    a = ap.parse_args()
    if a.rounds < 1 or a.threads < 1 or a.min_ms <= 0 or a.warmup_ms < 0:
        ap.error("--rounds and --threads must be >= 1, --min-ms > 0, --warmup-ms >= 0")
    models = [m for m in a.models.split(",") if m]
    if not models or any(m not in MODELS for m in models):
        ap.error("--models: a comma list of %s, got %r" % (", ".join(MODELS), a.models))
    bench = os.path.join(a.build, "bench", "zt-gemm-bench")
    peak = os.path.join(a.build, "bench", "zt-bf16-peak")
    for f in (bench, peak):
        if not os.path.exists(f):
            sys.exit("gemm_bf16_vs_torch: %s is missing: build it first (Release; cmake --build "
                     "%s --target zt-gemm-bench zt-bf16-peak)" % (f, a.build))
    T = a.threads
    env = dict(os.environ, OMP_NUM_THREADS=str(T), OPENBLAS_NUM_THREADS="1")

    # the ceilings, first (the machine as the products will find it)
    out, _ = run([peak, "--threads", str(T)], env, "zt-bf16-peak")
    ceil = {l["engine"]: l for l in kv_lines(out, "bf16_peak")}
    usable = [e for e in ("amx", "avx512bf16") if ceil.get(e, {}).get("available") == "1"]
    if not usable:
        sys.exit("gemm_bf16_vs_torch: zt-bf16-peak finds no bf16 engine on this CPU:\n" + out)
    engine = a.engine or usable[0]
    if engine not in usable:
        sys.exit("gemm_bf16_vs_torch: engine %r is not available here (%s)"
                 % (engine, ", ".join(usable)))
    ceng = "amx" if "amx" in usable else engine  # the ceiling the figures are held against
    roof = {1: float(ceil[ceng]["gflops_1thread"]), T: float(ceil[ceng]["gflops"])}
    thr = sorted(roof)

    peers = []  # (python, name)
    for py in a.peer or ["/usr/bin/python3"]:
        v = peer_version(py, env)
        if v is None:
            print("note: %s has no torch; skipped" % py)
            continue
        name = "torch " + v
        if any(n == name for _, n in peers):
            name += " (%s)" % py
        peers.append((py, name))
    if not peers:
        sys.exit("gemm_bf16_vs_torch: no peer with torch")
    print("zerotask bf16 GEMM (%s) vs %s; threads %s; %d rounds, %g ms per figure after %g ms "
          "warm-up" % (engine, ", ".join("%s (%s)" % (n, p) for p, n in peers),
                       "/".join(map(str, thr)), a.rounds, a.min_ms, a.warmup_ms))
    print("%s ceiling (zt-bf16-peak), GFLOP/s: %s" % (ceng, ", ".join(
        "%.1f on %d thread%s" % (roof[n], n, "s" if n > 1 else "") for n in thr)))

    zcmd = [bench, "--bf16", "--engines", engine, "--threads", str(T), "--rounds", "1",
            "--min-ms", str(a.min_ms), "--warmup-ms", str(a.warmup_ms)]
    if len(models) == 1:
        zcmd += ["--model", models[0]]
    res = {}  # (side, model, what, threads) -> [GFLOP/s per round]
    shapes = None  # [(model, what, op, M, N, K)] in zt-gemm-bench's order
    for r in range(a.rounds):
        out, dt = run(zcmd, env, "zt-gemm-bench --bf16")
        took = ["zerotask %.0f s" % dt]
        rows = [l for l in kv_lines(out, "gemm_bf16") if l["model"] in models]
        if shapes is None:
            shapes = []
            for l in rows:
                s = (l["model"], l["what"], l["op"], int(l["M"]), int(l["N"]), int(l["K"]))
                if s not in shapes:
                    shapes.append(s)
            if not shapes:
                sys.exit("gemm_bf16_vs_torch: no gemm_bf16 lines from zt-gemm-bench:\n" + out)
        for l in rows:
            res.setdefault(("zerotask", l["model"], l["what"], int(l["threads"])),
                           []).append(float(l["gflops"]))
        spec = {"shapes": shapes, "threads": thr, "min_ms": a.min_ms,
                "warmup_ms": a.warmup_ms}
        for py, pname in peers:
            out, dt = run([py, os.path.abspath(__file__), "--torch-worker", json.dumps(spec)],
                          env, "%s (torch.matmul)" % pname)
            took.append("%s %.0f s" % (pname, dt))
            flop = {(s[0], s[1]): 2.0 * s[3] * s[4] * s[5] for s in shapes}
            for l in out.splitlines():
                d = json.loads(l)
                model, what = d["key"]
                res.setdefault((pname, model, what, d["threads"]),
                               []).append(flop[model, what] / d["s"] / 1e9)
        print("  round %d: %s" % (r + 1, ", ".join(took)), flush=True)
    med = {k: statistics.median(v) for k, v in res.items()}

    def pct(g, n):
        return None if g is None else 100.0 * g / roof[n]

    def ratio(z, p):  # time ratio ours / torch
        return None if z is None or p is None else p / z

    summary = []
    for _, pname in peers:
        print()
        print("zerotask %s vs %s: GFLOP/s (median of %d rounds); ours/torch: time ratio (below "
              "1: ours faster); %% ceil: of the %s ceiling (%s GFLOP/s)"
              % (engine, pname, a.rounds, ceng,
                 ", ".join("%dt %.0f" % (n, roof[n]) for n in thr)))
        cols = []
        for n in thr:
            cols += ["ours %dt" % n, "torch %dt" % n]
        cols += ["ours/torch %dt" % n for n in thr]
        for n in thr:
            cols += ["ours %%ceil %dt" % n, "torch %%ceil %dt" % n]
        print("| model | product | op | M | N | K | " + " | ".join(cols) + " |")
        print("|---|---|---|---:|---:|---:|" + "---:|" * len(cols))
        kv = ["peer=%s" % pname.replace(" ", "-"), "engine=%s" % engine, "threads=%d" % T,
              "ceiling=%s" % ceng] + ["ceiling_%dt=%.1f" % (n, roof[n]) for n in thr]
        notes = []
        for model in models:
            ms = [s for s in shapes if s[0] == model]
            if not ms:
                continue
            z = {n: [med.get(("zerotask", s[0], s[1], n)) for s in ms] for n in thr}
            p = {n: [med.get((pname, s[0], s[1], n)) for s in ms] for n in thr}
            for i, s in enumerate(ms):
                cells = []
                for n in thr:
                    cells += [fmt(z[n][i]), fmt(p[n][i])]
                cells += [fmt(ratio(z[n][i], p[n][i]), "%.2fx") for n in thr]
                for n in thr:
                    cells += [fmt(pct(z[n][i], n), "%.0f%%"), fmt(pct(p[n][i], n), "%.0f%%")]
                print("| %s | %s | %s | %d | %d | %d | %s |"
                      % (s[0], s[1], s[2], s[3], s[4], s[5], " | ".join(cells)))
            gz = {n: geomean(z[n]) for n in thr}
            gp = {n: geomean(p[n]) for n in thr}
            cells = []
            for n in thr:
                cells += [fmt(gz[n]), fmt(gp[n])]
            cells += [fmt(ratio(gz[n], gp[n]), "%.2fx") for n in thr]
            for n in thr:
                cells += [fmt(pct(gz[n], n), "%.0f%%"), fmt(pct(gp[n], n), "%.0f%%")]
            print("| %s | **geomean** | | | | | %s |" % (model, " | ".join(cells)))
            for n in thr:
                hit = sum(1 for g in z[n] if g is not None and pct(g, n) >= 80.0)
                notes.append("%s, %d thread%s: ours at >= 80%% of the %s ceiling on %d of %d "
                             "products" % (model, n, "s" if n > 1 else "", ceng, hit, len(ms)))
                kv += ["%s_ours_%dt=%s" % (model, n, fmt(gz[n])),
                       "%s_torch_%dt=%s" % (model, n, fmt(gp[n])),
                       "%s_ratio_%dt=%s" % (model, n, fmt(ratio(gz[n], gp[n]), "%.3f")),
                       "%s_ours_pct_%dt=%s" % (model, n, fmt(pct(gz[n], n))),
                       "%s_torch_pct_%dt=%s" % (model, n, fmt(pct(gp[n], n))),
                       "%s_ours_at80_%dt=%d/%d" % (model, n, hit, len(ms))]
        print("\n".join(notes))
        summary.append("gemm_bf16_vs_torch " + " ".join(kv))
    print()
    print("\n".join(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
