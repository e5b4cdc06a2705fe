#!/usr/bin/env python3
"""bench/actckpt/run.py: activation checkpointing, zerotask (DeepSpeed's activation_checkpointing
section) against PyTorch's torch.utils.checkpoint: what recomputing the activations costs each in
step time, and what it saves in peak resident memory.

Both sides train the same model shape, batch and data in fp32 with the same thread count. Each
round runs, one process each, alternating (the order rotates by one every round):
  zerotask none     zt-train with the config as is (every activation kept)
  PyTorch  none     torch_worker.py --mode none (every block called directly)
  zerotask full     the config plus "activation_checkpointing": {} (every layer keeps only its
                    output; the rest is recomputed during the backward into a window of
                    ZT_RECOMPUTE_WINDOW=2 layers' buffers)
  PyTorch  full     torch_worker.py --mode full (torch.utils.checkpoint.checkpoint(block, x,
                    use_reentrant=False) around every transformer block)
  zerotask full-w1  the same section with ZT_RECOMPUTE_WINDOW=1 (the least memory)
  zerotask mlp      "activation_checkpointing": {"recompute": "mlp"} (selective: the attention's
                    activations kept, the MLP's recomputed; window 2)
  zerotask attention  {"recompute": "attention"} (selective, the reverse: the MLP's activations
                    kept, the attention's recomputed; window 2)
  zerotask nvme     {"offload": {"device": "nvme", "nvme_path": WORK/swap}} (full, window 2, the
                    inputs of the layers that recompute on NVMe between forward and backward)
zerotask: zt-train --log (each step's "ms"), its memory plan line before step 1 (the planned
activations, "recompute: N of L layers checkpointed, window of W (Z MiB)") and its "peak memory
(rank 0 of 1): X MiB resident" line (VmHWM) after the last step. PyTorch:
bench/actckpt/torch_worker.py under --peer (torch >= 2; tests/ref/gpt2_torch.py's shapes,
initialisation, data rule, ds config and AdamW, the forward split per block, fused causal
attention in both modes), its wall time per step and resource.getrusage's ru_maxrss taken after
the last step. Both sides are also measured from outside, ru_maxrss of the child from os.wait4,
shown as "wait4" on the run lines: for zt-train it matches its own VmHWM line; for the torch
worker it is about 100 MiB above the worker's own figure even for a bare `import torch`, because
torch 2.15's interpreter exit (after every atexit handler) raises the resident set, so the
worker's own ru_maxrss is the figure used. A run's step time is the median of its steps after 2
warm-up steps; a contender's figure is the median over the rounds.

Prints each run, then per side and mode: step ms, the ratio to that side's no-checkpointing step,
peak RSS MiB and the reduction against no checkpointing (MiB and %), zerotask's planned
activation MiB; then the targets:
  full checkpointing costs at most 1.2x zerotask's own step time (zerotask full / none)
  zerotask's overhead ratio is lower than PyTorch's (zerotask full / none < PyTorch full / none)
Each mode's losses are compared with its side's no-checkpointing run (recomputation must not
change them). --json writes everything.

The data: an llm.c token file of uniform random ids below min(50257, vocab) from
random.Random(--seed), enough for --steps steps without wrapping (at least 64K tokens); the loss
is meaningless, the work per step is the same as on text. The PyTorch process's peak includes
the interpreter and torch itself (its VmRSS after the set-up is printed), zt-train's its whole
process; compare reductions within a side, absolute figures across sides with that in mind.

Configs: the default is gpt2-124M (bench/configs/gpt2-124M_model.json + gpt2-124M_ds.json:
V50304 T256 C768 L12 NH12, batch 4, AdamW, clipping 1.0, as bench/train_vs_torch.py), several
seconds a step on a 2-core machine; --small uses configs/demo_model.json + configs/demo_ds.json
(V256 T64 C128 L4, batch 16 = 8 x 2 micro-batches): seconds in all, a smoke test.

Usage: bench/actckpt/run.py [--small] [--rounds 3] [--steps 6] [--ncpu 2]
           [--peer /work/venv/hf/bin/python] [--zt build/apps/zt-train] [--model M --ds DS]
           [--seed 1] [--work /tmp/zt-bench-actckpt] [--json OUT]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
ROOT = os.path.dirname(BENCH)
sys.path.insert(0, BENCH)
import benchlib  # noqa: E402  bench/benchlib.py: lscpu_flags

PROG = "bench/actckpt"
WORKER = os.path.join(HERE, "torch_worker.py")
GPT2_VOCAB = 50257
WARMUP = 2
TARGET_COST = 1.2
CONFIGS = {  # name: (model, ds, steps, rounds)
    "gpt2-124M": (os.path.join(BENCH, "configs", "gpt2-124M_model.json"),
                  os.path.join(BENCH, "configs", "gpt2-124M_ds.json"), 6, 3),
    "small": (os.path.join(ROOT, "configs", "demo_model.json"),
              os.path.join(ROOT, "configs", "demo_ds.json"), 5, 2)}
# (side, mode): zerotask's ZT_RECOMPUTE_WINDOW (None: no activation_checkpointing section)
ZT_MODES = {"none": None, "full": 2, "full-w1": 1, "mlp": 2, "attention": 2, "nvme": 2}
TORCH_MODES = ("none", "full")
ORDER = [("zerotask", "none"), ("PyTorch", "none"), ("zerotask", "full"), ("PyTorch", "full"),
         ("zerotask", "full-w1"), ("zerotask", "mlp"), ("zerotask", "attention"),
         ("zerotask", "nvme")]
PLAN_RE = re.compile(r"^memory \(host, rank 0 of 1\):.*?activations ([0-9.]+) MiB \| total "
                     r"([0-9.]+) MiB(?:.*?predicted peak ([0-9.]+) MiB)?(?:.*?recompute: (\d+) of "
                     r"(\d+) layers checkpointed, window of (\d+) \(([0-9.]+) MiB\))?", re.M)
PEAK_RE = re.compile(r"^peak memory \(rank 0 of 1\): ([0-9.]+) MiB resident", re.M)


def run_measured(cmd, env, out_prefix, what):
    """run cmd with stdout/stderr in files; (stdout, wall seconds, the child's ru_maxrss in MiB
    from os.wait4); a failure ends the benchmark"""
    with open(out_prefix + ".out", "w") as fo, open(out_prefix + ".err", "w") as fe:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, env=env, stdout=fo, stderr=fe)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
    with open(out_prefix + ".out") as f:
        out = f.read()
    if p.returncode != 0:
        with open(out_prefix + ".err") as f:
            err = f.read()
        sys.exit("%s: %s failed (exit %d): %s\n  %s" % (PROG, what, p.returncode,
                                                       (err or out)[-2000:], " ".join(cmd)))
    return out, wall, ru.ru_maxrss / 1024.0


def run_zt(a, mode, tag):
    window = ZT_MODES[mode]
    log = os.path.join(a.work, tag + ".jsonl")
    cmd = [a.zt, "--ds-config", a.ds_files[mode], "--model", a.model, "--data", a.tokens,
           "--steps", str(a.steps), "--log", log]
    env = dict(a.env)
    env.pop("ZT_RECOMPUTE_WINDOW", None)
    if window is not None:
        env["ZT_RECOMPUTE_WINDOW"] = str(window)
    out, wall, wait4_mib = run_measured(cmd, env, os.path.join(a.work, tag),
                                        "zt-train (%s)" % mode)
    with open(log) as f:
        recs = [json.loads(line) for line in f if line.strip()]
    recs = [r for r in recs if r.get("step", 0) >= 1 and "ms" in r]
    plan, peak = PLAN_RE.search(out), PEAK_RE.search(out)
    if plan is None or peak is None:
        sys.exit("%s: zt-train (%s) printed no %s line:\n%s" % (
            PROG, mode, "memory plan" if plan is None else "peak memory", out[-2000:]))
    nckpt = int(plan.group(4)) if plan.group(4) else 0
    got_window = int(plan.group(6)) if plan.group(6) else None
    L = a.shape["n_layer"]
    if window is None and nckpt:
        sys.exit("%s: zt-train (none) checkpoints %d layers without the section" % (PROG, nckpt))
    if window is not None and (nckpt != L or got_window != window):
        sys.exit("%s: zt-train (%s) plans %d of %d layers checkpointed, window %s; expected all "
                 "%d, window %d (does this zt-train know activation_checkpointing and "
                 "ZT_RECOMPUTE_WINDOW?):\n%s" % (PROG, mode, nckpt, L, got_window, L, window,
                                                 plan.group(0)))
    ms = [r["ms"] for r in recs]
    return {"side": "zerotask", "mode": mode, "window": window, "ms": ms,
            "losses": [r["loss"] for r in recs], "step_ms": statistics.median(ms[WARMUP:]),
            "peak_mib": float(peak.group(1)), "wait4_maxrss_mib": wait4_mib,
            "plan_acts_mib": float(plan.group(1)), "plan_total_mib": float(plan.group(2)),
            "plan_predicted_peak_mib": float(plan.group(3)) if plan.group(3) else None,
            "plan_ckpt_layers": nckpt, "plan_window_mib": float(plan.group(7))
            if plan.group(7) else None, "plan_line": plan.group(0), "wall_s": wall, "log": log}


def run_torch(a, mode, tag):
    cmd = [a.peer, WORKER, "--model", a.model, "--ds-config", a.ds, "--data", a.tokens,
           "--mode", mode, "--steps", str(a.steps), "--warmup", str(WARMUP), "--threads",
           str(a.ncpu)]
    out, wall, wait4_mib = run_measured(cmd, a.env, os.path.join(a.work, tag),
                                        "torch_worker (%s)" % mode)
    try:
        r = json.loads(out.strip().splitlines()[-1])
    except (IndexError, ValueError):
        sys.exit("%s: torch_worker (%s) printed no JSON line:\n%s" % (PROG, mode, out[-2000:]))
    return {"side": "PyTorch", "mode": mode, "ms": r["ms"], "losses": r["losses"],
            "step_ms": r["median_ms"], "peak_mib": r["maxrss_mib"],
            "wait4_maxrss_mib": wait4_mib, "rss_setup_mib": r["rss_setup_mib"],
            "torch": r["torch"], "threads": r["threads"], "wall_s": wall}


def print_run(rnd, r):
    if r["side"] == "zerotask":
        extra = "plan: activations %.1f MiB%s" % (
            r["plan_acts_mib"], ", %d layers checkpointed, window %d (%.1f MiB)" % (
                r["plan_ckpt_layers"], r["window"], r["plan_window_mib"])
            if r["plan_ckpt_layers"] else "")
    else:
        extra = "VmRSS after set-up %.1f MiB" % r["rss_setup_mib"]
    print("  round %d %-8s %-7s step %9.1f ms | peak %8.1f MiB resident (wait4 %.1f) | %s | "
          "%.1f s" % (rnd, r["side"], r["mode"], r["step_ms"], r["peak_mib"],
                      r["wait4_maxrss_mib"], extra, r["wall_s"]), flush=True)


def loss_diff(runs, side, mode):
    """largest |loss - the no-checkpointing run's loss| over the steps of every round"""
    d = 0.0
    for base, r in zip(runs[side, "none"], runs[side, mode]):
        d = max([d] + [abs(x - y) for x, y in zip(base["losses"], r["losses"])])
    return d


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small", action="store_true",
                    help="configs/demo_model.json + demo_ds.json (a smoke test)")
    ap.add_argument("--rounds", type=int, help="default 3 (--small: 2)")
    ap.add_argument("--steps", type=int, help="steps per run, the first %d warm-up "
                                              "(default 6; --small: 5)" % WARMUP)
    ap.add_argument("--ncpu", type=int, default=2,
                    help="STARPU_NCPU, torch.set_num_threads, OMP_NUM_THREADS (default 2)")
    ap.add_argument("--peer", default="/work/venv/hf/bin/python",
                    help="the Python with torch >= 2 (default /work/venv/hf/bin/python)")
    ap.add_argument("--zt", default=os.path.join(ROOT, "build", "apps", "zt-train"))
    ap.add_argument("--model")
    ap.add_argument("--ds")
    ap.add_argument("--seed", type=int, default=1, help="seed of the random token file")
    ap.add_argument("--work", default="/tmp/zt-bench-actckpt")
    ap.add_argument("--json")
    a = ap.parse_args()
    cfg = "small" if a.small else "gpt2-124M"
    model, ds, steps, rounds = CONFIGS[cfg]
    a.model, a.ds = os.path.abspath(a.model or model), os.path.abspath(a.ds or ds)
    a.steps, a.rounds = a.steps or steps, a.rounds or rounds
    if a.steps <= WARMUP:
        ap.error("--steps must be at least %d (%d warm-up steps are not counted)"
                 % (WARMUP + 1, WARMUP))
    if a.rounds < 1:
        ap.error("--rounds must be at least 1")
    if not os.access(a.zt, os.X_OK):
        sys.exit("%s: %s is not built" % (PROG, a.zt))
    a.env = dict(os.environ, STARPU_NCPU=str(a.ncpu), OMP_NUM_THREADS=str(a.ncpu),
                 OPENBLAS_NUM_THREADS="1", STARPU_SILENT="1")
    p = subprocess.run([a.peer, "-c", "import torch; print(torch.__version__)"], env=a.env,
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("%s: %s has no torch: %s" % (PROG, a.peer, (p.stderr or p.stdout).strip()
                                               .splitlines()[-1:]))
    torch_version = p.stdout.strip()
    if int(torch_version.split(".")[0]) < 2:
        sys.exit("%s: %s has torch %s; torch >= 2 is needed" % (PROG, a.peer, torch_version))
    with open(a.model) as f:
        a.shape = json.load(f)
    with open(a.ds) as f:
        dsj = json.load(f)
    if "activation_checkpointing" in dsj:
        sys.exit("%s: %s already has an activation_checkpointing section; give one without"
                 % (PROG, a.ds))
    os.makedirs(a.work, exist_ok=True)

    # the data and the ds configs of the modes
    B, T = dsj["train_batch_size"], a.shape["seq_len"]
    vocab = min(GPT2_VOCAB, a.shape["vocab_size"])
    ntok = max(65536, a.steps * B * T + 1)
    a.tokens = os.path.join(a.work, "tokens.bin")
    benchlib.random_tokens(a.tokens, ntok, vocab, a.seed)
    swap = os.path.join(a.work, "swap")
    os.makedirs(swap, exist_ok=True)
    sections = {"full": {}, "mlp": {"recompute": "mlp"}, "attention": {"recompute": "attention"},
                "nvme": {"offload": {"device": "nvme", "nvme_path": swap}}}
    a.ds_files = {"none": a.ds}
    for mode, section in sections.items():
        a.ds_files[mode] = os.path.join(a.work, "ds_%s.json" % mode)
        with open(a.ds_files[mode], "w") as f:
            json.dump(dict(dsj, activation_checkpointing=section), f, indent=1)
            f.write("\n")
    a.ds_files["full-w1"] = path = a.ds_files["full"]

    cpu, flags = benchlib.lscpu_flags()
    sh = a.shape
    print("%s: %s, %d CPUs, load average %.2f; zerotask %s (%s); PyTorch %s (%s); config %s "
          "(V%d T%d C%d L%d NH%d, batch %d = micro %d x accumulation %d, fp32); %d threads "
          "each; %d rounds x %d steps (%d warm-up)" % (
              PROG, cpu or "?", os.cpu_count(), os.getloadavg()[0], benchlib.git_commit(ROOT),
              a.zt,
              torch_version, a.peer, cfg, sh["vocab_size"], sh["seq_len"], sh["n_embd"],
              sh["n_layer"], sh["n_head"], B, dsj.get("train_micro_batch_size_per_gpu", B),
              dsj.get("gradient_accumulation_steps", 1), a.ncpu, a.rounds, a.steps, WARMUP))
    print("lscpu flags: %s" % flags)
    print("data: %s, %d uniform random ids < %d (random.Random(%d)); configs %s, %s + "
          "\"activation_checkpointing\": {} (%s)" % (a.tokens, ntok, vocab, a.seed, a.model,
                                                     a.ds, path))

    t_start = time.perf_counter()
    runs = {k: [] for k in ORDER}
    for rnd in range(1, a.rounds + 1):
        k = (rnd - 1) % len(ORDER)
        for side, mode in ORDER[k:] + ORDER[:k]:
            tag = "r%d-%s-%s" % (rnd, "zt" if side == "zerotask" else "torch", mode)
            r = run_zt(a, mode, tag) if side == "zerotask" else run_torch(a, mode, tag)
            r["round"] = rnd
            runs[side, mode].append(r)
            print_run(rnd, r)
        def last(side, mode):
            return runs[side, mode][-1]["step_ms"] / runs[side, "none"][-1]["step_ms"]
        print("  round %d: full / none: zerotask %.3fx (%s), PyTorch %.3fx" % (
            rnd, last("zerotask", "full"), ", ".join(
                "%s %.3fx" % (m, last("zerotask", m)) for m in ZT_MODES if m not in
                ("none", "full")), last("PyTorch", "full")), flush=True)
    for mode in ZT_MODES:
        print("  zerotask %-7s %s" % (mode, runs["zerotask", mode][-1]["plan_line"]))

    summary = {}
    for side, mode in ORDER:
        rs = runs[side, mode]
        s = {"step_ms": statistics.median(r["step_ms"] for r in rs),
             "peak_mib": statistics.median(r["peak_mib"] for r in rs)}
        if side == "zerotask":
            s["plan_acts_mib"] = rs[-1]["plan_acts_mib"]
            s["plan_window_mib"] = rs[-1]["plan_window_mib"]
        else:
            s["rss_setup_mib"] = statistics.median(r["rss_setup_mib"] for r in rs)
        summary["%s %s" % (side, mode)] = s
    for side, mode in ORDER:
        s, base = summary["%s %s" % (side, mode)], summary["%s none" % side]
        s["ratio"] = s["step_ms"] / base["step_ms"]
        s["saved_mib"] = base["peak_mib"] - s["peak_mib"]
        s["saved_pct"] = 100.0 * s["saved_mib"] / base["peak_mib"]
        s["loss_maxdiff"] = loss_diff(runs, side, mode)

    print("\nmedian over %d rounds (a run: the median ms of steps %d..%d); ratio and reduction "
          "against the same side's no-checkpointing run:" % (a.rounds, WARMUP + 1, a.steps))
    print("| side | mode | step ms | x no ckpt | peak RSS MiB | reduction MiB | reduction | "
          "planned activations MiB | losses vs none |")
    print("|---|---|---|---|---|---|---|---|---|")
    labels = {("zerotask", "none"): "none", ("zerotask", "full"): "full (window 2)",
              ("zerotask", "full-w1"): "full (window 1)",
              ("zerotask", "mlp"): "selective: the MLPs (window 2)",
              ("zerotask", "attention"): "selective: the attentions (window 2)",
              ("zerotask", "nvme"): "full, inputs on NVMe (window 2)", ("PyTorch", "none"): "none",
              ("PyTorch", "full"): "checkpoint() per block"}
    for side, mode in sorted(ORDER, key=lambda x: (x[0] != "zerotask", ORDER.index(x))):
        s = summary["%s %s" % (side, mode)]
        print("| %s | %s | %.1f | %.3fx | %.1f | %.1f | %.1f%% | %s | %s |" % (
            side if side == "zerotask" else "PyTorch %s" % torch_version, labels[side, mode],
            s["step_ms"], s["ratio"], s["peak_mib"], s["saved_mib"], s["saved_pct"],
            "%.1f" % s["plan_acts_mib"] if "plan_acts_mib" in s else "-",
            "-" if mode == "none" else ("identical" if s["loss_maxdiff"] == 0 else
                                        "max |diff| %.2g" % s["loss_maxdiff"])))
    print("PyTorch's peak includes the interpreter and torch: VmRSS %.1f MiB after its set-up "
          "(parameters, optimizer, batches; before step 1)"
          % summary["PyTorch none"]["rss_setup_mib"])

    zr = summary["zerotask full"]["ratio"]
    zr1 = summary["zerotask full-w1"]["ratio"]
    tr = summary["PyTorch full"]["ratio"]
    cost_met, lower_met = zr <= TARGET_COST, zr < tr
    print("target: full checkpointing costs at most %.1fx zerotask's own step time: full "
          "(window 2) %.1f ms / none %.1f ms = %.3fx (%s); window 1: %.3fx" % (
              TARGET_COST, summary["zerotask full"]["step_ms"],
              summary["zerotask none"]["step_ms"], zr, "met" if cost_met else "NOT met", zr1))
    print("target: zerotask's overhead ratio is lower than PyTorch's: zerotask %.3fx against "
          "PyTorch %.3fx (torch.utils.checkpoint per block) (%s)" % (
              zr, tr, "met" if lower_met else "NOT met"))
    print("memory: full checkpointing saves zerotask %.1f MiB (%.1f%%; window 1: %.1f MiB, "
          "%.1f%%) and PyTorch %.1f MiB (%.1f%%) of peak resident memory" % (
              summary["zerotask full"]["saved_mib"], summary["zerotask full"]["saved_pct"],
              summary["zerotask full-w1"]["saved_mib"],
              summary["zerotask full-w1"]["saved_pct"], summary["PyTorch full"]["saved_mib"],
              summary["PyTorch full"]["saved_pct"]))
    total = time.perf_counter() - t_start
    print("total time %.0f s, load average now %.2f; logs and configs in %s"
          % (total, os.getloadavg()[0], a.work))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"cpu": cpu, "flags": flags, "commit": benchlib.git_commit(ROOT),
                       "zt_train": a.zt,
                       "peer": a.peer, "torch": torch_version, "config": cfg,
                       "model": a.model, "ds_config": a.ds, "ds_full": path, "shape": sh,
                       "ncpu": a.ncpu, "rounds": a.rounds, "steps": a.steps,
                       "warmup": WARMUP, "tokens": ntok, "seed": a.seed,
                       "runs": {"%s %s" % k: v for k, v in runs.items()},
                       "summary": summary,
                       "targets": {"zt_full_over_none": zr, "zt_full_w1_over_none": zr1,
                                   "torch_full_over_none": tr, "cost_target": TARGET_COST,
                                   "cost_met": cost_met, "lower_than_torch_met": lower_met},
                       "total_s": total, "loadavg_end": os.getloadavg()[0]}, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
