#!/usr/bin/env python3
"""tests/faults/test_nonfinite.py: a training step that goes NaN or Inf is never silent.

A learning rate of 1e30 trains step 1 normally; its update throws the weights to about 1e30, and
step 2's loss is NaN. Cases:
  - fp32, bf16, and fp32 with gradient_clipping: the run stops at step 2 with one line naming
    the step (exit 1); --log holds step 1 only and --export is not written;
  - two ranks: both stop at step 2 (the loss is reduced over the ranks), rank 0 says so, no hang;
  - ZT_ON_NONFINITE=warn: one warning line naming step 2, training goes on (exit 0), and --export
    writes the weights with a second warning naming the first non-finite tensor;
  - weights that overflow in the last step's update (lr 1e39: finite loss and gradients) are not
    exported under the default ZT_ON_NONFINITE=stop: one line naming the tensor, exit 1;
  - fp16 keeps DeepSpeed's overflow skipping: the steps after step 1 are skipped, exit 0.

Usage: test_nonfinite.py APPS_DIR MPIEXEC WORKDIR
"""
import json
import os

import faultlib as F

F.setup()
ZT = F.prog("zt-train")
base = F.with_arg(F.tiny_run(), "--steps", "4")
STOP = ["step 2: loss is nan", "ZT_ON_NONFINITE=warn continues"]


def config(name, lr, **extra):
    d = {"train_batch_size": 2, "optimizer": {"type": "AdamW", "params": {"lr": lr}}}
    d.update(extra)
    return F.write_json(name + ".json", d)


def log_steps(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(l) for l in f]


for name, extra in (("fp32", {}), ("bf16", {"bf16": {"enabled": True}}),
                    ("fp32_clip", {"gradient_clipping": 1.0})):
    log, out = F.path(name + ".jsonl"), F.path(name + ".safetensors")
    args = F.with_arg(base, "--ds-config", config(name, 1e30, **extra))
    F.expect("%s, lr 1e30: stops at step 2" % name,
             [ZT] + args + ["--log", log, "--export", out], 1, STOP)
    F.check("%s: --log ends at step 1, no --export" % name,
            [r["step"] for r in log_steps(log)] == [1] and not os.path.exists(out),
            "log steps %s, export %s" % ([r["step"] for r in log_steps(log)],
                                         "written" if os.path.exists(out) else "absent"))

args = F.with_arg(base, "--ds-config", config("fp32", 1e30))
p = F.run([F.MPIEXEC, "--allow-run-as-root", "--oversubscribe", "-np", "2", "-x",
           "STARPU_NCPU=1", ZT] + args, timeout=120)
ours = [l for l in p.stderr.splitlines() if l.startswith("zerotask:")] if p else []
F.check("2 ranks, lr 1e30: both stop at step 2, one line",
        p is not None and p.returncode == 1 and len(ours) == 1 and
        all(w in ours[0] for w in STOP) and ours[0].startswith("zerotask: error: "),
        "exit %s, %r" % (p.returncode if p else "hang", ours))

out = F.path("warn.safetensors")
p = F.run([ZT] + args + ["--export", out], env={"ZT_ON_NONFINITE": "warn"})
lines = F.error_lines(p) if p else []
F.check("ZT_ON_NONFINITE=warn: trains on, warns once, export warns",
        p is not None and p.returncode == 0 and len(lines) == 2 and os.path.exists(out) and
        lines[0].startswith("zerotask: warning: step 2: loss is nan") and
        lines[1].startswith("zerotask: warning: export %s: tensor 'transformer.wte.weight' has "
                            "NaN at index 0; written anyway" % out),
        "exit %s, %r" % (p.returncode if p else "hang", lines))
F.expect("ZT_ON_NONFINITE=warn without --export: one warning line", [ZT] + args, 0,
         ["step 2: loss is nan", "training goes on"], env={"ZT_ON_NONFINITE": "warn"},
         prefix="zerotask: warning: ")

out = F.path("overflow.safetensors")
F.expect("weights overflowing in the last update are not exported",
         [ZT] + F.with_arg(F.with_arg(base, "--ds-config", config("lr1e39", 1e39)), "--steps",
                           "1") + ["--export", out], 1,
         ["export %s: tensor 'transformer.wte.weight' has -Inf at index 0" % out, "not written"])
F.check("overflow: no export file", not os.path.exists(out), "export exists")

log = F.path("fp16.jsonl")
p = F.run([ZT] + F.with_arg(base, "--ds-config", config("fp16", 1e30, fp16={"enabled": True})) +
          ["--log", log])
skipped = [r["skipped"] for r in log_steps(log)]
F.check("fp16, lr 1e30: overflowing steps skipped, exit 0",
        p is not None and p.returncode == 0 and skipped == [0, 1, 1, 1] and
        "zerotask: error" not in p.stderr and "zerotask: warning" not in p.stderr,
        "exit %s, skipped %s" % (p.returncode if p else "hang", skipped))
F.finish()
