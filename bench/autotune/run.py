#!/usr/bin/env python3
"""bench/autotune/run.py: zt-tune against the exhaustive grid over the same space (measured:
the ground truth) and, where it runs here, against DeepSpeed's own autotuner.

For each model ("small": V8192 T128 C384 L6, batch 8; "gpt2-124M": V50304 T256 C768 L12,
batch 4) on --ranks ranks with a memory budget per rank (gpt2-124M's default rules out ZeRO
stage 0):
  1. the grid: every ZeRO stage x micro-batch (the global batch fixed) x STARPU_SCHED of
     {lws, eager, prio, dmdas} x offload placement (with --nvme-path) that the memory model
     says fits, each run with zt-train for END steps and timed as zt-tune times its trials
     (median over steps START..END); its wall time is the grid's tuning time;
  2. zt-tune (model_based, then gridsearch) on the same config and budget: its pick, its wall
     time and trials; the pick's step time is read from the grid's measurement of the same
     configuration, so both sides are compared on one set of numbers;
  3. every candidate zt-tune predicted to fit: its measured peak (VmHWM) against the budget;
  4. DeepSpeed's autotuner (bench/autotune/ds_autotune.py, in the bench/deepspeed venv), its
     pick's step time and its tuning time, where it runs on this machine.
Prints a table and the ratios; --json writes them.

Usage: bench/autotune/run.py [--models small,gpt2-124M] [--ranks 2] [--budget-mib M,M]
                             [--nvme-path D] [--start 3] [--end 8] [--json OUT]
Needs a Release build (build/apps/zt-train, zt-tune) and mpirun.
"""
import argparse
import csv
import itertools
import json
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BIN = os.path.join(ROOT, "build", "apps")
MODELS = {"small": ("small_model.json", "small_ds.json", 0),
          # stage 0 holds every parameter, gradient and moment of 124M parameters on each rank:
          # 2700 MiB per rank is below its prediction (with zt-tune's margin) and above that of
          # stage 1, and of stages 2 and 3 at micro-batch 1
          "gpt2-124M": ("gpt2-124M_model.json", "gpt2-124M_ds.json", 2700)}
SCHEDS = ["lws", "eager", "prio", "dmdas"]


def mpirun(ranks, env):
    cmd = ["mpirun", "--oversubscribe", "-np", str(ranks)]
    if os.geteuid() == 0:
        cmd.insert(1, "--allow-run-as-root")
    for k, v in env.items():
        cmd += ["-x", "%s=%s" % (k, v)]
    return cmd


def trial(work, name, user, knobs, model, data, ranks, start, end):
    """one grid point with zt-train: (median ms over steps start..end, peak MiB), or None"""
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    cfg = dict(user)
    cfg.update({"train_micro_batch_size_per_gpu": knobs["micro"],
                "gradient_accumulation_steps": knobs["accum"]})
    zero = {"stage": knobs["stage"]}
    if knobs.get("nvme"):
        zero["offload_optimizer"] = {"device": "nvme", "nvme_path": knobs["nvme"]}
        if knobs.get("param_nvme"):
            zero["offload_param"] = {"device": "nvme", "nvme_path": knobs["nvme"]}
    cfg["zero_optimization"] = zero
    with open(os.path.join(d, "ds.json"), "w") as f:
        json.dump(cfg, f)
    env = {"STARPU_NCPU": "1", "STARPU_SCHED": knobs["sched"]}
    log = os.path.join(d, "log.jsonl")
    p = subprocess.run(mpirun(ranks, env) + [
        os.path.join(BIN, "zt-train"), "--ds-config", os.path.join(d, "ds.json"), "--model",
        model, "--data", data, "--steps", str(end), "--log", log, "--trace",
        os.path.join(d, "trace.json")], capture_output=True, text=True)  # traced, as a trial
    if p.returncode != 0:
        return None
    with open(log) as f:
        ms = [r["ms"] for r in map(json.loads, f) if start <= r["step"] <= end]
    peaks = [float(l.split(":")[1].split()[0]) for l in p.stdout.splitlines()
             if l.startswith("peak memory (rank")]
    return statistics.median(ms), max(peaks)


def grid_space(ranks, batch, nvme):
    per_rank = batch // ranks
    micro = [m for m in range(per_rank, 0, -1) if per_rank % m == 0]
    places = [(s, False, False) for s in range(4)]
    if nvme:
        places += [(s, True, False) for s in (1, 2, 3)] + [(3, True, True)]
    for (stage, opt, par), m, sched in itertools.product(places, micro, SCHEDS):
        yield {"stage": stage, "micro": m, "accum": per_rank // m, "sched": sched,
               "nvme": nvme if opt else None, "param_nvme": par}


def key(k):
    return (k["stage"], k["micro"], k["sched"], bool(k.get("nvme")), bool(k.get("param_nvme")),
            k["accum"])


def tsv(path):
    with open(path) as f:
        return list(csv.DictReader(f, delimiter="\t"))


def row_key(r):
    """a zt-tune row as a grid key; None when its workers or chunks are not the grid's (one
    worker per rank, ZT_GRAPH_CHUNKS 4)"""
    off = r["offload"]
    if r["workers"] != "1" or r["chunks"] != "4":
        return None
    return (int(r["stage"]), int(r["micro"]), r["sched"], off != "none", "+param" in off,
            int(r["accum"]))


def zt_tune(model, dsj, data, ranks, budget, nvme, work, tuner, start, end, dry=False):
    """zt-tune's rows (results.tsv), wall seconds and trials"""
    cfg = json.load(open(dsj))
    cfg["autotuning"] = {"tuner_type": tuner, "start_profile_step": start,
                         "end_profile_step": end}
    tj = os.path.join(work, "tune-%s.json" % tuner)
    json.dump(cfg, open(tj, "w"))
    res = os.path.join(work, "tune-%s%s" % (tuner, "-dry" if dry else ""))
    args = [os.path.join(BIN, "zt-tune"), "--ds-config", tj, "--model", model, "--data", data,
            "--ranks", str(ranks), "--memory-budget", "%dM" % budget, "--results-dir", res,
            "--exps-dir", res + "-exps", "--quiet"] + (["--dry-run"] if dry else [])
    if nvme:
        args += ["--nvme-path", nvme]
    t0 = time.time()
    p = subprocess.run(args, capture_output=True, text=True)
    wall = time.time() - t0
    if p.returncode != 0:
        sys.exit("autotune: zt-tune %s failed: %s" % (tuner, p.stderr[-2000:]))
    rows = tsv(os.path.join(res, "results.tsv"))
    trials = sum(r["state"] in ("measured", "failed") for r in rows)
    return rows, wall, trials


def ds_peer(name, ranks, budget, work):
    """DeepSpeed's autotuner through ds_autotune.py, or None with the reason"""
    script = os.path.join(HERE, "ds_autotune.py")
    if not os.path.exists(script):
        return None, "bench/autotune/ds_autotune.py is missing"
    out = os.path.join(work, "ds-%s.json" % name)
    p = subprocess.run([sys.executable, script, "--model", name.lower(), "--ranks", str(ranks),
                        "--budget-gib", "%.2f" % (budget / 1024.0), "--out", out],
                       capture_output=True, text=True)
    if p.returncode != 0 or not os.path.exists(out):
        return None, (p.stderr or p.stdout).strip().splitlines()[-1:] or ["failed"]
    return json.load(open(out)), None


def confirm(work, user, keys, model, data, a):
    """the keys' step times measured again, alternating, a.rounds rounds: median per key (the
    grid's minimum over many single measurements is biased low on a noisy machine)"""
    times = {k: [] for k in keys}
    for rnd in range(a.rounds):
        for k in keys:
            knobs = {"stage": k[0], "micro": k[1], "sched": k[2], "accum": k[5],
                     "nvme": a.nvme_path if k[3] else None, "param_nvme": k[4]}
            r = trial(os.path.join(work, "confirm"), "r%d-%s" % (rnd, "-".join(map(str, k))),
                      user, knobs, model, data, a.ranks, a.start, a.end)
            if r:
                times[k].append(r[0])
    return {k: statistics.median(v) for k, v in times.items() if v}


def bench_model(name, a, work):
    mfile, dfile, default_budget = MODELS[name]
    model, dsj = (os.path.join(HERE, "..", "configs", f) for f in (mfile, dfile))
    data = os.path.join(ROOT, "data", "fortunes.bin")
    budget = a.budget.get(name, default_budget) or int(
        os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 1048576 / a.ranks)
    work = os.path.join(work, name)
    os.makedirs(work, exist_ok=True)
    dry, _, _ = zt_tune(model, dsj, data, a.ranks, budget, a.nvme_path, work, "gridsearch",
                        a.start, a.end, dry=True)
    fits = {}
    for r in dry:
        fits[(int(r["stage"]), int(r["micro"]), r["offload"] != "none", "+param" in r["offload"])] = \
            "memory" not in r["why"]
    user = json.load(open(dsj))
    grid, t0 = {}, time.time()
    for k in grid_space(a.ranks, user["train_batch_size"], a.nvme_path):
        if not fits.get((k["stage"], k["micro"], bool(k["nvme"]), k["param_nvme"]), False):
            continue
        name_k = "s%d-m%d-%s%s%s" % (k["stage"], k["micro"], k["sched"],
                                     "-nvme" if k["nvme"] else "", "-par" if k["param_nvme"] else "")
        grid[key(k)] = trial(os.path.join(work, "grid"), name_k, user, k, model, data, a.ranks,
                             a.start, a.end)
        print("  grid %-24s %s" % (name_k, "failed" if grid[key(k)] is None else
                                    "%.1f ms, %.0f MiB" % grid[key(k)]), flush=True)
    grid_wall = time.time() - t0
    ok = {k: v for k, v in grid.items() if v}
    top = sorted(ok, key=lambda k: ok[k][0])[:3]
    result = {"model": name, "ranks": a.ranks, "budget_mib": budget, "grid_points": len(grid),
              "grid_wall_s": grid_wall, "grid_best": list(top[0]), "grid_best_ms": ok[top[0]][0],
              "tuners": {}}
    picks = {}
    for tuner in a.tuners.split(","):
        rows, wall, trials = zt_tune(model, dsj, data, a.ranks, budget, a.nvme_path, work,
                                     tuner, a.start, a.end)
        pick = [r for r in rows if r["best"] == "*"][0]
        picks[tuner] = row_key(pick)
        ran = [r for r in rows if r["state"] == "measured"]
        result["tuners"][tuner] = {
            "pick": list(picks[tuner] or ["outside the grid", pick["workers"], pick["chunks"]]),
            "pick_tune_ms": float(pick["measured_ms"]),
            "pick_grid_ms": ok[picks[tuner]][0] if picks[tuner] in ok else None,
            "wall_s": wall, "trials": trials, "measured": len(ran),
            "measured_over_budget": sum(float(r["measured_peak_mib"]) > budget for r in ran),
            "largest_measured_peak_mib": max(float(r["measured_peak_mib"]) for r in ran)}
    keys = list(dict.fromkeys(top + [k for k in picks.values() if k]))
    again = confirm(work, user, keys, model, data, a)
    best_again = min(again[k] for k in top if k in again)
    result["confirm"] = {"rounds": a.rounds, "ms": {"-".join(map(str, k)): v
                                                    for k, v in again.items()},
                         "grid_top3_best_ms": best_again}
    for tuner, k in picks.items():
        result["tuners"][tuner]["pick_confirm_ms"] = again.get(k)
        result["tuners"][tuner]["ratio_to_grid_best"] = again.get(k, float("nan")) / best_again
    ds, why = ds_peer(name, a.ranks, budget, work) if a.deepspeed else (None, "--no-deepspeed")
    result["deepspeed"] = ds if ds else {"skipped": why}
    return result


def report(res):
    print("\n%s, %d ranks, budget %d MiB per rank: grid %d points in %.0f s; its top 3 measured "
          "again %d rounds: best %.1f ms" % (res["model"], res["ranks"], res["budget_mib"],
                                            res["grid_points"], res["grid_wall_s"],
                                            res["confirm"]["rounds"],
                                            res["confirm"]["grid_top3_best_ms"]))
    for tuner, t in res["tuners"].items():
        print("  zt-tune %-11s pick %s: %.1f ms (%.3fx the grid's best; target <= 1.05x); %.0f s "
              "= %.2fx the grid's wall time (target <= 0.25x), %d trials; %d of %d run ones "
              "over the budget (largest peak %.0f MiB)" % (
                  tuner, t["pick"], t["pick_confirm_ms"] or float("nan"),
                  t["ratio_to_grid_best"], t["wall_s"], t["wall_s"] / res["grid_wall_s"],
                  t["trials"], t["measured_over_budget"], t["measured"],
                  t["largest_measured_peak_mib"]))
    ds = res["deepspeed"]
    if "skipped" in ds:
        print("  DeepSpeed's autotuner: not run (%s)" % ds["skipped"])
        return
    pick, meas = ds.get("pick", {}), ds.get("measured", {})
    ms = (meas.get("ds_tune_worker") or {}).get("ms_per_step")
    wall = (ds.get("autotuner") or {}).get("tuning_wall_s")
    best = min(t["pick_confirm_ms"] or float("inf") for t in res["tuners"].values())
    print("  DeepSpeed's autotuner: pick stage %s micro %s x accum %s: %s ms/step (DeepSpeed's "
          "engine); tuned in %s s. zt-tune's pick %.1f ms = %.2fx; zt-tune's tuning time / "
          "DeepSpeed's = %s" % (pick.get("stage"), pick.get("train_micro_batch_size_per_gpu"),
                                pick.get("gradient_accumulation_steps"), ms, wall, best,
                                best / ms if ms else float("nan"),
                                ", ".join("%s %.2fx" % (k, t["wall_s"] / wall)
                                          for k, t in res["tuners"].items()) if wall else "-"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="small,gpt2-124M")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--budget-mib", default="", help="name=MiB,... (default: gpt2-124M 2700)")
    ap.add_argument("--tuners", default="model_based,gridsearch")
    ap.add_argument("--nvme-path")
    ap.add_argument("--start", type=int, default=3)
    ap.add_argument("--end", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-deepspeed", dest="deepspeed", action="store_false")
    ap.add_argument("--work", default="/tmp/zt-autotune-bench")
    ap.add_argument("--json")
    a = ap.parse_args()
    a.budget = {k: int(v) for k, v in (x.split("=") for x in a.budget_mib.split(",") if x)}
    flags = [l for l in open("/proc/cpuinfo") if l.startswith("flags")][0].split()
    print("autotune bench: %s, %d cpus, avx512f=%d avx512_bf16=%d amx_bf16=%d" % (
        platform.processor() or platform.machine(), os.cpu_count(), "avx512f" in flags,
        "avx512_bf16" in flags, "amx_bf16" in flags))
    results = []
    for name in a.models.split(","):
        print("== %s" % name, flush=True)
        results.append(bench_model(name, a, a.work))
        report(results[-1])
    if a.json:
        json.dump(results, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
