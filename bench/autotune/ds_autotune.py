#!/usr/bin/env python3
"""bench/autotune/ds_autotune.py: DeepSpeed's own autotuner (`deepspeed --autotuning tune`) on the
"small" or gpt2-124M GPT-2 of bench/configs, 2 ranks on this CPU machine: the peer half of the
zt-tune benchmark (issue 29). See bench/autotune/ds_README.md.

  python3 bench/autotune/ds_autotune.py --model small|gpt2-124m [--ranks 2] [--budget-gib X]
      [--out results.json] [--stages 0,1,2,3] [--mbs 1,2,4] [--start-profile-step 2]
      [--end-profile-step 4] [--measure-steps 6] [--full] [--tuner gridsearch]
      [--venv bench/deepspeed/.venv] [--work /work/.ds_autotune/<model>] [--data data/fortunes.bin]

Any python3 runs it (standard library only); DeepSpeed runs in --venv (bash bench/deepspeed/setup).
What it does:
 1. writes a user DeepSpeed config: bench/configs/<model>_ds.json with its global batch B fixed
    (train_batch_size dropped, gradient_accumulation_steps 1, train_micro_batch_size_per_gpu the
    list --mbs, default every divisor of B/ranks: DeepSpeed's autotuner then tunes exactly these
    micro-batches with gradient_accumulation_steps = (B/ranks)/mbs, so every experiment trains
    B rows per step), zero_optimization.stage the list --stages, and an "autotuning" section
    (enabled, fast unless --full, metric throughput, the tuner, profile steps, results_dir,
    exps_dir, overwrite);
 2. runs `deepspeed --autotuning tune --num_nodes 1 --num_gpus RANKS --hostfile <none>
    --master_port P bench/autotune/ds_tune_worker.py --model .. --data .. --steps N
    --deepspeed_config <that file>` with DS_ACCELERATOR=cpu, LOCAL_SIZE=RANKS (the CPU
    accelerator's device count, which DeepSpeed's runner uses as the slots of localhost),
    PATH with the venv's bin first (the autotuner launches each experiment as `deepspeed ...`),
    PYTHONPATH with a directory holding `tabulate` (the autotuner asserts it; it is the
    deepspeed[autotuning] extra, not in bench/deepspeed/setup's venv; installed there with
    pip --target, the venv itself is not modified), OMP_NUM_THREADS=1 and ZT_DS_THREADS=1 (one
    thread per rank, as bench/deepspeed/run); nothing inside DeepSpeed is patched;
 3. reads DeepSpeed's results: results_dir/ds_config_optimal.json (its pick), summary.txt, every
    experiment's metrics.json / stderr.log;
 4. measures the pick: ms per optimizer step, median after 2 warm-up steps of --measure-steps,
    2 processes x 1 thread, gloo, launched as bench/deepspeed/run launches DeepSpeed (its
    Bench.ds_train), with bench/deepspeed/ds_worker.py itself when the pick has
    gradient_accumulation_steps 1 (ds_worker.py feeds one micro-batch per step) and with
    bench/autotune/ds_tune_worker.py (same model, data rule, timing; gas micro-batches per step)
    always.
The JSON written to --out is described in ds_README.md ("Output").
"""
import argparse
import glob
import importlib.machinery
import importlib.util
import json
import os
import signal
import platform
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MODELS = {"small": "small", "gpt2-124m": "gpt2-124M"}
DS_STAGE_KEY = "zero_optimization"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def load_run_module():
    """bench/deepspeed/run (a script without .py) as a module: its Bench.ds_train is the normal
    DeepSpeed runner of the project's benchmarks"""
    path = os.path.join(ROOT, "bench", "deepspeed", "run")
    loader = importlib.machinery.SourceFileLoader("zt_bench_deepspeed_run", path)
    spec = importlib.util.spec_from_loader(loader.name, loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def tail(path, n=25):
    try:
        with open(path, errors="replace") as f:
            lines = [l.rstrip("\n") for l in f if l.strip()]
        return lines[-n:]
    except OSError:
        return []


def versions(py, env):
    p = subprocess.run([py, "-c", "import platform, torch, deepspeed, tabulate; print(platform."
                        "python_version(), torch.__version__, deepspeed.__version__, "
                        "tabulate.__version__)"], env=env, capture_output=True, text=True)
    v = p.stdout.split() if p.returncode == 0 else ["?"] * 4
    rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True).stdout.strip()
    cpu, flags = "?", []
    with open("/proc/cpuinfo") as f:
        for l in f:
            if l.startswith("model name") and cpu == "?":
                cpu = l.split(":", 1)[1].strip()
            if l.startswith("flags") and not flags:
                flags = l.split(":", 1)[1].split()
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {"python": v[0], "torch": v[1], "deepspeed": v[2], "tabulate": v[3],
            "zerotask_commit": rev, "cpu": cpu, "cores": os.cpu_count(),
            "mem_gib": round(mem, 1), "kernel": platform.release(),
            "cpu_flags_of_note": [x for x in flags if x.startswith(("avx", "amx", "fma"))]}


def ensure_tabulate(py, pylib):
    env = dict(os.environ, PYTHONPATH=pylib)
    if subprocess.run([py, "-c", "import tabulate"], env=env, capture_output=True).returncode:
        os.makedirs(pylib, exist_ok=True)
        subprocess.run([py, "-m", "pip", "install", "-q", "--target", pylib, "tabulate"],
                       check=True)


def user_config(a, cfg, B, work):
    with open(os.path.join(ROOT, "bench", "configs", cfg + "_ds.json")) as f:
        ds = json.load(f)
    per_rank = B // a.ranks
    mbs = ([int(x) for x in a.mbs.split(",")] if a.mbs else
           [d for d in range(1, per_rank + 1) if per_rank % d == 0])
    bad = [m for m in mbs if per_rank % m]
    if bad:
        sys.exit("ds_autotune: micro-batches %s do not divide the per-rank batch %d" %
                 (bad, per_rank))
    ds.pop("train_batch_size", None)  # derived per experiment: mbs * gas * ranks = B
    ds["train_micro_batch_size_per_gpu"] = sorted(mbs)
    ds["gradient_accumulation_steps"] = 1  # max(mbs) * 1 = B / ranks per rank
    ds[DS_STAGE_KEY] = {"stage": [int(s) for s in a.stages.split(",")]}
    ds["autotuning"] = {
        "enabled": True,
        "fast": not a.full,
        "metric": "throughput",
        "tuner_type": a.tuner,
        "tuner_early_stopping": 5,
        "tuner_num_trials": 50,
        "start_profile_step": a.start_profile_step,
        "end_profile_step": a.end_profile_step,
        "results_dir": os.path.join(work, "autotuning_results"),
        "exps_dir": os.path.join(work, "autotuning_exps"),
        "overwrite": True,
        # the worker reads batch settings from the config; no arguments to map
        "arg_mappings": {},
    }
    if a.max_train_batch_size:
        ds["autotuning"]["max_train_batch_size"] = a.max_train_batch_size
    path = os.path.join(work, "ds_user_%s.json" % cfg)
    with open(path, "w") as f:
        json.dump(ds, f, indent=1)
    return ds, path


def read_experiments(results_dir, metric):
    exps = []
    for d in sorted(glob.glob(os.path.join(results_dir, "*", ""))):
        name = os.path.basename(os.path.dirname(d))
        e = {"name": name}
        try:
            with open(os.path.join(d, "ds_config.json")) as f:
                c = json.load(f)
            e["stage"] = c.get(DS_STAGE_KEY, {}).get("stage")
            e["train_micro_batch_size_per_gpu"] = c.get("train_micro_batch_size_per_gpu")
            e["gradient_accumulation_steps"] = c.get("gradient_accumulation_steps")
            e["train_batch_size"] = c.get("train_batch_size")
        except (OSError, ValueError):
            pass
        mpath = os.path.join(d, "metrics.json")
        if os.path.exists(mpath):
            with open(mpath) as f:
                m = json.loads(f.read().strip().splitlines()[-1])
            e["ds_metrics"] = m
            e["ds_metric_value"] = m.get(metric)
            # the engine's "latency" is in microseconds (its timers' ms x 1000), see README
            e["ds_latency_ms"] = m["latency"] / 1000.0 if m.get("latency") else None
            e["status"] = "ok"
        elif os.path.exists(os.path.join(d, "model_info.json")):
            with open(os.path.join(d, "model_info.json")) as f:
                e["model_info"] = json.loads(f.read().strip().splitlines()[-1])
            e["status"] = "model info profile"
        else:
            e["status"] = "no metrics"
            err = [l for l in tail(os.path.join(d, "stderr.log"), 200)
                   if "rror" in l or "ERROR" in l]
            e["error"] = err[-3:] if err else tail(os.path.join(d, "stderr.log"), 3)
        exps.append(e)
    return exps


def measure_tune_worker(py, env, model, data, cfg_path, steps, work):
    """the pick on bench/autotune/ds_tune_worker.py, launched as bench/deepspeed/run launches
    ds_worker.py (2 processes, RANK/WORLD_SIZE/MASTER_* in the environment)"""
    env = dict(env, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               WORLD_SIZE=str(env["ZT_WORLD"]), OMP_NUM_THREADS="1", ZT_DS_THREADS="1")
    W = int(env["ZT_WORLD"])
    procs, logs = [], []
    for r in range(W):
        logs.append(os.path.join(work, "measure_rank%d.log" % r))
        with open(logs[-1], "w") as f:
            procs.append(subprocess.Popen(
                [py, os.path.join(HERE, "ds_tune_worker.py"), "--model", model, "--data", data,
                 "--steps", str(steps), "--deepspeed_config", cfg_path],
                env=dict(env, RANK=str(r), LOCAL_RANK=str(r)), stdout=f,
                stderr=subprocess.STDOUT))
    t0, failed_at = time.time(), None
    while any(p.poll() is None for p in procs):
        if failed_at is None and any(p.poll() not in (None, 0) for p in procs):
            failed_at = time.time()
        if (failed_at and time.time() - failed_at > 20) or time.time() - t0 > 3600:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        time.sleep(0.2)
    out = open(logs[0]).read()
    steps_ms = [float(l.split()[-1]) for l in out.splitlines() if l.startswith("step ")]
    for l in out.splitlines():
        if l.startswith("ds_result "):
            return dict(f.split("=", 1) for f in l.split()[1:]), None, steps_ms
    for lg in logs:
        for l in open(lg).read().splitlines():
            if l.startswith("ds_error "):
                return None, l[len("ds_error "):], steps_ms
    return None, "exit %s: %s" % ([p.returncode for p in procs], tail(logs[0], 1)), steps_ms


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, choices=sorted(MODELS))
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--budget-gib", type=float, default=None,
                    help="recorded only: DeepSpeed's autotuner takes no memory cap (it reads "
                    "get_accelerator().total_memory(), on CPU psutil's total RAM)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--stages", default="0,1,2,3")
    ap.add_argument("--mbs", default=None, help="micro-batches to tune (default: every "
                    "divisor of the per-rank batch)")
    ap.add_argument("--start-profile-step", type=int, default=2)
    ap.add_argument("--end-profile-step", type=int, default=4)
    ap.add_argument("--measure-steps", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=3,
                    help="times the pick is measured (each runner); the median is reported")
    ap.add_argument("--full", action="store_true", help="fast: false (also tune ZeRO bucket "
                    "sizes etc. per stage with the tuner; many more experiments)")
    ap.add_argument("--tuner", default="gridsearch", choices=["gridsearch", "random",
                                                              "model_based"])
    ap.add_argument("--max-train-batch-size", type=int, default=None)
    ap.add_argument("--venv", default=os.path.join(ROOT, "bench", "deepspeed", ".venv"))
    ap.add_argument("--pylib", default="/work/.ds_autotune_pylib",
                    help="directory (pip --target) with tabulate, put on PYTHONPATH")
    ap.add_argument("--work", default=None, help="default /work/.ds_autotune/<model>")
    ap.add_argument("--data", default=os.path.join(ROOT, "data", "fortunes.bin"))
    ap.add_argument("--timeout", type=int, default=5400)
    ap.add_argument("--no-measure", action="store_true")
    ap.add_argument("--measure-all", action="store_true",
                    help="also time every configuration DeepSpeed ran (same runner and steps), "
                    "to place its pick among them")
    ap.add_argument("--reuse", action="store_true",
                    help="do not tune again: take the autotuner's results from --work and the "
                    "tuning figures from the JSON at --out (then measure)")
    a = ap.parse_args()
    cfg = MODELS[a.model]
    work = os.path.abspath(a.work or os.path.join("/work/.ds_autotune", cfg))
    out = a.out or os.path.join(work, "ds_autotune_%s.json" % cfg)
    py = os.path.join(a.venv, "bin", "python")
    if not os.access(py, os.X_OK):
        sys.exit("ds_autotune: no virtualenv at %s: run bash bench/deepspeed/setup" % a.venv)
    ensure_tabulate(py, a.pylib)
    os.makedirs(work, exist_ok=True)
    with open(os.path.join(ROOT, "bench", "configs", cfg + "_ds.json")) as f:
        B = json.load(f)["train_batch_size"]
    model = os.path.join(ROOT, "bench", "configs", cfg + "_model.json")
    ds, user_cfg = user_config(a, cfg, B, work)

    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES",
                                                             "OPENBLAS_CORETYPE")}
    env.update(DS_ACCELERATOR="cpu", LOCAL_SIZE=str(a.ranks), OMP_NUM_THREADS="1",
               OPENBLAS_NUM_THREADS="1", ZT_DS_THREADS="1",
               PATH=os.path.join(a.venv, "bin") + os.pathsep + os.environ.get("PATH", ""),
               PYTHONPATH=a.pylib + (os.pathsep + os.environ["PYTHONPATH"]
                                     if os.environ.get("PYTHONPATH") else ""))
    ver = versions(py, env)
    hostfile = os.path.join(work, "no_hostfile")  # absent on purpose: local resources only
    if os.path.exists(hostfile):
        os.remove(hostfile)
    worker_steps = a.end_profile_step + 2  # DeepSpeed's engine exits after end_profile_step
    port = free_port()
    cmd = [os.path.join(a.venv, "bin", "deepspeed"), "--autotuning", "tune", "--num_nodes", "1",
           "--num_gpus", str(a.ranks), "--hostfile", hostfile, "--master_port", str(port),
           os.path.join(HERE, "ds_tune_worker.py"), "--model", model, "--data", a.data,
           "--steps", str(worker_steps), "--deepspeed_config", user_cfg]
    res = {
        "command": " ".join([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "versions": ver,
        "model": cfg, "ranks": a.ranks, "global_batch": B,
        "budget_gib": a.budget_gib,
        "budget_note": ("DeepSpeed's autotuner has no memory-cap setting: it sizes its search "
                        "with get_accelerator().total_memory(), on the CPU accelerator psutil's "
                        "total RAM (%.1f GiB here); --budget-gib is recorded, not applied"
                        % ver["mem_gib"]),
        "space": {"zero_stages": ds[DS_STAGE_KEY]["stage"],
                  "train_micro_batch_size_per_gpu": ds["train_micro_batch_size_per_gpu"],
                  "gradient_accumulation_steps": "(%d / ranks) / micro-batch" % B,
                  "fast": not a.full, "tuner_type": a.tuner,
                  "start_profile_step": a.start_profile_step,
                  "end_profile_step": a.end_profile_step},
        "autotuner": {"command": " ".join(cmd),
                      "env": {k: env[k] for k in ("DS_ACCELERATOR", "LOCAL_SIZE",
                                                  "OMP_NUM_THREADS", "ZT_DS_THREADS",
                                                  "PYTHONPATH")},
                      "user_config": ds, "user_config_path": user_cfg,
                      "monkeypatches": [], "work_dir": work},
        "status": "running",
    }

    def save():
        with open(out, "w") as f:
            json.dump(res, f, indent=1)
    if not a.reuse:
        save()
    print("ds_autotune: %s, %d ranks, global batch %d; DeepSpeed %s, torch %s\n  %s%s" % (
        cfg, a.ranks, B, ver["deepspeed"], ver["torch"], " ".join(cmd),
        " (not run: --reuse)" if a.reuse else ""), flush=True)
    so, se = os.path.join(work, "autotune.stdout"), os.path.join(work, "autotune.stderr")
    if a.reuse:
        with open(out) as f:
            prev = json.load(f)
        res["autotuner"] = at = prev["autotuner"]
        res["date_tuned"], res["command_tuned"] = prev.get("date"), prev.get("command")
        rc, wall = at["rc"], at["tuning_wall_s"]
        cmd = at["command"].split()
    else:
        t0 = time.time()
        with open(so, "w") as fo, open(se, "w") as fe:
            p = subprocess.Popen(cmd, env=env, cwd=work, stdout=fo, stderr=fe,
                                 start_new_session=True)
            try:
                rc = p.wait(timeout=a.timeout)
            except subprocess.TimeoutExpired:
                # the launcher's experiments are in its session: end them all, or they would
                # run on into the next measurement
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
                rc = "timeout after %d s" % a.timeout
        wall = time.time() - t0
        at = res["autotuner"]
        at["rc"] = rc
        at["tuning_wall_s"] = round(wall, 1)
    results_dir = ds["autotuning"]["results_dir"]
    exps = read_experiments(results_dir, "throughput")
    at["experiments"] = exps
    at["experiments_launched"] = len(exps)  # incl. the model-info profile run
    at["tuning_experiments"] = len([e for e in exps if e["status"] != "model info profile"])
    summary = os.path.join(results_dir, "summary.txt")
    if os.path.exists(summary):
        at["summary_txt"] = open(summary).read()
        import re
        m = re.search(r"Total number of experiments: (\d+)", at["summary_txt"])
        at["ds_reported_experiments"] = int(m.group(1)) if m else None
    at["stdout_tail"] = tail(so, 15)
    at["stderr_tail"] = tail(se, 25)
    opt = os.path.join(results_dir, "ds_config_optimal.json")
    if not os.path.exists(opt):
        res["status"] = "autotuner produced no ds_config_optimal.json"
        save()
        print("ds_autotune: %s (rc %s); see %s and %s" % (res["status"], rc, so, se))
        sys.exit(1)
    with open(opt) as f:
        pick = json.load(f)
    best = max((e for e in exps if e.get("status") == "ok"),
               key=lambda e: e["ds_metric_value"] or 0)
    cmd_opt = os.path.join(results_dir, "cmd_optimal.txt")
    res["pick"] = {
        "exp_name": best["name"],
        "stage": pick.get(DS_STAGE_KEY, {}).get("stage"),
        "train_micro_batch_size_per_gpu": pick.get("train_micro_batch_size_per_gpu"),
        "gradient_accumulation_steps": pick.get("gradient_accumulation_steps"),
        "train_batch_size": pick.get("train_batch_size"),
        "ds_config": pick, "ds_config_path": opt,
        "cmd_optimal": open(cmd_opt).read().strip() if os.path.exists(cmd_opt) else None,
        "ds_metric": "throughput",
        "ds_metric_value": best["ds_metric_value"],
        "ds_latency_ms": best["ds_latency_ms"],
        "ds_samples_per_s": best["ds_metric_value"],
        "ds_metric_note": ("DeepSpeed's engine (_autotuning_exit) writes latency = the sum of "
                           "the trimmed means of its forward, backward and step timers on rank 0 "
                           "(recorded at accumulation boundaries from start_profile_step on, "
                           "the flops-profiled step included) times gradient_accumulation_steps, "
                           "in microseconds (timer ms x 1000), and throughput = "
                           "train_batch_size * 1e6 / latency = samples/s; ds_latency_ms is that "
                           "latency / 1000"),
    }
    res["status"] = "tuned"
    save()
    print("ds_autotune: tuned in %.0f s, %d experiments (+ model-info run); pick %s: stage %s, "
          "micro-batch %s x gas %s; DeepSpeed's latency %.1f ms/step" % (
              wall, at["tuning_experiments"], best["name"], res["pick"]["stage"],
              res["pick"]["train_micro_batch_size_per_gpu"],
              res["pick"]["gradient_accumulation_steps"], best["ds_latency_ms"] or -1),
          flush=True)
    if a.no_measure:
        return
    # ---- the pick, on the project's normal DeepSpeed runner ----
    pick_path = os.path.join(work, "ds_pick_%s.json" % cfg)
    with open(pick_path, "w") as f:
        json.dump(pick, f, indent=1)
    menv = dict(env, ZT_WORLD=str(a.ranks))
    menv.pop("LOCAL_SIZE", None)
    meas = {"steps": a.measure_steps, "rule": "median ms per optimizer step after 2 warm-up "
            "steps, rank 0, between barriers; %d processes x 1 thread, gloo; median of the "
            "rounds' medians" % a.ranks}
    rounds, d, err, per_step = [], None, None, []
    for _ in range(a.rounds):
        d, err, st = measure_tune_worker(py, menv, model, a.data, pick_path, a.measure_steps,
                                         work)
        per_step.append(st)
        if not d:
            break
        rounds.append(float(d["ms_per_step"]))
    meas["rounds"] = a.rounds
    meas["ds_tune_worker"] = {"ms_per_step": statistics.median(rounds) if rounds else None,
                              "rounds_ms_per_step": rounds, "result": d, "error": err,
                              "steps_ms": per_step}
    if pick.get("gradient_accumulation_steps", 1) == 1 and a.ranks == 2:
        run = load_run_module()
        ns = argparse.Namespace(dir=os.path.join(work, "bench_ds"), data=a.data,
                                steps=a.measure_steps, venv=a.venv)
        os.makedirs(ns.dir, exist_ok=True)
        b = run.Bench.__new__(run.Bench)
        b.a, b.py, b.rows, b.save = ns, py, [], None
        renv = {k: v for k, v in menv.items() if k not in ("LOCAL_SIZE", "ZT_WORLD")}
        r2, d2, err2 = [], None, None
        for _ in range(a.rounds):
            d2, err2 = b.ds_train(cfg, pick_path, renv)
            if not d2:
                break
            r2.append(float(d2["ms_per_step"]))
        meas["bench_deepspeed_run"] = {
            "runner": "bench/deepspeed/run Bench.ds_train -> bench/deepspeed/ds_worker.py train",
            "ms_per_step": statistics.median(r2) if r2 else None, "rounds_ms_per_step": r2,
            "result": d2, "error": err2}
    else:
        meas["bench_deepspeed_run"] = {
            "runner": "bench/deepspeed/ds_worker.py", "ms_per_step": None,
            "error": "not run: the pick has gradient_accumulation_steps %s and ds_worker.py "
                     "feeds one micro-batch of B/ranks rows per step (it would time gas "
                     "micro-steps of the wrong size); ds_tune_worker.py is the measurement"
                     % pick.get("gradient_accumulation_steps")}
    res["measured"] = meas
    res["status"] = "ok"
    save()
    if a.measure_all:
        table = []
        for e in at["experiments"]:
            if e.get("status") != "ok":
                continue
            with open(os.path.join(results_dir, e["name"], "ds_config.json")) as f:
                c = json.load(f)
            c.pop("autotuning", None)
            cp = os.path.join(work, "ds_exp_%s.json" % e["name"])
            with open(cp, "w") as f:
                json.dump(c, f, indent=1)
            d, err, per_step = measure_tune_worker(py, menv, model, a.data, cp,
                                                   a.measure_steps, work)
            e["measured_ms_per_step"] = float(d["ms_per_step"]) if d else None
            e["measured_error"] = err
            e["measured_steps_ms"] = per_step
            table.append(e)
            save()
            print("  %-18s DeepSpeed's latency %8.1f ms | measured %s ms/step" % (
                e["name"], e["ds_latency_ms"],
                "%.1f" % e["measured_ms_per_step"] if d else "- (%s)" % err), flush=True)
        ok = sorted((e for e in table if e.get("measured_ms_per_step")),
                    key=lambda e: e["measured_ms_per_step"])
        if ok:
            names = [e["name"] for e in ok]
            res["measured_all"] = {
                "fastest_measured": names[0],
                "fastest_measured_ms_per_step": ok[0]["measured_ms_per_step"],
                "pick_rank_by_measured": (names.index(best["name"]) + 1
                                          if best["name"] in names else None),
                "configs_measured": len(ok),
                "note": "each configuration DeepSpeed ran, timed once more by ds_tune_worker.py "
                        "with the same rule as measured.ds_tune_worker"}
            save()
            print("  fastest measured: %s %.1f ms/step; DeepSpeed's pick ranks %s of %d" % (
                names[0], ok[0]["measured_ms_per_step"],
                res["measured_all"]["pick_rank_by_measured"], len(ok)), flush=True)
    ms = meas["ds_tune_worker"]["ms_per_step"]
    print("ds_autotune: DS autotuner pick %s (stage %s, mbs %s, gas %s): %s ms/step "
          "(ds_tune_worker.py)%s\n  written %s" % (
              best["name"], res["pick"]["stage"], res["pick"]["train_micro_batch_size_per_gpu"],
              res["pick"]["gradient_accumulation_steps"],
              "%.1f" % ms if ms else "did not run (%s)" % err,
              "; %s ms/step (bench/deepspeed ds_worker.py)" % (
                  "%.1f" % meas["bench_deepspeed_run"]["ms_per_step"]
                  if meas["bench_deepspeed_run"]["ms_per_step"] else "-"), out))


if __name__ == "__main__":
    main()
