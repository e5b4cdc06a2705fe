#!/usr/bin/env python3
"""tests/apps/test_priority.py: the critical-path priorities reach StarPU's tasks as designed
(sched/priority.c), read back from the replay file of real runs:

- 2 ranks, ZeRO stage 3, STARPU_SCHED=prio (eager-prio's range -5..5, taken as is): every task
  kind carries its level: reductions of the first layers' buckets and the gradient norm 5,
  all-gathers for the backward 4 and for the forward 2, activation gradients and the other
  reductions 3, the input 2, forward 1, parameter-gradient products -3..0 rising with the layer
  (the top layers' first), optimizer -5; every level the design names occurs;
- 1 rank, stage 1, optimizer state on NVMe: swap-ins of optimizer state -4, swap-outs -5;
- dmdas and lws: the same tasks, their priorities an order-preserving map of the levels;
- ZT_SCHED_PRIORITY=0: every task at 0, and the losses are bit-identical to the prioritized run
  (priorities reorder tasks, never change results); under eager (no priorities) every task at 0.

Usage: test_priority.py ZT_TRAIN MPIEXEC WORKDIR
"""
import os
import sys
from collections import defaultdict

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "graph"))
import trainlib  # noqa: E402

ZT, MPI, WORK = sys.argv[1:4]
run = trainlib.Runner(ZT, MPI, WORK)
L = 4
model, data = run.tiny_gpt2(n_layer=L)
NVME = run.path("nvme")
os.makedirs(NVME, exist_ok=True)


def ds(world, stage, opt=None, tag=""):
    z = trainlib.zero_section(stage, opt)
    if stage == 3:  # two slots per parameter shape for four layers: the backward gathers again
        z["stage3_max_live_parameters"] = 1000
    return run.write("ds%d_%d%s.json" % (world, stage, tag), {
        "train_batch_size": 4 * world, "train_micro_batch_size_per_gpu": 2,
        "gradient_clipping": 1.0,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
        "zero_optimization": z})


def traced(label, world, cfg, env):
    """losses and, per task kind, the (layer, priority) pairs of every rank's tasks"""
    tr = run.path(label + ".json")
    recs, _, _ = run.train(label, world, ["--ds-config", cfg, "--model", model, "--data", data,
                                          "--steps", "3", "--trace", tr, "--quiet"], env)
    kinds = defaultdict(list)
    byid = {}
    with open(run.path(label + ".ztr")) as f:
        for line in f:
            if line.startswith("#"):
                continue
            w = line.split()
            kinds[w[2]].append((int(w[4]), int(w[16])))
            byid[(w[0], w[1])] = (w[2], w[3], w[4], int(w[16]))
    traced.byid = byid
    return [r["loss"] for r in recs], kinds


def wgrad_level(layer):
    """parameter-gradient products: layer -1 (embeddings) .. L (head) onto -3 .. 0, rounded"""
    return -3 + (3 * (layer + 1) + (L + 1) // 2) // (L + 1)


def expect(kinds, kind, want, label):
    """every task of `kind` at want(layer) (a number or a set of allowed levels)"""
    got = kinds.get(kind, [])
    bad = [(l, p) for l, p in got if p not in (want(l) if callable(want) else want)]
    run.check(got and not bad, "%s: %d %s task(s), levels %s%s" % (
        label, len(got), kind, sorted({p for _, p in got}),
        ", wrong at (layer, level) %s" % bad[:4] if bad else ""))
    return {p for _, p in got}


PRIO = {"STARPU_SCHED": "prio"}
loss, k = traced("s3_prio", 2, ds(2, 3), PRIO)
lab = "stage 3, 2 ranks, prio"
for kind in ("matmul_forward", "layernorm_forward", "attention_forward", "gelu_forward",
             "residual_forward", "encoder_forward", "matmul_t_forward", "crossentropy"):
    expect(k, kind, {1}, lab)
expect(k, "load_batch", {2}, lab)
for kind in ("matmul_backward_inp", "matmul_t_backward_inp", "attention_backward",
             "gelu_backward", "layernorm_backward"):
    expect(k, kind, {3}, lab)
for kind in ("matmul_backward_weight", "matmul_backward_bias", "layernorm_param_reduce",
             "matmul_t_backward_weight", "encoder_backward"):
    expect(k, kind, lambda l: {wgrad_level(l)}, lab)
wg = sorted({(l, p) for l, p in k["matmul_backward_weight"]})
run.check(all(a[1] <= b[1] for a, b in zip(wg, wg[1:])) and wg[0][1] < wg[-1][1],
          "%s: parameter-gradient levels rise with the layer: %s" % (lab, wg))
rs = expect(k, "comm_reduce_scatter", lambda l: {5} if l <= 0 else {3}, lab)
run.check(rs == {3, 5}, "%s: reductions at 3 (top buckets) and 5 (the last ones): %s" %
          (lab, sorted(rs)))
# the export after the last step gathers at the default level 0 (outside any step)
ag = expect(k, "comm_allgather", lambda l: {0, 2, 5} if l == -1 else {2, 4}, lab)
run.check({2, 4, 5} <= ag, "%s: all-gathers for the forward (2), the backward (4) and the "
          "gradient norm (5): %s" % (lab, sorted(ag)))
expect(k, "grad_sumsq", {5}, lab)
expect(k, "grad_clip", {5}, lab)
expect(k, "adamw", {-5}, lab)
ref = traced.byid

# other policies' ranges: the same tasks (same ids, kinds, steps, layers), levels mapped in order
for pol in ("dmdas", "lws"):
    lp, _ = traced("s3_" + pol, 2, ds(2, 3), {"STARPU_SCHED": pol})
    got = traced.byid
    same = set(got) == set(ref) and all(got[t][:3] == ref[t][:3] for t in ref)
    pairs = sorted({(ref[t][3], got[t][3]) for t in ref if t in got})
    mono = all(a[1] <= b[1] for a, b in zip(pairs, pairs[1:]))
    func = len({a for a, _ in pairs}) == len(pairs)
    run.check(same and mono and func and lp == loss, "%s: the same %d tasks, levels mapped in "
              "order %s, losses bit-identical to prio's" % (pol, len(got), pairs))

loss0, k0 = traced("s3_noprio", 2, ds(2, 3), dict(PRIO, ZT_SCHED_PRIORITY="0"))
levels0 = {p for v in k0.values() for _, p in v}
run.check(levels0 == {0}, "ZT_SCHED_PRIORITY=0: every task at level 0 (%s)" % sorted(levels0))
run.check(loss0 == loss and len(loss) == 3, "ZT_SCHED_PRIORITY=0: losses %s, bit-identical to "
          "the prioritized run's %s" % (loss0, loss))

_, ke = traced("s2_eager", 1, ds(1, 2), {"STARPU_SCHED": "eager"})
levels = {p for v in ke.values() for _, p in v}
run.check(levels == {0}, "eager (no priorities): every task at 0 (%s)" % sorted(levels))

nv = {"device": "nvme", "nvme_path": NVME, "buffer_count": 2}
_, kn = traced("s1_nvme", 1, ds(1, 1, nv, "_nvme"), PRIO)
lab = "stage 1, optimizer state on NVMe, prio"
expect(kn, "swap_in", {-4}, lab)
expect(kn, "swap_out", {-5}, lab)
expect(kn, "adamw", {-5}, lab)

sys.exit(run.finish("test_priority"))
