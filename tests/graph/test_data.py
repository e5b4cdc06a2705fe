#!/usr/bin/env python3
"""tests/graph/test_data.py: zt-train's data pipeline (apps/train_data.c over io/zt_dataset.h).

- Batches independent of world size and micro-batch split: a shuffled blend of 3 files (with
  a curriculum) on 1 rank (micro 6, and micro 3 x 2 accumulation), 2 ranks and 3 ranks (micro 2,
  and micro 1 x 2): losses equal to 1e-5, and the rows every rank loaded (--dump-data), merged,
  bit for bit the one rank's.
- The blend and the shuffle as the run read them (the dump): each source's share within one
  sequence of its weight at every prefix, and every sequence of a source read once per epoch;
  epochs are printed and logged.
- Evaluation: the validation loss is bit-identical at ZeRO stages 0-3 on 1 rank and stage 3 on
  2 ranks, and training with evaluations has the losses and weights of training without.
- Kill and resume: a run killed (SIGKILL) after its step-4 checkpoint resumes mid-epoch and
  trains on exactly the batches of the uninterrupted run (bit-identical losses and weights),
  also on 2 ranks (a reshard); zt-ckpt inspect shows the data position.
- The default is unchanged: one file in linear order reads the step rule (the dump against
  the formula); a checkpoint's position refuses other data.
- Bad input: one line, the right exit code, no traceback (see BAD below), and no input
  overwritten (--dump-data onto a data file).

Usage: test_data.py ZT_TRAIN MPIEXEC WORKDIR ZT_CKPT
"""
import json
import os
import random
import signal
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from trainlib import Runner, zero_section  # noqa: E402

R = Runner(sys.argv[1], sys.argv[2], sys.argv[3], {"STARPU_SILENT": "1"})
ZCK = sys.argv[4]
V, T, B = 64, 16, 6
model = R.write("model.json", {"vocab_size": V, "seq_len": T, "n_embd": 32, "n_layer": 2,
                               "n_head": 2})
rng = random.Random(3)
files = [R.tokens(n, [(i * m + (rng.randrange(V) if rng.random() < 0.2 else 0)) % V
                      for i in range(k)])
         for n, m, k in (("web.bin", 7, 401), ("code.bin", 11, 257), ("math.bin", 13, 161))]
valid = R.tokens("valid.bin", [(i * 5 + 3) % V for i in range(500)])
NSEQ = [(400 // T), (256 // T), (160 // T)]  # 25, 16, 10 sequences
WEIGHTS = [0.5, 0.3, 0.2]
BLEND = ",".join("%g:%s" % (w, f) for w, f in zip(WEIGHTS, files))
CURRICULUM = {"enabled": True, "curriculum_type": "seqlen", "min_difficulty": 4,
              "max_difficulty": 16, "schedule_type": "fixed_linear",
              "schedule_config": {"total_curriculum_step": 6, "difficulty_step": 4}}


def config(tag, micro, accum, stage=0, curriculum=False):
    d = {"train_batch_size": B, "train_micro_batch_size_per_gpu": micro,
         "gradient_accumulation_steps": accum, "seed": 17, "gradient_clipping": 1.0,
         "optimizer": {"type": "AdamW", "params": {"lr": 3e-3}},
         "zero_optimization": zero_section(stage)}
    if curriculum:
        d["curriculum_learning"] = CURRICULUM
    return R.write("ds_%s.json" % tag, d)


def train(label, n, cfg, steps, extra=()):
    recs, out, p = R.train(label, n, ["--ds-config", cfg, "--model", model, "--steps",
                                      str(steps)] + list(extra))
    with open(out, "rb") as f:
        return recs, f.read(), p


def dump(label, n):
    """the rows every rank loaded: {(step, global row): (file, position, active)}"""
    rows = {}
    for r in range(n):
        with open(R.path("%s.dump.rank%d" % (label, r))) as f:
            for line in f:
                s, mb, k, fi, pos, act = map(int, line.split())
                R.check((s, k) not in rows, "%s: row %d of step %d loaded once" % (label, k, s))
                rows[(s, k)] = (fi, pos, act)
    return rows


def losses(recs):
    return {r["step"]: r["loss"] for r in recs if "loss" in r}


# ---- world size and micro-batch split -------------------------------------------------------
STEPS = 12
base = None
for label, n, micro, accum in (("r1m6", 1, 6, 1), ("r1m3a2", 1, 3, 2), ("r2m3", 2, 3, 1),
                               ("r3m2", 3, 2, 1), ("r3m1a2", 3, 1, 2)):
    cfg = config(label, micro, accum, curriculum=True)
    recs, _, p = train(label, n, cfg, STEPS, ["--data", BLEND, "--data-order", "shuffle",
                                              "--dump-data", R.path(label + ".dump")])
    rows, l = dump(label, n), losses(recs)
    if base is None:
        base = (rows, l, recs, p)
        continue
    R.check(rows == base[0], "%s: the rows loaded equal one rank's bit for bit" % label)
    worst = max(abs(l[s] - base[1][s]) / abs(base[1][s]) for s in base[1])
    R.check(len(l) == STEPS and worst <= 1e-5, "%s: losses equal one rank's (worst %.2e)" %
            (label, worst))

rows, _, recs, p = base
# the curriculum's lengths (DeepSpeed's fixed_linear: the table is test_curriculum's)
active = {s: a for (s, _), (_, _, a) in rows.items()}
R.check(active[1] < active[6] == 16 and all(active[s] <= active[s + 1] for s in range(1, STEPS)),
        "curriculum: lengths %s grow to 16 by step 6" % [active[s] for s in range(1, STEPS + 1)])
# the blend within one sequence of its weight at every prefix, each epoch a permutation
drawn, worst, seen = [0, 0, 0], 0.0, [[] for _ in files]
for g in range(STEPS * B):
    fi, pos, _ = rows[(g // B + 1, g % B)]
    drawn[fi] += 1
    seen[fi].append(pos // T)
    R.check(pos % T == 0, "row %d starts at a sequence" % g) if pos % T else None
    worst = max(worst, max(abs(drawn[i] - WEIGHTS[i] * (g + 1)) for i in range(3)))
R.check(worst <= 1.0, "blend: every source within one sequence of its share (worst %.3f)" % worst)
for i, s in enumerate(seen):
    full = len(s) // NSEQ[i] * NSEQ[i]
    ok = all(sorted(s[e:e + NSEQ[i]]) == list(range(NSEQ[i])) for e in range(0, full, NSEQ[i]))
    R.check(ok and full >= NSEQ[i], "%s: each epoch reads each of its %d sequences once "
            "(%d draws)" % (os.path.basename(files[i]), NSEQ[i], len(s)))
    R.check(s[:NSEQ[i]] != list(range(NSEQ[i])), "%s: shuffled" % os.path.basename(files[i]))
R.check("math.bin begins epoch 2" in p.stdout and recs[-1]["epochs"][2] >= 2,
        "epochs printed and logged (%s)" % recs[-1]["epochs"])

# ---- the default: one file, linear order, the step rule --------------------------------------
cfg = config("lin", 3, 2)
_, _, _ = train("lin", 1, cfg, 5, ["--data", files[0], "--dump-data", R.path("lin.dump")])
count = 401
ok = all(pos == ((s - 1) * B * T + k * T) % count and a == T
         for (s, k), (fi, pos, a) in dump("lin", 1).items())
R.check(ok, "one file in linear order: row k of step i starts at ((i-1)*B + k)*T mod count")

# ---- evaluation ------------------------------------------------------------------------------
EV = ["--data", BLEND, "--data-order", "shuffle", "--eval-data", valid, "--eval-interval", "2",
      "--eval-steps", "3"]
evals, noeval = {}, None
for stage, n in ((0, 1), (1, 1), (2, 1), (3, 1), (3, 2)):
    cfg = config("ev%d_%d" % (stage, n), B // n, 1, stage)
    recs, weights, p = train("ev%d_%d" % (stage, n), n, cfg, 6, EV)
    evals[(stage, n)] = [(r["step"], r["eval_loss"]) for r in recs if "eval_loss" in r]
    if stage == 0:
        _, w0, _ = train("noev", 1, cfg, 6, EV[:4])
        R.check(w0 == weights, "evaluations leave training untouched (weights bit-identical)")
        R.check("val loss" in p.stdout, "the validation loss is printed")
first = evals[(0, 1)]
R.check([s for s, _ in first] == [0, 2, 4, 6], "evaluated at steps 0, 2, 4, 6 (%s)" % first)
for (stage, n), ev in evals.items():
    # the initial weights are the same bits everywhere; after updates, N ranks reduce the
    # gradients in another order (README, "Data parallelism"): 1e-5 there
    R.check(ev[0] == first[0], "step-0 eval loss at stage %d on %d rank(s) bit-identical to "
            "stage 0's" % (stage, n))
    worst = max(abs(a[1] - b[1]) / b[1] for a, b in zip(ev, first))
    R.check(ev == first if n == 1 else worst <= 1e-5, "eval losses at stage %d on %d rank(s): "
            "%s stage 0's (worst %.1e)" % (stage, n, "bit-identical to" if n == 1 else
                                           "within 1e-5 of", worst))

# ---- kill and resume (and reshard) -----------------------------------------------------------
cfg1 = config("kr1", 6, 1, 2, curriculum=True)
cfg2 = config("kr2", 3, 1, 2, curriculum=True)
KR = ["--data", BLEND, "--data-order", "shuffle"]
full, wfull, _ = train("full", 1, cfg1, 10, KR + ["--dump-data", R.path("full.dump")])
full_rows = dump("full", 1)
save = R.path("ckpt")
# --steps 5000: still training when killed (the schedule and curriculum do not depend on it)
cmd = [R.zt, "--ds-config", cfg1, "--model", model, "--steps", "5000", "--save-dir", save,
       "--save-interval", "2"] + KR
env = dict(os.environ, STARPU_SILENT="1")
proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
killed = False
for line in proc.stdout:
    if "/step4 saved" in line:
        proc.send_signal(signal.SIGKILL)
        killed = True
        break
proc.wait()
R.check(killed, "the run was killed after its step-4 checkpoint")
insp = subprocess.run([ZCK, "inspect", save], capture_output=True, text=True)
R.check(insp.returncode == 0 and "sequences consumed" in insp.stdout and
        "source %s: weight 0.5" % files[0] in insp.stdout and "curriculum: step" in insp.stdout,
        "zt-ckpt inspect shows the data position:\n" + insp.stdout[:600])
fl = losses(full)
for label, n, cfg in (("resume1", 1, cfg1), ("resume2", 2, cfg2)):
    recs, w, _ = train(label, n, cfg, 10, KR + ["--resume", save, "--dump-data",
                                                R.path(label + ".dump")])
    l, rows = losses(recs), dump(label, n)
    R.check(min(l) == 5 and rows == {k: v for k, v in full_rows.items() if k[0] >= 5},
            "%s: resumed at step 5 mid-epoch on the uninterrupted run's rows, bit for bit" % label)
    if n == 1:
        R.check(all(l[s] == fl[s] for s in l) and w == wfull,
                "%s: losses and final weights bit-identical to the uninterrupted run's" % label)
    else:  # another world size reduces the gradients in another order: 1e-5
        worst = max(abs(l[s] - fl[s]) / fl[s] for s in l)
        R.check(worst <= 1e-5, "%s (a reshard to 2 ranks): losses within 1e-5 of the "
                "uninterrupted run's (worst %.1e)" % (label, worst))
bad = subprocess.run([R.zt, "--ds-config", cfg1, "--model", model, "--steps", "10", "--resume",
                      save, "--data", files[0], "--data-order", "shuffle"],
                     capture_output=True, text=True)
R.check(bad.returncode == 1 and "cannot carry over" in bad.stderr and
        bad.stderr.count("\n") == 1, "resuming with other data: one line, exit 1 (%s)" %
        bad.stderr.strip())

# ---- bad input -------------------------------------------------------------------------------
cfgb = config("bad", 6, 1)
short = R.tokens("short.bin", [1] * 10)
with open(R.path("wide_mixed.bin"), "wb") as f:
    f.write(struct.pack("<256i", 20240801, 7, 50, *([0] * 253)) + b"\0" * 100)
spec_bad = R.write("spec_bad.json", {"train": [{"path": "web.bin", "weight": -1}]})
spec_split = R.write("spec_split.json", {"train": [{"path": "web.bin"}], "valid_split": 0.2})
dd = R.tokens("dd.rank0", [1] * 100)  # what --dump-data dd would write on rank 0
cur_big = R.write("ds_cur_big.json", {"train_batch_size": B, "optimizer": {"type": "AdamW"},
                                      "curriculum_learning": dict(CURRICULUM, max_difficulty=32)})
BAD = [  # (args, exit code, text of the one line)
    (["--data", "0:" + files[0]], 2, "expected a number > 0"),
    (["--data", "abc:" + files[0]], 1, "cannot open"),
    (["--data", "0.5:%s,%s" % (files[0], files[1])], 2, "give one for every source or for none"),
    (["--data", R.path("nope.bin")], 1, "nope.bin"),
    (["--data", ","], 2, "an empty source"),
    (["--data", files[0] + ","], 2, "an empty source"),
    (["--data", short + "," + files[0]], 1, "fewer than one sequence"),
    (["--data", R.path("wide_mixed.bin")], 1, "uint32 tokens"),
    (["--data", spec_bad], 2, "train[0].weight"),
    (["--data", files[0], "--data-order", "random"], 2, "expected linear or shuffle"),
    (["--data", files[0], "--eval-interval", "2"], 2, "no validation data"),
    (["--data", files[0], "--eval-data", R.path("nope2.bin")], 1, "nope2.bin"),
    (["--data", files[0], "--ds-config", cur_big], 2, "max_difficulty"),
    (["--data", "%s,%s" % (files[0], dd), "--dump-data", R.path("dd")], 2,
     "is also a data file"),
    (["--data", spec_split, "--eval-data", valid], 2, "names validation data already"),
]
for args, code, text in BAD:
    a = ["--ds-config", cfgb, "--model", model] + args
    if "--ds-config" in args:
        a = a[2:]
    q = subprocess.run([R.zt] + a, capture_output=True, text=True,
                       env=dict(os.environ, STARPU_SILENT="1"))
    R.check(q.returncode == code and text in q.stderr and q.stderr.count("\n") == 1 and
            "zerotask: error:" in q.stderr, "bad %s: exit %d, one line with %r (got %d: %s)" %
            (" ".join(args)[-60:], code, text, q.returncode, q.stderr.strip()[:300]))

with open(dd, "rb") as f:
    R.check(len(f.read()) == 1024 + 200, "the data file --dump-data named is untouched")
sys.exit(R.finish("test_data"))
