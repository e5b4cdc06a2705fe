#!/usr/bin/env python3
"""tests/graph/test_checkpoint.py: checkpoints resume exactly, reshard, and refuse bad input.

Exact resume: for ZeRO stages 0-3 on 1 and 2 ranks (and with optimizer state / parameters on
NVMe), 20 steps in one process vs 10 steps + save + a new process resuming for 10 more: the
resumed run's losses (its --log holds steps 11-20 only) and final exported weights are
bit-identical to the uninterrupted run's. The config has gradient accumulation and a
WarmupDecayLR schedule. Reshard: a checkpoint written by 2 ranks at stage 3 resumes on 1 rank at
stage 0 and on 3 ranks at stage 2, and the reverse directions; the losses continue the
uninterrupted run's to 1e-5 relative. keep_last keeps the newest tags; `latest` names the last.

Bad input, each a one-line error naming the file (and tensor), exit 1, nothing loaded: a
truncated shard, a flipped bit, a missing rank file, meta.json from a newer format, another
model's shape, `latest` naming a missing tag, a directory that is not a checkpoint. Disk full
during a save (a loop-mounted ext4 image, root only): the save fails naming the shard, exit 1,
and the previous checkpoint stays `latest` and resumes.

zt-ckpt: ls marks latest, inspect lists records, verify checks everything and names the damage,
export gives the weights that zt-train exported at that step byte for byte (and the moments),
whose held-out loss in PyTorch (float64) matches zerotask's to 1e-5; import makes a step-0
checkpoint that trains exactly like --init-from; bad command lines exit 2.

Under the sanitizers (ZT_TEST_SANITIZED=1) the exact resume runs 6 of its 12 cases (every stage,
1 and 2 ranks, NVMe), saving every 5 steps 2 of 3, and no checkpoint of 3 ranks is written.

Usage: test_checkpoint.py ZT_TRAIN MPIEXEC WORKDIR ZT_CKPT
"""
import json
import math
import os
import random
import shutil
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "ref"))
sys.path.insert(0, HERE)
from gpt2_torch import write_tokens  # noqa: E402  (llm.c token files)
from trainlib import SANITIZED, Runner, sanitized, zero_section  # noqa: E402

R = Runner(sys.argv[1], sys.argv[2], sys.argv[3],
           {"ZT_OPT_GROUP_ELEMS": "4096", "STARPU_SILENT": "1"})
ZCK = sys.argv[4]
STEPS, HALF = 20, 10
NVME = R.path("nvme")
shutil.rmtree(NVME, ignore_errors=True)
os.makedirs(NVME)
nv = {"device": "nvme", "nvme_path": NVME}

MODEL = {"vocab_size": 96, "seq_len": 16, "n_embd": 64, "n_layer": 2, "n_head": 4}
model = R.write("model.json", MODEL)
data = R.path("tokens.bin")
rng = random.Random(4)
write_tokens(data, [(i * 5 + (rng.randrange(96) if rng.random() < 0.3 else 0)) % 96
                    for i in range(6000)])


def ds(stage, n, opt=None, par=None, tag=""):
    # batch 12 = micro x 2 x n for n = 1, 2, 3; WarmupDecayLR: warmup then decay within the run
    d = {"train_batch_size": 12, "train_micro_batch_size_per_gpu": 6 // n,
         "gradient_accumulation_steps": 2, "gradient_clipping": 0.5, "seed": 5,
         "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.05}},
         "scheduler": {"type": "WarmupDecayLR",
                       "params": {"warmup_num_steps": 4, "total_num_steps": 24}}}
    d["zero_optimization"] = zero_section(stage, opt, par)
    return R.write("ds_s%d_n%d%s.json" % (stage, n, tag), d)


def run(label, cfg, n, steps, extra=(), env=None):
    """train; returns (losses by step, exported weights, process)"""
    recs, out, p = R.train(label, n, ["--ds-config", cfg, "--model", model, "--data", data,
                                      "--steps", str(steps)] + list(extra), env)
    with open(out, "rb") as f:
        return {r["step"]: r["loss"] for r in recs}, f.read(), p


def rel(a, b):
    return max(abs(a[s] - b[s]) / abs(b[s]) for s in a)


# ---- exact resume ----------------------------------------------------------------------------
straight = {}
cases = [  # (label, stage, ranks, offload_optimizer, offload_param)
    ("s0", 0, 1, None, None), ("s1", 1, 1, None, None), ("s2", 2, 1, None, None),
    ("s3", 3, 1, None, None), ("s0", 0, 2, None, None), ("s1", 1, 2, None, None),
    ("s2", 2, 2, None, None), ("s3", 3, 2, None, None),
    ("s1_nvme", 1, 1, dict(nv), None), ("s2_nvme", 2, 2, dict(nv, buffer_count=2), None),
    ("s3_nvme", 3, 1, dict(nv), dict(nv)), ("s3_nvme", 3, 2, dict(nv), dict(nv, buffer_count=2)),
]
# under the sanitizers: each stage, NVMe for optimizer state and parameters, 1 and 2 ranks once
cases = sanitized(cases, [c for c in cases if (c[0], c[2]) in (
    ("s0", 1), ("s1", 1), ("s1", 2), ("s2", 2), ("s3", 2), ("s3_nvme", 2))])
saved = {}
for label, stage, n, opt, par in cases:
    if (stage, n) not in straight:
        straight[(stage, n)] = run("straight_s%d_n%d" % (stage, n), ds(stage, n), n, STEPS)
    cfg = ds(stage, n, opt, par, tag="_" + label)
    ck = R.path("ck_%s_n%d" % (label, n))
    shutil.rmtree(ck, ignore_errors=True)
    first, _, p1 = run("first_%s_n%d" % (label, n), cfg, n, HALF, ["--save-dir", ck])
    second, blob, p2 = run("resumed_%s_n%d" % (label, n), cfg, n, STEPS, ["--resume", ck])
    saved[(label, n)] = ck
    sl, sb, _ = straight[(stage, n)]
    R.check(sorted(first) == list(range(1, HALF + 1)) and
            sorted(second) == list(range(HALF + 1, STEPS + 1)) and
            all(first[s] == sl[s] for s in first) and all(second[s] == sl[s] for s in second)
            and blob == sb,
            "%s on %d rank(s): 10 + save + resume 10 = 20 straight, losses and weights "
            "bit-identical (last loss %.9g vs %.9g)" % (label, n, second.get(STEPS, -1),
                                                        sl[STEPS]))
    if n == 1 and label == "s1":
        R.check("checkpoint %s/step10 saved" % ck in p1.stdout and
                "resumed from %s/step10: step 10 done" % ck in p2.stdout and
                open(os.path.join(ck, "latest")).read() == "step10\n",
                "progress lines name the saved and resumed tag; latest names step10")
        with open(os.path.join(ck, "step10", "meta.json")) as f:
            meta = json.load(f)
        R.check(meta["format"] == 1 and meta["step"] == 10 and meta["world_size"] == 1 and
                meta["zero_stage"] == 1 and meta["model"] == MODEL and
                meta["data"]["next_step"] == 11 and meta["lr_scheduler"]["type"] ==
                "WarmupDecayLR" and len(meta["tensors"]) == 2 + 2 * 12 + 2 and
                meta["config"]["zero_optimization"]["stage"] == 1,
                "meta.json: format, step, world, stage, model, data position, scheduler, "
                "tensors, config")

# ---- saving overlaps training -----------------------------------------------------------------
# 20 steps saving every 5: each save is written by host tasks while the next step runs; training
# is unchanged by it (bit-identical to the straight run) and every save is the state after its
# step (resuming step10 gives the straight run's steps 11-20). The trace shows the writes
# (ckpt_write, on I/O-thread rows) running while the next step's tasks run.
every5 = [("s3", 3, 2, None, None), ("s1_nvme", 1, 1, dict(nv), None),
          ("s3_nvme", 3, 2, dict(nv), dict(nv, buffer_count=2))]
for label, stage, n, opt, par in sanitized(every5, every5[1:]):
    cfg = ds(stage, n, opt, par, tag="_" + label)
    ck = R.path("ck_every5_%s_n%d" % (label, n))
    shutil.rmtree(ck, ignore_errors=True)
    tr = R.path("every5_%s_n%d.trace.json" % (label, n))
    got, blob, p = run("every5_%s_n%d" % (label, n), cfg, n, STEPS,
                       ["--save-dir", ck, "--save-interval", "5", "--trace", tr])
    again, blob2, _ = run("every5_resumed_%s_n%d" % (label, n), cfg, n, STEPS,
                          ["--resume", os.path.join(ck, "step10")])
    sl, sb, _ = straight[(stage, n)]
    R.check(got == sl and blob == sb and all(again[s] == sl[s] for s in again) and
            sorted(again) == list(range(HALF + 1, STEPS + 1)) and blob2 == sb and
            all("checkpoint %s/step%d saved" % (ck, k) in p.stdout for k in (5, 10, 15, 20)),
            "%s on %d rank(s), saving every 5 steps: training bit-identical to the straight "
            "run, and step10 resumes to it bit for bit" % (label, n))
    ev = [x for x in json.load(open(tr))["traceEvents"] if x.get("ph") == "X"]
    writes = [x for x in ev if x["name"] == "ckpt_write"]
    nparams = sum(math.prod(t["shape"]) for t in json.load(open(os.path.join(ck, "step10", "meta.json")))["tensors"])
    per_save = {k: sum(x["args"]["bytes"] for x in writes if x["args"]["step"] == k)
                for k in (5, 10, 15, 20)}
    overlapped = 0
    for k in (5, 10, 15):
        for r in range(n):
            wend = max((x["ts"] + x["dur"] for x in writes
                        if x["args"]["step"] == k and x["args"]["rank"] == r), default=-1)
            overlapped += any(x["args"]["step"] == k + 1 and x["args"]["rank"] == r and
                              x["name"] not in ("ckpt_write", "swap_in", "swap_out") and
                              x["ts"] < wend for x in ev)
    R.check(all(v == 12 * nparams for v in per_save.values()) and overlapped >= 1,
            "%s on %d rank(s): the trace has each save's ckpt_write tasks (%s bytes, 12 per "
            "parameter) and step k+1's tasks started before step k's save was written in %d of "
            "%d cases" % (label, n, sorted(set(per_save.values())), overlapped, 3 * n))

# ---- reshard ---------------------------------------------------------------------------------
def reshard(src, dst_stage, dst_n, ref, what, opt=None, par=None):
    label = "reshard_%s_to_s%d_n%d" % (os.path.basename(src), dst_stage, dst_n)
    cfg = ds(dst_stage, dst_n, opt, par, tag="_" + label)
    got, _, _ = run(label, cfg, dst_n, STEPS, ["--resume", src])
    r = rel(got, ref)
    R.check(sorted(got) == list(range(HALF + 1, STEPS + 1)) and r < 1e-5,
            "reshard %s: steps 11-20 match the uninterrupted run to %.2e relative" % (what, r))


ref23 = straight[(3, 2)][0]
reshard(saved[("s3", 2)], 0, 1, ref23, "2 ranks stage 3 -> 1 rank stage 0")
reshard(saved[("s3", 2)], 2, 3, ref23, "2 ranks stage 3 -> 3 ranks stage 2")
reshard(saved[("s0", 1)], 3, 2, straight[(0, 1)][0], "1 rank stage 0 -> 2 ranks stage 3")
if not SANITIZED:  # 3 ranks write a checkpoint (the sanitizers see 3 ranks read one above)
    ck3 = R.path("ck_s2_n3")
    shutil.rmtree(ck3, ignore_errors=True)
    ref32, _, _ = run("straight_s2_n3", ds(2, 3), 3, STEPS)
    run("first_s2_n3", ds(2, 3), 3, HALF, ["--save-dir", ck3])
    reshard(ck3, 3, 2, ref32, "3 ranks stage 2 -> 2 ranks stage 3")
reshard(saved[("s3_nvme", 2)], 1, 1, ref23,
        "2 ranks stage 3 with NVMe offload -> 1 rank stage 1 with optimizer NVMe", dict(nv))
reshard(saved[("s1", 2)], 3, 1, straight[(1, 2)][0],
        "2 ranks stage 1 -> 1 rank stage 3 with parameters on NVMe", dict(nv), dict(nv))

# ---- keep_last, interval, latest -------------------------------------------------------------
kl = R.path("ck_keep")
shutil.rmtree(kl, ignore_errors=True)
cfg = R.write("ds_keep.json", dict(json.load(open(ds(1, 1))),
                                   checkpoint={"dir": kl, "save_interval": 3, "keep_last": 2}))
run("keep", cfg, 1, 10)
R.check(sorted(os.listdir(kl)) == ["latest", "step10", "step9"] and
        open(os.path.join(kl, "latest")).read() == "step10\n",
        "checkpoint {save_interval 3, keep_last 2}, 10 steps: step9 and step10 kept, latest "
        "step10 (%s)" % sorted(os.listdir(kl)))


good = saved[("s1", 2)]  # two shards


# ---- zt-ckpt: ls, inspect, verify, export, import --------------------------------------------
def tool(*args):
    return subprocess.run([ZCK] + list(args), capture_output=True, text=True, timeout=120)


p = tool("ls", kl)
lines = p.stdout.splitlines()
R.check(p.returncode == 0 and len(lines) == 3 and lines[1].split()[:2] == ["step9", "9"] and
        lines[2].split()[:3] == ["*", "step10", "10"],
        "zt-ckpt ls: tags by step with ranks, stage, bytes; * marks latest\n%s" % p.stdout)
p = tool("inspect", saved[("s3", 2)])
R.check(p.returncode == 0 and "written by 2 rank(s) at ZeRO stage 3" in p.stdout and
        p.stdout.count("exp_avg_sq") >= 26 and "rank1.zts: rank 1 of 2" in p.stdout,
        "zt-ckpt inspect: meta summary and each shard's records")
p = tool("verify", saved[("s3_nvme", 2)])
R.check(p.returncode == 0 and p.stdout.startswith("ok: ") and "2 shard(s)" in p.stdout,
        "zt-ckpt verify of a good checkpoint: %s" % p.stdout.strip())
ex, mom = R.path("export.safetensors"), R.path("moments.safetensors")
p = tool("export", saved[("s2", 2)], "--safetensors", ex, "--moments", mom)
R.check(p.returncode == 0 and open(ex, "rb").read() ==
        open(R.path("first_s2_n2.safetensors"), "rb").read(),
        "zt-ckpt export of step10 (2 shards) = the weights that run exported after step 10, "
        "byte for byte")
sys.path.insert(0, os.path.join(HERE, "..", "ref"))
import gpt2_torch as G  # noqa: E402
import torch  # noqa: E402
mst = G.st_read(mom)
R.check(sorted(mst) == sorted(n + s for n, _ in G.param_specs(MODEL)
                              for s in (".exp_avg", ".exp_avg_sq")) and
        float(abs(mst["transformer.wte.weight.exp_avg_sq"]).max()) > 0,
        "zt-ckpt export --moments: <name>.exp_avg and <name>.exp_avg_sq of every tensor")
# the exported weights in PyTorch (float64) and in zerotask give the same loss on held-out data
held = R.path("heldout.bin")
hr = random.Random(99)
write_tokens(held, [hr.randrange(96) for _ in range(2000)])
evcfg = R.write("ds_eval.json", {"train_batch_size": 12, "train_micro_batch_size_per_gpu": 12,
                                 "gradient_accumulation_steps": 1})
p = R.launch(1, ["--ds-config", evcfg, "--model", model, "--data", held, "--init-from", ex,
                 "--eval-only"])
ours = float(p.stdout.split("eval loss")[1].split()[0]) if "eval loss" in p.stdout else None
P = {n: t.double() for n, t in G.load_weights(ex, MODEL)}
idx, tgt = G.step_batch(G.load_tokens(held, 96), 1, 12, MODEL["seq_len"])
mask = torch.tril(torch.ones(MODEL["seq_len"], MODEL["seq_len"])).bool()
theirs = float(G.gpt2_loss(P, MODEL, idx, tgt, mask))
R.check(ours is not None and abs(ours - theirs) / theirs < 1e-5,
        "exported weights: held-out loss zerotask %s vs PyTorch float64 %.9f" % (ours, theirs))
imp = R.path("ck_import")
shutil.rmtree(imp, ignore_errors=True)
p = tool("import", "--safetensors", ex, "--out", imp)
a, wa, _ = run("from_import", ds(1, 2), 2, 5, ["--resume", imp])
b, wb, _ = run("from_init", ds(1, 2), 2, 5, ["--init-from", ex])
R.check(p.returncode == 0 and a == b and wa == wb and sorted(a) == [1, 2, 3, 4, 5],
        "zt-ckpt import: resuming the imported step0 trains like --init-from (bit-identical)")
# ---- bad input -------------------------------------------------------------------------------
def fails(label, args, want, code=1, n=1, mdl=None, cfg=None):
    p = R.launch(n, ["--ds-config", cfg or ds(1, 1), "--model", mdl or model, "--data", data,
                     "--steps", str(STEPS)] + args)
    err = [l for l in p.stderr.splitlines() if "error:" in l]
    ok = p.returncode == code and len(err) >= 1 and any(all(w in l for w in want) for l in err)
    R.check(ok, "%s: exit %d, %s" % (label, p.returncode, err[0] if err else p.stderr[-500:]))


def copy_ck(name):
    d = R.path(name)
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(good, d)
    return d, os.path.join(d, "step10")


def records(shard):
    with open(shard, "rb") as f:
        head = f.read(16)
        hlen = struct.unpack("<I", head[8:12])[0]
        return json.loads(f.read(hlen))["records"]


d, t = copy_ck("bad_trunc")
sh = os.path.join(t, "rank1.zts")
os.truncate(sh, os.path.getsize(sh) - 5000)
fails("truncated shard", ["--resume", d], [sh, "truncated", "tensor"])
d, t = copy_ck("bad_flip")
sh = os.path.join(t, "rank0.zts")
rec = records(sh)[4]
with open(sh, "r+b") as f:
    f.seek(rec["offset"] + rec["bytes"] // 2)
    b = f.read(1)
    f.seek(rec["offset"] + rec["bytes"] // 2)
    f.write(bytes([b[0] ^ 0x10]))
fails("flipped bit", ["--resume", d], [sh, rec["name"], rec["role"], "checksum mismatch"])
d, t = copy_ck("bad_missing")
os.unlink(os.path.join(t, "rank1.zts"))
fails("missing rank file", ["--resume", d], ["rank1.zts", "rank 1's shard is missing"])
d, t = copy_ck("bad_format")
meta = json.load(open(os.path.join(t, "meta.json")))
meta["format"] = 2
json.dump(meta, open(os.path.join(t, "meta.json"), "w"))
fails("meta.json from a newer format", ["--resume", d], ["meta.json", "format 2", "format 1"])
other = R.write("model_other.json", dict(MODEL, n_embd=32))
fails("model shape mismatch", ["--resume", good], ["meta.json", "wte.weight", "96x64",
                                                    "96x32", "model shape mismatch"], mdl=other)
d, t = copy_ck("bad_latest")
open(os.path.join(d, "latest"), "w").write("step99\n")
fails("latest naming a missing tag", ["--resume", d], ["latest names tag 'step99'"])
# zt-ckpt on the damaged copies above and on bad command lines
for args, code, want in [(("verify", R.path("bad_flip")), 1, "checksum mismatch"),
                         (("verify", R.path("bad_missing")), 1, "rank 1's shard is missing"),
                         (("export", good), 2, "expected export PATH --safetensors OUT"),
                         (("frobnicate", good), 2, "unknown command 'frobnicate'"),
                         (("import", "--safetensors", R.path("nope.safetensors"), "--out", imp),
                          1, "nope.safetensors")]:
    p = tool(*args)
    err = p.stderr.strip().splitlines()
    R.check(p.returncode == code and len(err) == 1 and want in err[0] and
            err[0].startswith("zt-ckpt: error: "),
            "zt-ckpt %s: exit %d, %s" % (" ".join(args[:1]), p.returncode, err))
fails("not a checkpoint", ["--resume", R.work], ["neither a tag", "no latest"])
fails("--save-interval without a directory", ["--save-interval", "5"],
      ["--save-interval 5", "no checkpoint directory"], code=2)
fails("--resume with --init-from", ["--resume", good, "--init-from", "x.safetensors"],
      ["exclude each other"], code=2)

# ---- disk full during a save (root: loop-mounted ext4) ---------------------------------------
if os.geteuid() == 0 and shutil.which("mkfs.ext4"):
    with R.small_ext4("small") as mnt:
        if mnt:
            size = sum(os.path.getsize(os.path.join(good, "step10", f))
                       for f in os.listdir(os.path.join(good, "step10")))
            st = os.statvfs(mnt)
            with open(os.path.join(mnt, "filler"), "wb") as f:  # room for 1.5 checkpoints
                os.posix_fallocate(f.fileno(), 0, int(st.f_bavail * st.f_frsize - 1.5 * size))
            ckd = os.path.join(mnt, "ck")
            fails("disk full during the second save", ["--save-dir", ckd, "--save-interval", "5"],
                  ["rank0.zts", "No space left on device"], cfg=ds(1, 1))
            R.check(open(os.path.join(ckd, "latest")).read() == "step5\n" and
                    sorted(os.listdir(ckd)) == ["latest", "step5"],
                    "after the failed save: latest still names step5, no partial tag (%s)"
                    % sorted(os.listdir(ckd)))
            os.unlink(os.path.join(mnt, "filler"))
            got, _, _ = run("after_full", ds(1, 1), 1, STEPS, ["--resume", ckd])
            R.check(all(got[s] == straight[(1, 1)][0][s] for s in got) and len(got) == 15,
                    "the step5 checkpoint resumes to the uninterrupted losses")
else:
    print("skip: disk full needs root and mkfs.ext4")

sys.exit(R.finish("test_checkpoint"))
