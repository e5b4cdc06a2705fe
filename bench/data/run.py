#!/usr/bin/env python3
"""bench/data/run.py: zt-train's data loading overhead per step against the step time, for a
blend of 3 shuffled token files and for one file in linear order (the step rule).

The data: 3 token files in llm.c's format (256 int32 header: magic 20240520, version 1, count;
then uint16 tokens), --sizes tokens each (default 8M, 5M, 3M), of random ids drawn uniformly
from 0..min(50257, the model's vocab)-1 with Python's random.Random(--seed + file index):
reproducible, the same bytes for the same seed and sizes. Random ids cost the loader what text
ids do (a pread of the rows and a check of every id); the loss is meaningless.

Each round, alternating the order (A B, then B A, ...), zt-train runs --steps steps with
--trace and --log:
  A  blend    --data W1:a.bin,W2:b.bin,W3:c.bin --data-order shuffle (weights --weights): the
              sampler plans each step's rows on the host, load_batch tasks pread them, and the
              next step's rows go to posix_fadvise(WILLNEED) right after the step is submitted;
  B  linear   --data a.bin (one file in linear order: the step rule, the old path).
Step 1 is warm-up and left out. Per step (from the log) the step time "ms", and (from the trace,
the X events of args.kind load_batch of that args.step and rank):
  load     the sum of the load_batch tasks' durations (worker time);
  exposed  the wall time during which a load_batch task runs and no other task of the same rank
           does (the union of the load_batch intervals less the union of every other task's):
           time the data loading stands alone on the step's critical path;
  gap      from the end of the previous step's last task to this step's first task start: host
           time between steps with no task running (the sampler's planning, the read-ahead
           calls, the submission, reading back the loss), which the trace does not attribute.
Each run line also gives the load_batch tasks per step, their median and longest duration, and
the KiB they write (int32 inputs + targets; the file bytes read are half that plus one token a
row). The load figures are checked against zt-trace summary --json's data_ms of each step.
A run's figure is the median over its steps; a variant's, the median over its rounds. Prints
each run, per variant: step ms, load ms, exposed ms, load/step and exposed/step in %, the A/B
step-time ratio, and a verdict against the target (blend + shuffle: data loading under 1% of the
step time, i.e. load/step < 1%, hence exposed/step < 1% too). --json writes the summary.

--small uses configs/demo_model.json + configs/demo_ds.json (V256 T64 C128 L4, batch 16 = 8 x 2
micro-batches) and files of 800K/500K/300K tokens: seconds, a smoke test. The default is
gpt2-124M (bench/configs/gpt2-124M_model.json + gpt2-124M_ds.json: V50304 T256 C768 L12, batch 4,
as bench/train_vs_torch.py), about 5 s a step on this project's 2-core VM.
--cold drops the page cache before each run (root only; else it does nothing): the files are
otherwise in memory, having just been written.

Usage: bench/data/run.py [--small] [--rounds 3] [--steps 6] [--sizes 8M,5M,3M]
           [--weights 0.5,0.3,0.2] [--seed 1] [--ncpu 2] [--cold] [--zt build/apps/zt-train]
           [--work /tmp/zt-bench-data] [--json OUT]
"""
import argparse
import bisect
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
ROOT = os.path.dirname(BENCH)
sys.path.insert(0, BENCH)
import benchlib  # noqa: E402  bench/benchlib.py: drop_caches, lscpu_flags

GPT2_VOCAB = 50257
CONFIGS = {"gpt2-124M": (os.path.join(BENCH, "configs", "gpt2-124M_model.json"),
                         os.path.join(BENCH, "configs", "gpt2-124M_ds.json"), "8M,5M,3M", 6, 3),
           "small": (os.path.join(ROOT, "configs", "demo_model.json"),
                     os.path.join(ROOT, "configs", "demo_ds.json"), "800K,500K,300K", 4, 2)}
TARGET_PCT = 1.0


def count(text):
    """8M, 500K, 1000 -> tokens"""
    mult = {"K": 10**3, "M": 10**6, "G": 10**9}.get(text[-1:].upper(), 1)
    return int(float(text[:-1] if mult > 1 else text) * mult)


# ----------------------------------------------------------------------------
# the trace

def merge(iv):
    """sorted disjoint union of [start, end) intervals"""
    out = []
    for a, b in sorted(iv):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def covered(a, b, union, starts):
    """length of [a, b) covered by the sorted disjoint union (starts: its start times)"""
    i = max(bisect.bisect_right(starts, a) - 1, 0)
    s = 0.0
    while i < len(union) and union[i][0] < b:
        x, y = union[i]
        if y > a:
            s += min(b, y) - max(a, x)
        i += 1
    return s


def trace_steps(path):
    """{(rank, step): {load_ms, exposed_ms, gap_ms, ntasks, task_us (list), bytes}} from a
    zt-train Chrome trace"""
    with open(path) as f:
        ev = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    by_rank = {}
    for e in ev:
        by_rank.setdefault(e["args"]["rank"], []).append(e)
    out = {}
    for rank, tasks in by_rank.items():
        others = merge([[e["ts"], e["ts"] + e["dur"]] for e in tasks
                        if e["args"]["kind"] != "load_batch"])
        starts = [x for x, _ in others]
        steps = sorted({e["args"]["step"] for e in tasks if e["args"]["step"] >= 1})
        first = {s: min(e["ts"] for e in tasks if e["args"]["step"] == s) for s in steps}
        last = {s: max(e["ts"] + e["dur"] for e in tasks if e["args"]["step"] == s)
                for s in steps}
        for s in steps:
            loads = [e for e in tasks if e["args"]["step"] == s and
                     e["args"]["kind"] == "load_batch"]
            union = merge([[e["ts"], e["ts"] + e["dur"]] for e in loads])
            exposed = sum((b - a) - covered(a, b, others, starts) for a, b in union)
            out[(rank, s)] = {
                "load_ms": sum(e["dur"] for e in loads) / 1e3,
                "exposed_ms": exposed / 1e3,
                "gap_ms": (first[s] - last[s - 1]) / 1e3 if s - 1 in last else None,
                "span_ms": (last[s] - first[s]) / 1e3,
                "ntasks": len(loads),
                "task_us": [e["dur"] for e in loads],
                "bytes": sum(e["args"].get("bytes_written", 0) for e in loads)}
    return out


# ----------------------------------------------------------------------------
# the runs

def run_variant(a, name, data_args, tag):
    d = os.path.join(a.work, tag)
    os.makedirs(d, exist_ok=True)
    log, trace = os.path.join(d, "log.jsonl"), os.path.join(d, "trace.json")
    cmd = [a.zt, "--ds-config", a.ds, "--model", a.model] + data_args + [
        "--steps", str(a.steps), "--log", log, "--trace", trace]
    env = dict(os.environ, STARPU_NCPU=str(a.ncpu))
    if a.cold:
        benchlib.drop_caches()
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit("bench/data: zt-train (%s) failed (exit %d): %s\n  %s" % (
            name, p.returncode, (p.stderr or p.stdout)[-2000:], " ".join(cmd)))
    with open(log) as f:
        ms = {r["step"]: r["ms"] for r in map(json.loads, f) if r.get("step", 0) >= 1}
    tr = trace_steps(trace)
    steps = [s for s in sorted(ms) if s >= 2]
    rows = []
    for s in steps:
        t = tr.get((0, s))
        if t is None:
            sys.exit("bench/data: %s: step %d is in the log but not in the trace" % (trace, s))
        rows.append(dict(t, step=s, step_ms=ms[s]))
    data_line = next((l for l in p.stdout.splitlines() if l.startswith("data:")), "")
    # cross-check: zt-trace summary's data_ms (load_batch time per step window) against ours
    check = None
    zt_trace = os.path.join(os.path.dirname(a.zt), "zt-trace")
    if os.access(zt_trace, os.X_OK):
        q = subprocess.run([zt_trace, "summary", trace, "--json"], capture_output=True, text=True)
        if q.returncode == 0:
            theirs = {x["step"]: x["data_ms"] for x in json.loads(q.stdout)["steps"]
                      if x["rank"] == 0}
            check = max(abs(theirs.get(r["step"], float("inf")) - r["load_ms"]) for r in rows)
    med = lambda k: statistics.median(r[k] for r in rows)  # noqa: E731
    gaps = [r["gap_ms"] for r in rows if r["gap_ms"] is not None]
    return {"variant": name, "dir": d, "wall_s": wall, "data_line": data_line,
            "steps": [{k: v for k, v in r.items() if k != "task_us"} for r in rows],
            "step_ms": med("step_ms"), "load_ms": med("load_ms"),
            "exposed_ms": med("exposed_ms"), "zt_trace_data_ms_maxdiff": check,
            "gap_ms": statistics.median(gaps) if gaps else None,
            "tasks_per_step": med("ntasks"), "bytes_per_step": med("bytes"),
            "task_us_median": statistics.median(u for r in rows for u in r["task_us"]),
            "task_us_max": max(u for r in rows for u in r["task_us"])}


def print_run(rnd, r):
    print("  round %d %-7s step %9.2f ms | load_batch %7.3f ms (%d tasks, median %.0f us, max "
          "%.0f us, %.0f KiB) | exposed %7.3f ms | gap %s ms | %.1f s" % (
              rnd, r["variant"], r["step_ms"], r["load_ms"], r["tasks_per_step"],
              r["task_us_median"], r["task_us_max"], r["bytes_per_step"] / 1024,
              r["exposed_ms"], "%.3f" % r["gap_ms"] if r["gap_ms"] is not None else "-",
              r["wall_s"]), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small", action="store_true",
                    help="configs/demo_model.json + demo_ds.json, small files (smoke test)")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--steps", type=int)
    ap.add_argument("--sizes", help="tokens of the 3 files (default 8M,5M,3M; --small "
                                    "800K,500K,300K)")
    ap.add_argument("--weights", default="0.5,0.3,0.2")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ncpu", type=int, default=2, help="STARPU_NCPU (default 2)")
    ap.add_argument("--cold", action="store_true",
                    help="drop the page cache before each run (root only)")
    ap.add_argument("--zt", default=os.path.join(ROOT, "build", "apps", "zt-train"))
    ap.add_argument("--model")
    ap.add_argument("--ds")
    ap.add_argument("--work", default="/tmp/zt-bench-data")
    ap.add_argument("--json")
    a = ap.parse_args()
    cfg = "small" if a.small else "gpt2-124M"
    model, ds, sizes, steps, rounds = CONFIGS[cfg]
    a.model, a.ds = a.model or model, a.ds or ds
    a.sizes = [count(x) for x in (a.sizes or sizes).split(",")]
    a.steps, a.rounds = a.steps or steps, a.rounds or rounds
    weights = [float(x) for x in a.weights.split(",")]
    if len(a.sizes) != 3 or len(weights) != 3:
        sys.exit("bench/data: --sizes and --weights take 3 values each")
    if a.steps < 2:
        sys.exit("bench/data: --steps must be at least 2 (step 1 is warm-up)")
    if not os.access(a.zt, os.X_OK):
        sys.exit("bench/data: %s is not built" % a.zt)
    with open(a.model) as f:
        shape = json.load(f)
    vocab = min(GPT2_VOCAB, shape["vocab_size"])
    os.makedirs(a.work, exist_ok=True)

    t0 = time.perf_counter()
    files = []
    for i, (n, letter) in enumerate(zip(a.sizes, "abc")):
        path = os.path.join(a.work, "%s.bin" % letter)
        benchlib.random_tokens(path, n, vocab, a.seed + i)
        files.append(path)
    gen_s = time.perf_counter() - t0
    blend = ",".join("%g:%s" % (w, p) for w, p in zip(weights, files))
    variants = {"blend": ["--data", blend, "--data-order", "shuffle"],
                "linear": ["--data", files[0]]}

    cpu, flags = benchlib.lscpu_flags()
    with open(a.ds) as f:
        dsj = json.load(f)
    print("bench/data: %s, %d CPUs, load average %.2f; zerotask %s (%s); config %s (V%d T%d C%d "
          "L%d, batch %d = micro %d x accumulation %d); STARPU_NCPU=%d; %d rounds x %d steps "
          "(step 1 warm-up); %s page cache" % (
              cpu or "?", os.cpu_count(), os.getloadavg()[0], benchlib.git_commit(ROOT), a.zt,
              cfg,
              shape["vocab_size"], shape["seq_len"], shape["n_embd"], shape["n_layer"],
              dsj["train_batch_size"], dsj["train_micro_batch_size_per_gpu"],
              dsj.get("gradient_accumulation_steps", 1), a.ncpu, a.rounds, a.steps,
              "cold (dropped before each run)" if a.cold else "warm"))
    print("lscpu flags: %s" % flags)
    print("data: %s tokens of uniform random ids < %d (random.Random(seed %d + i)), written in "
          "%.1f s to %s" % (", ".join("%s %d" % (os.path.basename(p), n)
                                      for p, n in zip(files, a.sizes)),
                            vocab, a.seed, gen_s, a.work))
    print("  A blend:  %s" % " ".join(variants["blend"]))
    print("  B linear: %s" % " ".join(variants["linear"]))

    runs = {"blend": [], "linear": []}
    for rnd in range(1, a.rounds + 1):
        order = ("blend", "linear") if rnd % 2 else ("linear", "blend")
        for v in order:
            r = run_variant(a, v, variants[v], "r%d-%s" % (rnd, v))
            runs[v].append(r)
            print_run(rnd, r)
    for v in ("blend", "linear"):
        print("  %s: %s" % (v, runs[v][-1]["data_line"]))
    diffs = [r["zt_trace_data_ms_maxdiff"] for v in runs.values() for r in v]
    if all(d is not None for d in diffs):
        print("  cross-check: zt-trace summary's data_ms per step matches load_batch ms within "
              "%.4f ms%s" % (max(diffs), "" if max(diffs) < 0.01 else " (MISMATCH)"))

    summary = {}
    for v in ("blend", "linear"):
        m = {k: statistics.median(r[k] for r in runs[v])
             for k in ("step_ms", "load_ms", "exposed_ms")}
        gaps = [r["gap_ms"] for r in runs[v] if r["gap_ms"] is not None]
        m["gap_ms"] = statistics.median(gaps) if gaps else None
        m["load_pct"] = 100 * m["load_ms"] / m["step_ms"]
        m["exposed_pct"] = 100 * m["exposed_ms"] / m["step_ms"]
        summary[v] = m
    print("\nper step, steps 2..%d, median over the steps of a run, then over %d rounds:" % (
        a.steps, a.rounds))
    print("| variant | step ms | load_batch ms | exposed ms | load/step | exposed/step | "
          "host gap ms |")
    print("|---|---|---|---|---|---|---|")
    for v, label in (("blend", "A blend of 3, shuffle"), ("linear", "B one file, linear")):
        m = summary[v]
        print("| %s | %.2f | %.3f | %.3f | %.3f%% | %.3f%% | %s |" % (
            label, m["step_ms"], m["load_ms"], m["exposed_ms"], m["load_pct"],
            m["exposed_pct"], "%.3f" % m["gap_ms"] if m["gap_ms"] is not None else "-"))
    ratio = summary["blend"]["step_ms"] / summary["linear"]["step_ms"]
    print("step time A/B (blend + shuffle / one file linear): %.3fx" % ratio)
    A = summary["blend"]
    met = A["load_pct"] < TARGET_PCT
    print("target: data loading under %g%% of the step time (blend of 3 + shuffle, %s): "
          "load_batch %.3f%% of the step, exposed %.3f%%: %s" % (
              TARGET_PCT, cfg, A["load_pct"], A["exposed_pct"], "met" if met else "NOT met"))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"cpu": cpu, "flags": flags, "commit": benchlib.git_commit(ROOT),
                       "zt_train": a.zt,
                       "config": cfg, "model": a.model, "ds_config": a.ds,
                       "ncpu": a.ncpu, "steps": a.steps, "rounds": a.rounds, "cold": a.cold,
                       "seed": a.seed, "files": dict(zip(files, a.sizes)), "weights": weights,
                       "vocab_ids": vocab, "variants": variants, "runs": runs,
                       "summary": summary, "step_ratio_blend_over_linear": ratio,
                       "target_pct": TARGET_PCT, "target_met": met}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
