#!/usr/bin/env python3
"""bench/train_vs_torch.py: zt-train against PyTorch training the same GPT-2, back to back.

For each config ("small": V8192 T128 C384 L6 NH6 B8; "gpt2-124M": V50304 T256 C768 L12 NH12 B4)
and each OpenBLAS environment (as the machine has it, and OPENBLAS_CORETYPE=Haswell), it runs,
REPS times in alternation: zt-train, then every PyTorch peer (Debian's torch 1.13 at
/usr/bin/python3 and, with --peer PYTHON, e.g. a current PyTorch in a virtualenv), all from the
same safetensors initialisation, data, config and thread count, in each precision of
--precisions (the order rotating with the rep):
  fp32  zt-train with the config's ds json; the peer in float32
  bf16  zt-train with that json plus "bf16": {"enabled": true} (written to --out); the peer
        under torch.autocast("cpu", dtype=torch.bfloat16) (gpt2_torch.py --autocast bf16:
        fp32 master weights and AdamW, the forward's matmuls in bf16), skipped with a printed
        reason for a peer whose torch cannot autocast to bf16 on the CPU
A peer runs at its best (gpt2_torch.py --bench: multi-tensor AdamW, fused
scaled_dot_product_attention where its torch has it). Each run's figure is the median ms/step
of its steps after 2 warm-up steps; the table shows the median over the REPS runs and the
ratios zerotask / peer (below 1: zerotask is faster) and zerotask bf16 / fp32. The last
zerotask run of each config and precision also writes a trace, summarised as the share of
worker time per task kind. One "train_vs_torch config=..." line per config closes the output
(best of each side over environments and peers; for scripts).

Usage: bench/train_vs_torch.py [--configs small,gpt2-124M] [--precisions fp32,bf16] [--reps 3]
                               [--steps 6] [--threads 2] [--peer PYTHON]... [--build build]
                               [--out DIR]
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


# a forward and backward of the ops gpt2_torch.py uses, under CPU autocast to bf16: prints
# "ok SDPA" (SDPA: 1 when the fused attention exists) or exits 1 with the reason
BF16_PROBE = r"""
import sys, torch, torch.nn.functional as F
sdpa = int(hasattr(F, "scaled_dot_product_attention"))
try:
    w = torch.randn(16, 16, requires_grad=True)
    x = torch.randn(2, 4, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        h = F.gelu(F.layer_norm(x, (16,)) @ w, approximate="tanh")
        q = h.view(2, 4, 2, 8).transpose(1, 2)
        if sdpa:
            a = F.scaled_dot_product_attention(q, q, q, is_causal=True)
        else:
            a = q @ q.transpose(-2, -1)
        y = h @ w
        loss = F.cross_entropy(y.reshape(8, 16), torch.zeros(8, dtype=torch.long)) + a.float().sum()
    if y.dtype != torch.bfloat16:
        sys.exit("autocast left the matmul in %s" % y.dtype)
    loss.backward()
except Exception as e:
    sys.exit("%s: %s" % (type(e).__name__, e))
print("ok", sdpa)
"""


def peer_bf16(py, env):
    """(True, has fused attention) when py's torch autocasts to bf16 on the CPU, else (False,
    the reason)"""
    p = subprocess.run([py, "-c", BF16_PROBE], env=env, capture_output=True, text=True)
    if p.returncode == 0 and p.stdout.startswith("ok"):
        return True, p.stdout.split()[1] == "1"
    return False, ((p.stderr or p.stdout).strip().splitlines() or ["exit %d" % p.returncode])[-1]


def bf16_ds(ds, out, cname):
    """the config's ds json with "bf16": {"enabled": true}, written to out; its path"""
    with open(ds) as f:
        cfg = json.load(f)
    cfg.pop("fp16", None)
    cfg.pop("bfloat16", None)
    cfg["bf16"] = {"enabled": True}
    path = os.path.join(out, cname + "_bf16_ds.json")
    with open(path, "w") as f:
        json.dump(cfg, f, indent=1)
        f.write("\n")
    return path


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


def fmt(v, spec="%.1f"):
    return "-" if v is None else spec % v


def ratio(a, b):
    return None if a is None or b is None else a / b


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--configs", default="small,gpt2-124M")
    ap.add_argument("--precisions", default="fp32,bf16",
                    help="comma list of fp32 and bf16 (default both)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--peer", action="append", default=[],
                    help="another Python with torch (e.g. a virtualenv's); Debian's is always run")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"),
                    help="build directory holding apps/zt-train (default: build)")
    ap.add_argument("--data", default=os.path.join(ROOT, "data", "fortunes.bin"))
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "bench"))
    a = ap.parse_args()
    if a.steps < 3:
        ap.error("--steps must be >= 3 (2 warm-up steps are not counted)")
    precs = list(dict.fromkeys(p for p in a.precisions.split(",") if p))
    if not precs or any(p not in ("fp32", "bf16") for p in precs):
        ap.error("--precisions: a comma list of fp32 and bf16, got %r" % a.precisions)
    cnames = a.configs.split(",")
    for cname in cnames:
        if cname not in CONFIGS:
            sys.exit("train_vs_torch: unknown config %r (expected one of %s)"
                     % (cname, ", ".join(CONFIGS)))
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
    peers = []  # (python, name, runs bf16)
    for py in ["/usr/bin/python3"] + a.peer:
        v = peer_version(py, base)
        if v is None:
            print("note: %s has no torch; skipped" % py)
            continue
        name, bf16 = "torch " + v, False
        if any(n == name for _, n, _ in peers):
            name += " (%s)" % py  # two Pythons with one torch version: keep their figures apart
        label = name if py in name else "%s (%s)" % (name, py)
        if "bf16" in precs:
            bf16, why = peer_bf16(py, base)
            if bf16:
                print("note: %s: bf16 under torch.autocast(\"cpu\"), attention %s"
                      % (label, "fused (scaled_dot_product_attention)" if why else
                         "explicit (this torch has no scaled_dot_product_attention)"))
            else:
                print("note: %s: bf16 skipped: torch.autocast(\"cpu\", "
                      "dtype=torch.bfloat16) failed: %s" % (label, why))
        peers.append((py, name, bf16))
    print("zerotask %s vs %s; %s; %d threads, %d reps x %d steps (2 warm-up)" %
          (zt, ", ".join(n for _, n, _ in peers), "+".join(precs), a.threads, a.reps, a.steps))

    rows = []  # (config, env, {(precision, side): median ms/step})
    for cname in cnames:
        model, ds = (os.path.join(ROOT, p) for p in CONFIGS[cname])
        dsfile = {"fp32": ds}
        if "bf16" in precs:
            dsfile["bf16"] = bf16_ds(ds, a.out, cname)
        init = os.path.join(a.out, cname + "_init.safetensors")
        if not os.path.exists(init):
            run(["/usr/bin/python3", ORACLE, "--model", model, "--write-init", init, "--seed",
                 "1"], base, "writing the initialisation")
        traces = {}
        for ename, env in envs:
            res = collections.defaultdict(list)
            for r in range(a.reps):
                for prec in precs[r % len(precs):] + precs[:r % len(precs)]:
                    log = os.path.join(a.out, "%s_%s_zt.jsonl" % (cname, prec))
                    cmd = [zt, "--ds-config", dsfile[prec], "--model", model, "--data", a.data,
                           "--init-from", init, "--steps", str(a.steps), "--log", log,
                           "--quiet"]
                    if r == a.reps - 1 and ename == "machine default":
                        traces[prec] = os.path.join(a.out, "%s_%s_trace.json" % (cname, prec))
                        cmd += ["--trace", traces[prec]]
                    run(cmd, env, "zt-train (%s)" % prec)
                    res[prec, "zerotask"].append(zt_ms(log))
                    for py, pname, bf16 in peers:
                        if prec == "bf16" and not bf16:
                            continue
                        cmd = [py, ORACLE, "--model", model, "--ds-config", ds, "--data",
                               a.data, "--init", init, "--steps", str(a.steps), "--dtype",
                               "float32", "--threads", str(a.threads), "--bench"]
                        if prec == "bf16":
                            cmd += ["--autocast", "bf16"]
                        out, _ = run(cmd, env, "%s (%s)" % (pname, prec))
                        res[prec, pname].append(peer_ms(out))
                print("  %-10s %-26s rep %d: %s" % (cname, ename, r + 1, "  ".join(
                    "%s %s %.1f ms" % (k[1], k[0], v[-1]) for k, v in res.items())), flush=True)
            med = {k: statistics.median(v) for k, v in res.items()}
            rows.append((cname, ename, med))
            if ename == "machine default":
                for prec in precs:
                    print("  trace of zerotask %s, %s (share of worker time, steps >= 3):"
                          % (prec, cname))
                    print(trace_breakdown(traces[prec]))

    print()
    print("ms/step (median over the reps); ratios below 1: the first is faster")
    print("| config | OpenBLAS env | peer | zt fp32 | peer fp32 | zt/peer fp32 | zt bf16 | "
          "peer bf16 | zt/peer bf16 | zt bf16/zt fp32 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for cname, ename, med in rows:
        z32, zbf = med.get(("fp32", "zerotask")), med.get(("bf16", "zerotask"))
        for _, pname, _ in peers:
            p32, pbf = med.get(("fp32", pname)), med.get(("bf16", pname))
            print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                cname, ename, pname, fmt(z32), fmt(p32), fmt(ratio(z32, p32), "%.2fx"),
                fmt(zbf), fmt(pbf), fmt(ratio(zbf, pbf), "%.2fx"),
                fmt(ratio(zbf, z32), "%.2fx")))
    print()
    summary = []
    for cname in cnames:
        kv = ["config=%s" % cname]
        best = {}
        for prec in precs:
            zs = [(m[prec, "zerotask"], e) for c, e, m in rows if c == cname]
            ps = [(m[prec, p], p, e) for c, e, m in rows if c == cname
                  for _, p, _ in peers if (prec, p) in m]
            bz = min(zs)
            bp = min(ps) if ps else None
            best[prec] = bz[0]
            kv += ["zt_%s_ms=%.1f" % (prec, bz[0])]
            if bp is None:
                print("%s %s: zerotask best %.1f ms/step (%s); no peer ran %s"
                      % (cname, prec, bz[0], bz[1], prec))
                continue
            kv += ["peer_%s_ms=%.1f" % (prec, bp[0]),
                   "peer_%s=%s" % (prec, bp[1].replace(" ", "-")),
                   "ratio_%s=%.3f" % (prec, bz[0] / bp[0])]
            print("%s %s: zerotask best %.1f ms/step (%s), PyTorch best %.1f ms/step (%s, %s): "
                  "ratio %.2fx%s" % (cname, prec, bz[0], bz[1], bp[0], bp[1], bp[2],
                                     bz[0] / bp[0],
                                     " (target <= 0.70x)" if prec == "fp32" else ""))
        if "fp32" in best and "bf16" in best:
            kv.append("zt_bf16_over_fp32=%.3f" % (best["bf16"] / best["fp32"]))
            print("%s: zerotask bf16 / fp32 (best of each) %.2fx"
                  % (cname, best["bf16"] / best["fp32"]))
        summary.append("train_vs_torch " + " ".join(kv))
    print()
    print("\n".join(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
