#!/usr/bin/env python3
"""bench/pipeline/run.py: pipeline parallelism against data parallelism and one rank, on the same
cores, and the pipeline's bubble against the theory's.

Rows, one process (group) each, alternating over --rounds (the order rotates every round), the
same model, data, seed and global batch (B = micro x accumulation x replicas):
  1 rank             zt-train, STARPU_NCPU=W (the cores of one rank)
  dp=2 ZeRO-1        mpirun -np 2, STARPU_NCPU=W/2 each, zero_optimization stage 1
  pp=2 1f1b          mpirun -np 2, STARPU_NCPU=W/2 each, "pipeline": {"stages": 2} (the cut:
                     --partition; time: "weights" from a traced 1-rank run of W/2 workers
                     through zt-trace pipeline), each rank one stage, 2 sets of activations
  pp=2 gpipe         the same with "schedule": "gpipe" (every micro-batch's activations)
  DeepSpeed pp=2     with --peer PYTHON (a Python with DeepSpeed): its pipeline engine on the
                     same model and batch, 2 processes of W/2 threads, gloo, uniform partition
                     (bench/deepspeed/ds_worker.py pipe); target: pp=2 1f1b at most 0.8x its step
Each row: median ms/step over the steps after the first (a round's), tokens/s, the ratio to the
1-rank step, the final loss (all rows train the same sums up to rounding). The pipeline rows also
give the bubble and the stage imbalance of their trace's step 3 as `zt-trace summary` reports
them (docs/traces.md), beside the theory's (P-1)/(M+P-1) for M micro-batches. Prints `lscpu` flags first.

Usage: bench/pipeline/run.py [--build build] [--model bench/configs/small_model.json]
       [--micro 2] [--accum 8] [--steps 5] [--rounds 2] [--workers 2]
       [--partition uniform|parameters|time]
       [--peer PYTHON] [--json FILE]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import benchlib  # noqa: E402  (bench/benchlib.py: free_port)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
def mpirun():
    return ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2"]


def bubble(a, trace, step):
    """(bubble, imbalance) of a pipeline trace at step, as zt-trace summary reports them"""
    p = subprocess.run([os.path.join(a.build, "apps", "zt-trace"), "summary", trace, "--json"],
                       capture_output=True, text=True, check=True)
    for x in json.loads(p.stdout)["pipeline"]["steps"]:
        if x["step"] == step:
            return x["bubble"], x["imbalance"]
    sys.exit("pipeline bench: %s has no step %d" % (trace, step))


def run_deepspeed(a, work):
    """DeepSpeed's pipeline engine, 2 stages on 2 processes of W/2 threads (gloo), the same model,
    data, seed and batch: (median ms/step after the first, final loss)"""
    cfg = {"train_batch_size": a.micro * a.accum, "train_micro_batch_size_per_gpu": a.micro,
           "gradient_accumulation_steps": a.accum, "seed": 1, "gradient_clipping": 1.0,
           "optimizer": {"type": "AdamW", "params": {"lr": 3e-4}}}
    dsf = os.path.join(work, "deepspeed_pipe.json")
    with open(dsf, "w") as f:
        json.dump(cfg, f)
    worker = os.path.join(ROOT, "bench", "deepspeed", "ds_worker.py")
    port = str(benchlib.free_port())
    procs = []
    for r in range(2):
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE="2",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=port, DS_ACCELERATOR="cpu",
                   ZT_DS_THREADS=str(a.workers // 2), OMP_NUM_THREADS=str(a.workers // 2))
        procs.append(subprocess.Popen([a.peer, worker, "pipe", a.model, dsf, a.data,
                                       str(a.steps), "2"], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outs = [p.communicate(timeout=3600)[0] for p in procs]
    res = [l for l in outs[0].splitlines() if l.startswith("ds_result")]
    losses = [l for l in outs[0].splitlines() if l.startswith("step ")]
    if any(p.returncode for p in procs) or not res:
        sys.exit("pipeline bench: DeepSpeed's pipeline failed:\n" + outs[0][-2500:] +
                 outs[1][-1500:])
    ms = float(res[0].split("ms_per_step=")[1].split()[0])
    return ms, float(losses[-1].split()[3]) if losses else float("nan")


def run_row(a, name, work, env_extra):
    """one row: (median ms/step after the first, final loss, trace path or None)"""
    cfg = {"train_batch_size": a.micro * a.accum, "train_micro_batch_size_per_gpu": a.micro,
           "gradient_accumulation_steps": a.accum, "seed": 1, "gradient_clipping": 1.0,
           "optimizer": {"type": "AdamW", "params": {"lr": 3e-4}}}
    ranks, per = 1, a.workers
    if name.startswith("dp"):
        cfg.update(gradient_accumulation_steps=a.accum // 2, zero_optimization={"stage": 1})
        ranks, per = 2, a.workers // 2
    if name.startswith("pp"):
        cfg["pipeline"] = {"stages": 2, "partition": a.partition,
                           "schedule": name.split()[-1]}
        if a.partition == "time":  # the cut balanced by the measured work: zt-train's weights
            cfg["pipeline"].update(partition="weights", partition_weights=a.weights)
        ranks, per = 2, a.workers // 2
    if name == "profile":  # one rank with a stage's workers, traced for its work per layer
        per = a.workers // 2
    tag = name.replace(" ", "_").replace("=", "")
    dsf, log = os.path.join(work, tag + ".json"), os.path.join(work, tag + ".jsonl")
    trace = (os.path.join(work, tag + "_trace.json")
             if (ranks == 2 and "pp" in name) or name == "profile" else None)
    with open(dsf, "w") as f:
        json.dump(cfg, f)
    args = [os.path.join(a.build, "apps", "zt-train"), "--ds-config", dsf, "--model", a.model,
            "--data", a.data, "--steps", str(a.steps), "--log", log, "--quiet"]
    if a.init:  # the peer's initialisation: both sides train the same sums
        args += ["--init-from", a.init]
    if trace:
        args += ["--trace", trace]
    env = dict(os.environ, STARPU_SILENT="1", STARPU_NCPU=str(per), **env_extra)
    cmd = args if ranks == 1 else mpirun() + ["-x", "STARPU_NCPU=%d" % per, "-x",
                                             "STARPU_SILENT=1"] + args
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
    if p.returncode != 0:
        sys.exit("pipeline bench: %s failed (exit %d):\n%s" % (name, p.returncode,
                                                                p.stderr[-2000:]))
    with open(log) as f:
        recs = [json.loads(l) for l in f]
    return statistics.median(r["ms"] for r in recs[1:]), recs[-1]["loss"], trace


def measured_weights(a, work):
    """--partition time: the work per layer of a traced 1-rank run, as zt-trace pipeline gives
    it for zt-train's "partition": "weights" (docs/traces.md, "Pipeline projection")"""
    _, _, trace = run_row(a, "profile", work, {})
    p = subprocess.run([os.path.join(a.build, "apps", "zt-trace"), "pipeline", trace,
                        "--stages", "2", "--partition", "time", "--json"],
                       capture_output=True, text=True, check=True)
    return json.loads(p.stdout)["partition_weights"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--model", default=os.path.join(ROOT, "bench", "configs",
                                                    "small_model.json"))
    ap.add_argument("--data", default=os.path.join(ROOT, "data", "fortunes.bin"))
    ap.add_argument("--micro", type=int, default=2)
    ap.add_argument("--accum", type=int, default=8)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--partition", default="uniform", help="the pipeline rows' cut: uniform, "
                    "parameters, or time (balanced by the work per layer measured in a traced "
                    "1-rank run first)")
    ap.add_argument("--peer", help="a Python with DeepSpeed (bench/deepspeed/setup): adds its "
                    "pipeline engine, 2 stages, as a row")
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.accum % 2 or a.workers % 2 or a.steps < 4:
        ap.error("--accum and --workers must be even, --steps >= 4")
    flags = subprocess.run(["sh", "-c", "lscpu | grep -i '^model name\\|^flags'"],
                           capture_output=True, text=True).stdout
    print(flags.strip())
    with open(a.model) as f:
        T = json.load(f)["seq_len"]
    names = ["1 rank", "dp=2 ZeRO-1", "pp=2 1f1b", "pp=2 gpipe"] + (["DeepSpeed pp=2"]
                                                                      if a.peer else [])
    res = {n: [] for n in names}
    with tempfile.TemporaryDirectory() as work:
        a.init = None
        if a.peer:  # the weights DeepSpeed's side starts from (tests/ref/gpt2_torch.py's)
            a.init = os.path.join(work, "init.safetensors")
            subprocess.run([a.peer, os.path.join(ROOT, "tests", "ref", "gpt2_torch.py"),
                            "--model", a.model, "--write-init", a.init, "--seed", "1"],
                           check=True, capture_output=True)
        if a.partition == "time":
            a.weights = measured_weights(a, work)
            print("partition_weights (ms per micro-batch): %s" % a.weights, flush=True)
        for r in range(a.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for n in order:
                if n.startswith("DeepSpeed"):
                    ms, loss = run_deepspeed(a, work)
                    trace = None
                else:
                    ms, loss, trace = run_row(a, n, work, {})
                b = bubble(a, trace, 3) if trace else None
                res[n].append((ms, loss, b))
                print("round %d  %-12s %8.1f ms/step  loss %.6f%s" % (
                    r + 1, n, ms, loss, "  bubble %.3f imbalance %.3f" % b if b else ""),
                    flush=True)
    M, P, tokens = a.accum, 2, a.micro * a.accum * T
    theory = (P - 1) / (M + P - 1)
    base = statistics.median(x[0] for x in res["1 rank"])
    rows = []
    print("\n%-12s %9s %10s %8s %8s %10s" % ("row", "ms/step", "tokens/s", "ratio", "bubble",
                                             "imbalance"))
    for n in names:
        ms = statistics.median(x[0] for x in res[n])
        bs = [x[2] for x in res[n] if x[2]]
        b = statistics.median(v[0] for v in bs) if bs else None
        im = statistics.median(v[1] for v in bs) if bs else None
        rows.append({"row": n, "ms_per_step": ms, "tokens_per_s": tokens / (ms / 1e3),
                     "ratio_vs_1rank": ms / base, "bubble": b, "imbalance": im,
                     "loss": res[n][-1][1]})
        print("%-12s %9.1f %10.0f %8.2f %8s %10s" % (n, ms, tokens / (ms / 1e3), ms / base,
                                                     "%.3f" % b if b is not None else "-",
                                                     "%.3f" % im if im is not None else "-"))
    b1 = rows[2]["bubble"]
    print("theory: bubble (P-1)/(M+P-1) = %.3f for P=2, M=%d; pp=2 1f1b measured %.3f: %s "
          "(target: within 10%% of the theory)" % (theory, M, b1, "met" if abs(b1 - theory) <=
                                                   0.1 * theory else "NOT met"))
    if a.peer:
        ds_ms = rows[-1]["ms_per_step"]
        r = rows[2]["ms_per_step"] / ds_ms
        print("pp=2 1f1b / DeepSpeed pp=2: %.2f (target: at most 0.8): %s" % (
            r, "met" if r <= 0.8 else "NOT met"))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"flags": flags, "args": vars(a), "theory_bubble": theory, "rows": rows},
                      f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
