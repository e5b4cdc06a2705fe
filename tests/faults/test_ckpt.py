#!/usr/bin/env python3
"""tests/faults/test_ckpt.py: a checkpoint's files are bound together, and one directory has one
writer.

Cases (each the exit code and the one error line, under a timeout):
  - a bit flipped in meta.json's step: `zt-ckpt verify`, `inspect`, `export` and a resume refuse
    it (checksum mismatch naming the file and both checksums); `zt-ckpt ls` marks the tag;
  - meta.json's checksum removed: refused (it records a run id, so it was checksummed);
  - the checksum covers the file's own bytes (those before its member), not how a JSON library
    prints them: a number written another way (4.0 for 4) with the checksum of its bytes is
    accepted; re-indenting, anything after the checksum's member, or a NUL byte (which would
    hide what follows it from the parser) is refused;
  - numbers out of range in meta.json (a shape of 1e300, a step of 1e300): refused naming the
    tensor or the fields, never converted (undefined behaviour);
  - a shard copied in from another checkpoint of the same run (another step), or from another
    run's checkpoint of the same step: verify and resume refuse it naming the shard and the field;
  - a checkpoint written before checksums and run ids (no meta_crc32c, no run_id, shards without
    them) still verifies, with a note, and resumes; its meta.json beside a shard that records a
    run id is refused;
  - resume with a model whose n_head differs (no tensor shape shows it): refused naming n_head
    and both values;
  - `zt-ckpt import` into a directory holding checkpoints: refused, `latest` untouched; with
    --tag NAME the weights go beside them and `latest` stays; --set-latest moves it; a tag that
    exists is refused; a bad tag name is a usage error (exit 2); a directory whose tags cannot
    be listed is refused (not taken as empty);
  - keep_last removes only the run's own step<N> tags: an imported tag and another run's tags
    stay;
  - two runs sharing a --save-dir: the second (one rank, or a 2-rank job whose rank 0 holds the
    job's lock) stops at its start naming the first's pid, host and start time; once the first
    is killed (SIGKILL: its lock file stays, unlocked) a run saves there again, and a run that
    ends removes its lock file.

Usage: test_ckpt.py APPS_DIR MPIEXEC WORKDIR
"""
import json
import os
import shutil
import socket
import struct
import subprocess
import time

import faultlib as F

F.setup()
ZT, CK = F.prog("zt-train"), F.prog("zt-ckpt")
base = F.tiny_run()
TOOL = "zt-ckpt: error: "


def train(*extra, steps=4):
    return F.run([ZT] + F.with_arg(base, "--steps", str(steps)) + list(extra), timeout=120)


def copy(src, name):
    dst = F.path(name)
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    return dst


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def shard_header(path):
    with open(path, "rb") as f:
        head = f.read(16)
        return json.loads(f.read(struct.unpack("<I", head[8:12])[0]))


def rewrite_shard_header(path, header):
    """the shard with a new header (same records, same offsets) and its CRC, as an older
    zerotask would have written it"""
    text = json.dumps(header).encode()
    with open(path, "r+b") as f:
        f.seek(8)
        f.write(struct.pack("<II", len(text), crc32c(text)))
        f.write(text)


def reseal(meta, change):
    """meta.json with change(text before its checksum member) and the checksum of the new bytes
    appended as the writer does (the CRC32C of the bytes before the member's comma)"""
    text = open(meta, "rb").read()
    key = text.rindex(b'"meta_crc32c"')
    body = change(text[:text.rindex(b",", 0, key)])
    open(meta, "wb").write(body + b',\n\t"meta_crc32c":\t"%08x"\n}' % crc32c(body))


def tags(d):
    return sorted(t for t in os.listdir(d) if not t.startswith(".") and t != "latest")


def latest(d):
    return open(os.path.join(d, "latest")).read().strip()


# two checkpoints of one run (step2, step4) and another run's step4
ck = F.path("ck")
other = F.path("ck_other")
F.check("setup", train("--save-dir", ck, "--save-interval", "2").returncode == 0 and
        train("--save-dir", other, "--seed", "7").returncode == 0 and
        latest(ck) == "step4", "two runs saved")
resume = F.with_arg(base, "--steps", "6")

# ---- meta.json checksummed -------------------------------------------------------------------
flip = copy(ck, "ck_flip")
meta = os.path.join(flip, "step4", "meta.json")
text = open(meta, "rb").read()
at = text.index(b'"step":') + len(b'"step":')
while text[at:at + 1] in (b" ", b"\t"):
    at += 1
open(meta, "wb").write(text[:at] + bytes([text[at] ^ 0x01]) + text[at + 1:])  # 4 -> 5
words = [meta, "checksum mismatch", "meta_crc32c says"]
F.expect("meta.json step bit flip: verify", [CK, "verify", flip], 1, words, prefix=TOOL)
F.expect("meta.json step bit flip: inspect", [CK, "inspect", flip], 1, words, prefix=TOOL)
F.expect("meta.json step bit flip: export",
         [CK, "export", flip, "--safetensors", F.path("x.safetensors")], 1, words, prefix=TOOL)
F.expect("meta.json step bit flip: resume", [ZT] + resume + ["--resume", flip], 1, words)
p = F.run([CK, "ls", flip])
F.check("meta.json step bit flip: ls marks it", p is not None and p.returncode == 0 and
        any(l.startswith("!") and "step4" in l and "checksum mismatch" in l
            for l in p.stdout.splitlines()), p and p.stdout.strip().splitlines()[-1:])

strip = copy(ck, "ck_strip")
meta = os.path.join(strip, "step4", "meta.json")
m = json.load(open(meta))
m.pop("meta_crc32c", None)
json.dump(m, open(meta, "w"))
F.expect("meta.json checksum removed: verify", [CK, "verify", strip], 1,
         [meta, "no meta_crc32c", "run_id"], prefix=TOOL)
F.expect("meta.json checksum removed: resume", [ZT] + resume + ["--resume", strip], 1,
         [meta, "no meta_crc32c"])

# the checksum covers the file's bytes, whatever a JSON library would print
other_print = copy(ck, "ck_print")
meta = os.path.join(other_print, "step4", "meta.json")
reseal(meta, lambda b: b.replace(b'"step":\t4,', b'"step":\t4.0,', 1))
p = F.run([CK, "verify", other_print])
F.check("meta.json numbers printed another way, checksum of its bytes: verify accepts it",
        p is not None and p.returncode == 0 and b'"step":\t4.0,' in open(meta, "rb").read(),
        p and (p.stdout + p.stderr).strip())
p = F.run([ZT] + resume + ["--resume", other_print], timeout=120)
F.check("meta.json numbers printed another way: resumes", p is not None and p.returncode == 0,
        p and F.error_lines(p)[-1:])
indent = copy(ck, "ck_indent")
meta = os.path.join(indent, "step4", "meta.json")
json.dump(json.load(open(meta)), open(meta, "w"), indent=2)
F.expect("meta.json re-indented (checksum kept): verify", [CK, "verify", indent], 1,
         [meta, "checksum mismatch"], prefix=TOOL)
tail = copy(ck, "ck_tail")
meta = os.path.join(tail, "step4", "meta.json")
open(meta, "ab").write(b'\n{"step": 5}\n')
F.expect("bytes after meta.json's checksum member: verify", [CK, "verify", tail], 1,
         [meta, "meta_crc32c is malformed", "nothing after"], prefix=TOOL)
nul = copy(ck, "ck_nul")
meta = os.path.join(nul, "step4", "meta.json")
open(meta, "ab").write(b'\0{"step": 5}\n')
F.expect("a NUL byte in meta.json: verify", [CK, "verify", nul], 1,
         [meta, "holds a NUL byte"], prefix=TOOL)

# numbers beyond what an integer holds: refused, never converted
huge = copy(ck, "ck_huge_shape")
meta = os.path.join(huge, "step4", "meta.json")
first = json.load(open(meta))["tensors"][0]
shape = json.dumps(first["shape"], separators=(",", ":")).encode()
reseal(meta, lambda b: b.replace(b'"shape":\t[' + shape[1:-1].replace(b",", b", ") + b"]",
                                 b'"shape":\t[1e300]', 1))
F.expect("meta.json shape 1e300: verify", [CK, "verify", huge], 1,
         [meta, "tensor %s has a bad shape" % first["name"], "2^40"], prefix=TOOL)
F.expect("meta.json shape 1e300: resume", [ZT] + resume + ["--resume", huge], 1,
         [meta, "tensor %s has a bad shape" % first["name"]])
huge = copy(ck, "ck_huge_step")
meta = os.path.join(huge, "step4", "meta.json")
reseal(meta, lambda b: b.replace(b'"step":\t4,', b'"step":\t1e300,', 1))
F.expect("meta.json step 1e300: verify", [CK, "verify", huge], 1,
         [meta, "not a zerotask checkpoint's metadata", "step (a whole number >= 0)"],
         prefix=TOOL)

# ---- shards bound to their checkpoint --------------------------------------------------------
mix = copy(ck, "ck_mix")
shard = os.path.join(mix, "step4", "rank0.zts")
shutil.copy(os.path.join(ck, "step2", "rank0.zts"), shard)
words = [shard, "step 2, expected 4", "copied from another checkpoint"]
F.expect("shard of another step: verify", [CK, "verify", mix], 1, words, prefix=TOOL)
F.expect("shard of another step: export",
         [CK, "export", mix, "--safetensors", F.path("x.safetensors")], 1, words, prefix=TOOL)
F.expect("shard of another step: resume", [ZT] + resume + ["--resume", mix], 1, words)

run2 = copy(ck, "ck_run2")
shard = os.path.join(run2, "step4", "rank0.zts")
shutil.copy(os.path.join(other, "step4", "rank0.zts"), shard)
meta_run_id = json.load(open(os.path.join(ck, "step4", "meta.json"))).get("run_id")
words = [shard, "run id %s, expected %s" % (shard_header(shard).get("run_id"), meta_run_id),
         "another run"]
F.expect("shard of another run: verify", [CK, "verify", run2], 1, words, prefix=TOOL)
F.expect("shard of another run: resume", [ZT] + resume + ["--resume", run2], 1, words)

# ---- checkpoints written before checksums and run ids ----------------------------------------
old = copy(ck, "ck_old")
meta = os.path.join(old, "step4", "meta.json")
m = json.load(open(meta))
m.pop("meta_crc32c", None), m.pop("run_id", None)
json.dump(m, open(meta, "w"), indent=1)
F.expect("older meta.json beside a shard with a run id", [CK, "verify", old], 1,
         [os.path.join(old, "step4", "rank0.zts"), "expected none"], prefix=TOOL)
shard = os.path.join(old, "step4", "rank0.zts")
h = shard_header(shard)
h.pop("run_id", None), h.pop("step", None)
rewrite_shard_header(shard, h)
p = F.run([CK, "verify", old])
F.check("older checkpoint: verify accepts it with a note",
        p is not None and p.returncode == 0 and "written before checksums" in p.stdout,
        p and (p.stdout + p.stderr).strip())
p = F.run([ZT] + resume + ["--resume", old], timeout=120)
F.check("older checkpoint: resumes", p is not None and p.returncode == 0,
        p and F.error_lines(p)[-1:])

# ---- the model shape on resume ---------------------------------------------------------------
model4 = F.write_json("model_nhead4.json", {"vocab_size": 64, "seq_len": 8, "n_embd": 16,
                                            "n_layer": 1, "n_head": 4})
F.expect("resume with another n_head", [ZT] + F.with_arg(resume, "--model", model4) +
         ["--resume", ck], 1, [os.path.join(ck, "step4", "meta.json"), "n_head is 2", model4,
                               "has 4", "model shape mismatch"])

# ---- zt-ckpt import into a directory that holds checkpoints ----------------------------------
weights = F.path("w.safetensors")
F.check("export for import", F.run([CK, "export", ck, "--safetensors", weights]).returncode == 0,
        weights)
imp = copy(ck, "ck_import")
F.expect("import into a checkpoint directory", [CK, "import", "--safetensors", weights, "--out",
                                                imp], 1,
         [imp, "already holds checkpoints", "--tag NAME"], prefix=TOOL)
F.check("import refused: latest untouched", latest(imp) == "step4" and
        not os.path.exists(os.path.join(imp, "step0")), latest(imp))
p = F.run([CK, "import", "--safetensors", weights, "--out", imp, "--tag", "hf"])
F.check("import --tag: beside the others, latest stays",
        p.returncode == 0 and latest(imp) == "step4" and
        F.run([CK, "verify", os.path.join(imp, "hf")]).returncode == 0,
        (p.stdout + p.stderr).strip())
F.expect("import --tag of an existing tag", [CK, "import", "--safetensors", weights, "--out", imp,
                                             "--tag", "hf"], 1, [imp, "tag hf exists"],
         prefix=TOOL)
p = F.run([CK, "import", "--safetensors", weights, "--out", imp, "--tag", "hf2", "--set-latest"])
F.check("import --tag --set-latest moves latest", p.returncode == 0 and latest(imp) == "hf2",
        (p.stdout + p.stderr).strip())
F.expect("import --set-latest without --tag", [CK, "import", "--safetensors", weights, "--out",
                                               imp, "--set-latest"], 2, ["--tag NAME"],
         prefix=TOOL)

F.expect("import --tag with a bad name", [CK, "import", "--safetensors", weights, "--out", imp,
                                         "--tag", ".hidden"], 2,
         ["tag '.hidden'", "not starting with '.'", "see zt-ckpt --help"], prefix=TOOL)
F.check("import --tag with a bad name: nothing written", tags(imp) == ["hf", "hf2", "step2",
                                                                        "step4"], tags(imp))

# a directory whose tags cannot be listed (no read permission; as another user when root,
# whom permissions do not stop) is not taken for an empty one
unreadable = copy(ck, "ck_unreadable")
os.unlink(os.path.join(unreadable, "latest"))
os.chmod(unreadable, 0o333)
as_user = (["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
           if os.geteuid() == 0 else [])
try:
    F.expect("import into a directory that cannot be listed",
             as_user + [CK, "import", "--safetensors", weights, "--out", unreadable], 1,
             [unreadable, "cannot open the directory"], prefix=TOOL)
finally:
    os.chmod(unreadable, 0o755)
F.check("import into a directory that cannot be listed: no latest made",
        not os.path.exists(os.path.join(unreadable, "latest")), tags(unreadable))

# ---- keep_last prunes the run's own step tags only -------------------------------------------
keep2 = F.write_json("ds_keep2.json", {"train_batch_size": 2, "checkpoint": {"keep_last": 2},
                                       "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}})
kept = copy(ck, "ck_keep")
p = F.run([CK, "import", "--safetensors", weights, "--out", kept, "--tag", "hf"])
F.check("keep_last: an imported tag beside the run's", p.returncode == 0, p.stderr.strip())
p = F.run([ZT] + F.with_arg(F.with_arg(base, "--steps", "8"), "--ds-config", keep2) +
          ["--resume", kept, "--save-dir", kept, "--save-interval", "1"], timeout=120)
F.check("keep_last 2: the imported tag stays, the run's newest two step tags are kept",
        p is not None and p.returncode == 0 and tags(kept) == ["hf", "step7", "step8"],
        p and (tags(kept), F.error_lines(p)[-1:]))
keep1 = F.write_json("ds_keep1.json", {"train_batch_size": 2, "checkpoint": {"keep_last": 1},
                                       "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}})
theirs = copy(other, "ck_theirs")
p = F.run([ZT] + F.with_arg(F.with_arg(base, "--steps", "2"), "--ds-config", keep1) +
          ["--save-dir", theirs, "--save-interval", "1"], timeout=120)
F.check("keep_last 1: another run's step4 stays beside this run's newest tag",
        p is not None and p.returncode == 0 and tags(theirs) == ["step2", "step4"] and
        latest(theirs) == "step2", p and (tags(theirs), F.error_lines(p)[-1:]))

# ---- one writer per --save-dir ---------------------------------------------------------------
shared = F.path("ck_shared")
first = subprocess.Popen([ZT] + F.with_arg(base, "--steps", "10000000") +
                         ["--save-dir", shared, "--save-interval", "100000000"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
lock = os.path.join(shared, ".lock")
for _ in range(600):  # until the first run holds the lock (its line written)
    if os.path.exists(lock) and open(lock).read().startswith("pid"):
        break
    time.sleep(0.05)
held = ["--save-dir", shared, "is in use by pid %d on host %s since " %
        (first.pid, socket.gethostname())]
try:
    F.expect("a second run on the same --save-dir", [ZT] + base + ["--save-dir", shared], 1,
             held)
    # a 2-rank job: rank 0 takes the job's one lock and names the holder; mpiexec adds its own
    # lines, so only the zerotask line is counted
    p = F.run([F.MPIEXEC, "--allow-run-as-root", "--oversubscribe", "-np", "2", "-x",
               "STARPU_NCPU=1", ZT] + base + ["--save-dir", shared], timeout=120)
    ours = [l for l in (p.stderr.splitlines() if p else []) if l.startswith("zerotask: error:")]
    F.check("a 2-rank job on a --save-dir in use", p is not None and p.returncode == 1 and
            len(ours) == 1 and "rank 0: " in ours[0] and all(w in ours[0] for w in held),
            p and "exit %d, %r" % (p.returncode, ours))
finally:
    first.kill()
    first.wait()
F.check("a killed holder leaves its lock file", os.path.exists(lock), lock)
p = train("--save-dir", shared, steps=2)
F.check("a dead holder's lock does not block", p is not None and p.returncode == 0 and
        latest(shared) == "step2", p and F.error_lines(p)[-1:])
F.check("a run that ends removes its lock file", not os.path.exists(lock), lock)
F.finish()
