#!/usr/bin/env python3
"""tests/apps/test_zt_tune.py: zt-tune end to end on a tiny GPT-2.

- bad "autotuning" keys (unknown, DeepSpeed's but not implemented, wrong type or value, an
  end_profile_step before start_profile_step): one line "zt-tune: error: config ...", exit 2;
  zt-train accepts a valid section and trains;
- a --memory-budget below the smallest candidate: one clear line, exit 2, nothing run; a bad
  budget value: exit 2;
- a tune on one rank writes ds_config_optimal.json, env_optimal.sh, results.tsv (every
  candidate, a reason for each one not run), results.jsonl and autotune.png; the chosen config,
  run by zt-train with the environment it names, gives bit-identical losses to the same config
  written by hand (and to its own trial's first steps);
- a budget between the candidates' predictions: nothing predicted above it runs, and every run
  one stays under it (measured VmHWM);
- an interrupted tune (SIGINT during a trial) exits 130 and --resume goes on from its results
  without rerunning them; overwrite (the default) starts over;
- the random tuner's order is reproducible with a seed;
- model_based on two ranks (mpirun): the best measured on both ranks; --ranks auto splits the
  cores into ranks x workers;
- --dry-run prints the space and writes its table only.

Usage: test_zt_tune.py ZT_TRAIN ZT_TUNE MPIEXEC WORKDIR [--memory]
--memory: only the budget check against measured peaks (not under the sanitizers, whose shadow
memory the model does not count); without it, everything else.
"""
import csv
import json
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "graph"))
import trainlib  # noqa: E402

ZT, TUNE, MPI, WORK = sys.argv[1:5]
MEMORY = "--memory" in sys.argv[5:]
run = trainlib.Runner(ZT, MPI, WORK)
model, data = run.tiny_gpt2()


def config(name, autotuning=None, **extra):
    cfg = {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "steps_per_print": 100}
    if autotuning is not None:
        cfg["autotuning"] = autotuning
    cfg.update(extra)
    return run.write(name, cfg)


def tune(label, cfg, *args, ok=True, ranks=1, popen=False):
    res, exps = run.path(label + "-results"), run.path(label + "-exps")
    args = [str(a) for a in args]
    if "--model" not in args:
        args += ["--model", model, "--data", data]
    cmd = [TUNE, "--ds-config", cfg, "--ranks", str(ranks),
           "--results-dir", res, "--exps-dir", exps, "--mpirun", MPI] + args
    if popen:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if ok and p.returncode != 0:
        print("FAIL zt-tune %s: exit %d\n%s%s" % (label, p.returncode, p.stdout[-3000:],
                                                  p.stderr[-2000:]))
        sys.exit(1)
    return p, res, exps


def table(res):
    with open(os.path.join(res, "results.tsv")) as f:
        return list(csv.DictReader(f, delimiter="\t"))


def trials(res):
    """the keys of results.jsonl's trials, in order (its first line is the tune's fingerprint)"""
    with open(os.path.join(res, "results.jsonl")) as f:
        return [r["key"] for r in map(json.loads, f) if "key" in r]


def one_error_line(p, code, *words):
    lines = p.stderr.strip().splitlines()
    return (p.returncode == code and len(lines) == 1 and lines[0].startswith("zt-tune: error:")
            and all(w in lines[0] for w in words))


def budget_against_measured():
    # ---- a budget between the predictions: nothing above it runs, and what runs fits (a model
    # big enough that the candidates' memory differs by more than the process's own)
    big = run.write("big.json", {"vocab_size": 8192, "seq_len": 128, "n_embd": 256, "n_layer": 4,
                                 "n_head": 4})
    big_data = run.tokens("big.bin", [(7919 * i) % 8192 for i in range(20000)])
    cut_cfg = config("cut.json", {"tuner_type": "model_based", "tuner_num_trials": 4,
                                  "start_profile_step": 2, "end_profile_step": 2})
    big_args = ["--model", big, "--data", big_data]
    p, res, _ = tune("cut-dry", cut_cfg, "--dry-run", *big_args)
    preds = sorted({float(r["predicted_peak_mib"]) for r in table(res)
                    if r["state"] == "pending"})
    run.check(len(preds) >= 2 and preds[-1] > 1.2 * preds[0],
              "the big model's candidates' predicted peaks differ: %s" % preds)
    cut = (preds[0] + preds[-1]) / 2
    p, res, _ = tune("cut", cut_cfg, "--memory-budget", "%dM" % cut, *big_args)
    rows = table(res)
    ran = [r for r in rows if r["state"] in ("measured", "failed")]
    run.check(ran and all(float(r["predicted_peak_mib"]) * 1.08 <= cut for r in ran),
              "budget %.0f MiB: every run candidate was predicted under it (with the 8%% margin)"
              % cut)
    run.check(all(0 < float(r["measured_peak_mib"]) <= cut for r in ran),
              "and measured under it (predicted %s, measured %s)" %
              ([r["predicted_peak_mib"] for r in ran], [r["measured_peak_mib"] for r in ran]))
    run.check(any(r["why"].startswith("memory: predicted peak") for r in rows),
              "the candidates above it are pruned for memory")



def everything_else():
    # ---- bad autotuning sections
    bad = [({"enabld": True}, "did you mean"), ({"arg_mappings": {}}, "arg_mappings"),
           ({"metric": "speed"}, "throughput, latency, flops"), ({"tuner_num_trials": 0}, ">= 1"),
           ({"fast": "yes"}, "autotuning.fast"),
           ({"start_profile_step": 5, "end_profile_step": 3}, "end_profile_step"),
           ({"tuner_type": "bayesian"}, "gridsearch, random, model_based"),
           ({"results_dir": ""}, "results_dir")]
    for i, (section, word) in enumerate(bad):
        p, _, _ = tune("bad%d" % i, config("bad%d.json" % i, section), ok=False)
        run.check(one_error_line(p, 2, "config", word),
                  "bad autotuning %s: one error line with '%s', exit 2 (got %d: %s)"
                  % (json.dumps(section), word, p.returncode, p.stderr.strip()[:300]))
    good = config("good.json", {"enabled": True, "fast": False, "metric": "latency"})
    p = run.launch(1, ["--ds-config", good, "--model", model, "--data", data, "--steps", "2"])
    run.check(p.returncode == 0 and "zt-tune reads that section" in p.stderr,
              "zt-train trains with a valid autotuning section and says zt-tune reads it")

    # ---- budgets
    base = config("base.json", {"tuner_num_trials": 4, "start_profile_step": 2,
                                "end_profile_step": 3})
    p, res, _ = tune("tiny-budget", base, "--memory-budget", "1M", ok=False)
    run.check(one_error_line(p, 2, "--memory-budget 1.0 MiB", "below the smallest candidate") and
              not os.path.exists(res), "a budget below every candidate: one line, exit 2, nothing "
              "run (%s)" % p.stderr.strip()[:300])
    p, _, _ = tune("bad-budget", base, "--memory-budget", "lots", ok=False)
    run.check(p.returncode == 2 and "--memory-budget lots" in p.stderr, "a bad budget value: exit 2")

    # ---- dry run: the space, nothing written
    p, res, exps = tune("dry", base, "--dry-run")
    run.check("pending" in p.stdout and os.listdir(res) == ["results.tsv"] and
              not os.path.exists(exps), "--dry-run prints the candidates, writes results.tsv only")

    # ---- a tune on one rank; its pick trains and equals the same config by hand
    p, res, exps = tune("one", base)
    rows = table(res)
    files = ["ds_config_optimal.json", "env_optimal.sh", "results.tsv", "results.jsonl",
             "autotune.png"]
    run.check(all(os.path.getsize(os.path.join(res, f)) > 0 for f in files),
              "the results directory holds %s" % ", ".join(files))
    best = [r for r in rows if r["best"] == "*"]
    run.check(len(best) == 1 and best[0]["state"] == "measured", "one best row, measured")
    run.check(all(r["why"] for r in rows if r["state"] in ("pruned", "failed")),
              "every candidate not run says why")
    run.check(all(r["state"] != "pending" for r in rows), "every candidate decided")
    env = {}
    with open(os.path.join(res, "env_optimal.sh")) as f:
        for line in f:
            if line.startswith("export "):
                k, v = line[7:].strip().split("=", 1)
                env[k] = v
    b = best[0]
    run.check(env == {"STARPU_SCHED": b["sched"], "STARPU_NCPU": b["workers"],
                      "ZT_GRAPH_CHUNKS": b["chunks"]}, "env_optimal.sh: the best row's environment")
    with open(os.path.join(res, "ds_config_optimal.json")) as f:
        opt = json.load(f)
    run.check((opt["train_micro_batch_size_per_gpu"], opt["gradient_accumulation_steps"],
               opt["zero_optimization"]["stage"], "offload_optimizer" in opt["zero_optimization"],
               "autotuning" in opt) ==
              (int(b["micro"]), int(b["accum"]), int(b["stage"]), b["offload"] != "none", False),
              "ds_config_optimal.json: the best row's micro-batch, accumulation, stage and "
              "placement, no autotuning section")
    picked, _, _ = run.train("picked", 1, ["--ds-config", os.path.join(res, "ds_config_optimal.json"),
                                           "--model", model, "--data", data, "--steps", "4"], env)
    with open(base) as f:
        by_hand = json.load(f)
    by_hand.pop("autotuning")
    by_hand.update({"train_batch_size": 8, "train_micro_batch_size_per_gpu": int(b["micro"]),
                    "gradient_accumulation_steps": int(b["accum"]),
                    "zero_optimization": {"stage": int(b["stage"])}})
    hand, _, _ = run.train("hand", 1, ["--ds-config", run.write("hand.json", by_hand), "--model",
                                       model, "--data", data, "--steps", "4"], env)
    run.check([r["loss"] for r in picked] == [r["loss"] for r in hand],
              "the chosen config trains to the bit-identical losses of the same config by hand")
    with open(os.path.join(b["dir"], "log.jsonl")) as f:
        trial = [json.loads(line)["loss"] for line in f]
    run.check(trial == [r["loss"] for r in picked][:len(trial)], "and to its own trial's steps")

    # ---- interrupt and resume
    slow = config("slow.json", {"tuner_num_trials": 6, "tuner_early_stopping": 6,
                                "start_profile_step": 2, "end_profile_step": 8})
    proc = tune("resume", slow, popen=True)
    jsonl = os.path.join(run.path("resume-results"), "results.jsonl")
    t0 = time.time()
    while time.time() - t0 < 300 and proc.poll() is None:
        if os.path.exists(jsonl) and len(trials(run.path("resume-results"))) >= 2:
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    done = len(trials(run.path("resume-results")))
    run.check(proc.returncode == 130 and "--resume" in err,
              "SIGINT during a trial: exit 130, the error says --resume (%d: %s)"
              % (proc.returncode, err.strip()[-200:]))
    p, res, _ = tune("resume", slow, "--resume")
    resumed = p.stdout.count("[resumed]")
    keys = trials(res)
    run.check(resumed == done and len(keys) == len(set(keys)),
              "--resume reuses the %d trials done (%d said [resumed]) and reruns none" %
              (done, resumed))
    other = config("other.json", {"tuner_num_trials": 6, "tuner_early_stopping": 6,
                                  "start_profile_step": 2, "end_profile_step": 8}, seed=99)
    p, _, _ = tune("resume", other, "--resume", ok=False)
    run.check(one_error_line(p, 2, "results of another tune"),
              "--resume of another config's results: one error line, exit 2 (%s)"
              % p.stderr.strip()[-200:])
    p, _, _ = tune("resume", slow)
    run.check(p.stdout.count("[resumed]") == 0, "overwrite (the default) starts over")

    # ---- the random tuner's order is the seed's
    rnd = config("rnd.json", {"tuner_type": "random", "tuner_num_trials": 3,
                              "start_profile_step": 2, "end_profile_step": 2})
    orders = []
    for k in range(2):
        p, res, _ = tune("rnd", rnd, "--seed", "7")
        orders.append(trials(res))
    run.check(orders[0] == orders[1] and len(orders[0]) == 3,
              "random tuner, seed 7: the same trials in the same order twice")
    p, res, _ = tune("grid3", config("grid3.json", {"tuner_num_trials": 3,
                                                    "start_profile_step": 2,
                                                    "end_profile_step": 2}))
    run.check(orders[0] != trials(res), "and not gridsearch's order")

    # ---- model_based on two ranks
    mb = config("mb.json", {"tuner_type": "model_based", "tuner_num_trials": 6,
                            "start_profile_step": 2, "end_profile_step": 3})
    p, res, exps = tune("two", mb, ranks=2)
    rows = table(res)
    best = [r for r in rows if r["best"] == "*"]
    run.check(len(best) == 1 and float(best[0]["measured_peak_mib"]) > 0,
              "model_based on 2 ranks: a measured best with its peak memory")
    with open(os.path.join(best[0]["dir"], "stdout.txt")) as f:
        peaks = [line for line in f if line.startswith("peak memory (rank")]
    run.check(len(peaks) == 2, "its trial ran on 2 ranks")
    classes = {"stage=%s " % r["stage"] for r in rows if r["phase"] == "micro-batch"}
    first = {re.search(r"stage=\d+ ", k).group(0) for k in trials(res)[:len(classes)]}
    run.check(first == classes, "model_based measured one probe per class first, in its first "
              "%d trials" % len(classes))

    # ---- fast false with NVMe offload: the placements and the refinement run
    nvme = run.path("nvme")
    os.makedirs(nvme, exist_ok=True)
    full = config("full.json", {"fast": False, "tuner_type": "model_based",
                                "tuner_num_trials": 40, "start_profile_step": 2,
                                "end_profile_step": 2})
    p, res, _ = tune("full", full, "--nvme-path", nvme)
    rows = table(res)
    measured = [r for r in rows if r["state"] == "measured"]
    run.check(any(r["offload"] == "opt:nvme" for r in measured) and
              any(r["offload"] == "opt:nvme+param" for r in measured),
              "--nvme-path: trials with the optimizer and the parameters on NVMe ran")
    run.check(any(r["phase"] == "refine" and r["state"] in ("measured", "failed")
                  for r in rows) and
              any("ZT_GRAPH_CHUNKS" in r["why"] for r in rows if r["phase"] == "refine"),
              "fast false: the refinement measured one-knob changes of the best")

    # ---- --ranks auto: the splits of the cores into ranks x workers are classes of their own
    p, res, _ = tune("auto", mb, "--ranks", "auto", "--dry-run")
    splits = {(int(r["ranks"]), int(r["workers"])) for r in table(res)}
    cores = os.cpu_count()
    want = {(r, cores // r) for r in range(1, cores + 1) if cores % r == 0 and 8 % r == 0}
    run.check(splits == want, "--ranks auto: the candidates split %d cores as %s (want %s)"
              % (cores, sorted(splits), sorted(want)))
    p, _, _ = tune("bad-ranks", mb, "--ranks", "many", ok=False)
    run.check(p.returncode == 2 and "--ranks many" in p.stderr, "--ranks many: exit 2")


if MEMORY:
    budget_against_measured()
else:
    everything_else()
sys.exit(run.finish("zt_tune"))
