"""bench/benchlib.py: what the Python benchmarks share (standard library only: the peers'
Pythons import it too)."""
import array
import os
import random
import socket
import statistics
import struct
import subprocess
import sys
import time


def run_or_exit(prog, cmd, env, what):
    """stdout of cmd; a failure ends the benchmark with one line naming what failed"""
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("%s: %s failed (exit %d): %s" % (prog, what, p.returncode,
                                                 (p.stderr or p.stdout)[-2000:]))
    return p.stdout


def openblas_envs(names):
    """[(name, environment)] for the OpenBLAS environments named in the comma list `names`:
    "default" (OPENBLAS_CORETYPE unset, the CPU's own kernels) and "Haswell"
    (OPENBLAS_CORETYPE=Haswell, as this machine sets it), in that order"""
    envs = [("default", {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}),
            ("Haswell", dict(os.environ, OPENBLAS_CORETYPE="Haswell"))]
    return [x for x in envs if x[0] in names.split(",")]


def train_args(ap, steps=6, reps=3):
    """the options of a benchmark that times zt-train runs: --zt, --model, --ds, --data (the
    "small" config on the demo corpus by default), --steps, --reps, --envs"""
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    ap.add_argument("--zt", default=os.path.join(root, "build", "apps", "zt-train"))
    ap.add_argument("--model", default=os.path.join(here, "configs", "small_model.json"))
    ap.add_argument("--ds", default=os.path.join(here, "configs", "small_ds.json"))
    ap.add_argument("--data", default=os.path.join(root, "data", "fortunes.bin"))
    ap.add_argument("--steps", type=int, default=steps)
    ap.add_argument("--reps", type=int, default=reps)
    ap.add_argument("--envs", default="default,Haswell")


def median_step_ms(step, steps, warmup):
    """call step() warmup + steps times; the median wall time of the last `steps` calls, in ms"""
    ms = []
    for s in range(warmup + steps):
        t0 = time.perf_counter()
        step()
        dt = time.perf_counter() - t0
        if s >= warmup:
            ms.append(1e3 * dt)
    return statistics.median(ms)


def kv(line):
    """the key=value fields of a result line ("name k=v k=v ...") as a dict of strings"""
    return dict(f.split("=", 1) for f in line.split()[1:] if "=" in f)


def free_port():
    """a TCP port on 127.0.0.1 nobody listens on now (MASTER_PORT of a torch.distributed job)"""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def drop_caches():
    """clean page-cache pages out (root only; else nothing), so that a read goes to the disk"""
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError:
        pass


def settle(seconds=3):
    """flush, then give the disk time to finish what the previous run left (ext4 mounted with
    discard trims a deleted file's blocks after the unlink: a run started at once would write
    while the trim goes on, whichever side deleted the file)"""
    os.sync()
    time.sleep(seconds)


def lscpu_flags():
    """(model name, flags) as lscpu prints them; empty strings without lscpu"""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    except OSError:
        return "", ""
    info = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    return info.get("Model name", "").strip(), info.get("Flags", "").strip()


def random_tokens(path, n, vocab, seed):
    """an llm.c uint16 token file (magic 20240520, version 1) of n uniform random ids in
    0..vocab-1, seeded; written to a temporary and renamed"""
    rng = random.Random(seed)
    raw = array.array("I", rng.randbytes(4 * n))
    tok = array.array("H", [x % vocab for x in raw])
    if sys.byteorder != "little":
        tok.byteswap()
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
        tok.tofile(f)
    os.replace(tmp, path)


def git_commit(root):
    """the short commit of the checkout at root, "+dirty" when tracked files changed"""
    try:
        head = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "-uno"],
                               capture_output=True, text=True).stdout.strip()
    except OSError:
        return ""
    return head + ("+dirty" if dirty else "")
