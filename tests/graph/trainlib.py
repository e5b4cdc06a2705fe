"""tests/graph/trainlib.py: what the zt-train script tests share: JSON inputs in a work
directory, launching one rank (directly) or several (mpirun), and ok/FAIL bookkeeping."""
import contextlib
import json
import os
import shutil
import struct
import subprocess
import sys


# The sanitizer pass (ZT_TEST_SANITIZED=1, tests/CMakeLists.txt) runs one case of each code
# path; the release pass runs them all.
SANITIZED = os.environ.get("ZT_TEST_SANITIZED", "0") == "1"


def sanitized(full, few):
    """the cases to run: `few` (a subset of `full` that still reaches every code path) under the
    sanitizers, `full` otherwise"""
    return few if SANITIZED else full


def zero_section(stage, opt=None, par=None):
    """zero_optimization for the small test models: small reduce buckets; at stage 3 vectors
    of <= 300 elements persistent and a small prefetch window; offload sections if given"""
    z = {"stage": stage, "reduce_bucket_size": 5000}
    if stage == 3:
        z.update({"stage3_param_persistence_threshold": 300, "stage3_prefetch_bucket_size": 20000})
    if opt:
        z["offload_optimizer"] = opt
    if par:
        z["offload_param"] = par
    return z


def f32_tensors(path):
    """every tensor of an F32 safetensors file, in its order: {name: raw little-endian bytes}
    (a test reads them with array.array("f") or numpy); another dtype ends the test"""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        body = f.read()
    out = {}
    for name, t in head.items():
        if name == "__metadata__":
            continue
        if t["dtype"] != "F32":
            print("FAIL %s: tensor %s is %s, expected F32" % (path, name, t["dtype"]))
            sys.exit(1)
        out[name] = body[t["data_offsets"][0]:t["data_offsets"][1]]
    return out


def run_tool(exe, *args, ok=True, timeout=120):
    """exe ARGS (a tool such as zt-trace); with ok, a non-zero exit ends the test, printing it"""
    p = subprocess.run([exe] + [str(a) for a in args], capture_output=True, text=True,
                       timeout=timeout)
    if ok and p.returncode != 0:
        print("FAIL %s %s: exit %d: %s" % (os.path.basename(exe), " ".join(map(str, args)),
                                          p.returncode, p.stderr))
        sys.exit(1)
    return p


class Runner:
    def __init__(self, zt, mpiexec, work, env=None):
        self.zt, self.mpiexec, self.work = zt, mpiexec, work
        self.env = dict(env or {})
        self.bad = []
        # a fresh WORK each run: nothing a previous run left can make a check pass
        for dirpath, _, _ in os.walk(work):
            if os.path.ismount(dirpath):
                subprocess.run(["umount", dirpath], stderr=subprocess.DEVNULL)
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work, exist_ok=True)

    def path(self, name):
        return os.path.join(self.work, name)

    def write(self, name, obj):
        """obj as JSON into WORK/name; returns the path"""
        p = self.path(name)
        with open(p, "w") as f:
            json.dump(obj, f)
        return p

    def ckpt_config(self, tag, stage, n, accum, ckpt=None, prec=None, par=None, batch=4):
        """WORK/ds_TAG.json for the activation checkpointing tests: a global batch of `batch`
        sequences per micro-batch over n ranks, accumulation accum, ZeRO stage (par: the
        offload section of both the optimizer and the parameters), precision prec, and the
        activation_checkpointing section ckpt (None: none)"""
        d = {"train_batch_size": batch * accum, "train_micro_batch_size_per_gpu": batch // n,
             "gradient_accumulation_steps": accum, "seed": 3, "gradient_clipping": 1.0,
             "optimizer": {"type": "AdamW", "params": {"lr": 3e-3}},
             "zero_optimization": zero_section(stage, par, par)}
        if prec:
            d[prec] = {"enabled": True}
        if ckpt is not None:
            d["activation_checkpointing"] = ckpt
        return self.write("ds_%s.json" % tag, d)

    def tokens(self, name, toks, wide=False):
        """a token file into WORK/name, llm.c's header: uint16 tokens (magic 20240520, version
        1), or with wide uint32 tokens (magic 20240801, version 7)"""
        magic, version, fmt = (20240801, 7, "I") if wide else (20240520, 1, "H")
        p = self.path(name)
        with open(p, "wb") as f:
            f.write(struct.pack("<256i", magic, version, len(toks), *([0] * 253)))
            f.write(struct.pack("<%d%s" % (len(toks), fmt), *toks))
        return p

    def tiny_gpt2(self, V=64, T=16, n_layer=2):
        """a tiny GPT-2 (32 wide, 2 heads) and 4000 tokens of a fixed pattern: (model, data)"""
        model = self.write("model.json", {"vocab_size": V, "seq_len": T, "n_embd": 32,
                                          "n_layer": n_layer, "n_head": 2})
        return model, self.tokens("tokens.bin", [(7 * i) % V for i in range(4000)])

    def launch(self, n, args, env=None, timeout=240):
        """zt-train ARGS on n ranks (STARPU_NCPU=1 each under mpirun)"""
        e = dict(self.env, **(env or {}))
        if n == 1:
            return subprocess.run([self.zt] + args, capture_output=True, text=True,
                                  timeout=timeout, env=dict(os.environ, **e))
        cmd = [self.mpiexec, "--allow-run-as-root", "--oversubscribe", "-np", str(n),
               "-x", "STARPU_NCPU=1"]
        for k, v in e.items():
            cmd += ["-x", "%s=%s" % (k, v)]
        return subprocess.run(cmd + [self.zt] + args, capture_output=True, text=True,
                              timeout=timeout)

    def train(self, label, n, args, env=None, timeout=240):
        """zt-train ARGS on n ranks, logging to WORK/label.jsonl and exporting the weights to
        WORK/label.safetensors; a failed run ends the test. Returns (the log's records, the
        export's path, the process)"""
        log, out = self.path(label + ".jsonl"), self.path(label + ".safetensors")
        try:
            p = self.launch(n, list(args) + ["--log", log, "--export", out], env, timeout)
        except subprocess.TimeoutExpired:
            print("FAIL %s: no end within %d s" % (label, timeout))
            sys.exit(1)
        if p.returncode != 0:
            print("FAIL %s: exit %d\n%s%s" % (label, p.returncode, p.stdout[-2000:],
                                             p.stderr[-3000:]))
            sys.exit(1)
        with open(log) as f:
            return [json.loads(l) for l in f], out, p

    @contextlib.contextmanager
    def small_ext4(self, name, mib=16):
        """a fresh ext4 image of mib MiB loop-mounted at WORK/name (needs root and mkfs.ext4),
        unmounted afterwards; yields the mount point, or None when the mount fails"""
        img, mnt = self.path(name + ".img"), self.path(name)
        os.makedirs(mnt, exist_ok=True)
        subprocess.run(["umount", mnt], stderr=subprocess.DEVNULL)
        with open(img, "wb") as f:
            f.truncate(mib << 20)
        subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", img], check=True)
        if subprocess.run(["mount", "-o", "loop", img, mnt]).returncode != 0:
            yield None
            return
        try:
            yield mnt
        finally:
            subprocess.run(["umount", mnt])

    def check(self, cond, what):
        print("%s %s" % ("ok  " if cond else "FAIL", what), flush=True)
        if not cond:
            self.bad.append(what)
        return cond

    def finish(self, name):
        if self.bad:
            print("%s: %d check(s) failed:\n  %s" % (name, len(self.bad), "\n  ".join(self.bad)))
            return 1
        print("%s: all checks passed" % name)
        return 0
