#!/usr/bin/env python3
"""bench/swap_vs_fio.py: zerotask's NVMe swap engine (io/zt_aio.h) against fio, back to back.

For each configuration (block size x queue depth; by default DeepSpeed's aio defaults 1 MiB x 8,
and 256 KiB x 32) it runs, REPS times in alternation on the same directory:
  fio   --ioengine=io_uring --direct=1 --numjobs=1 --rw=write, then --rw=read of the same file
        (--bs, --iodepth, --size as ours; --fallocate=none: a fresh file, as ours; JSON output)
  zt-swap-bench (bench/swap_bench.c): the same bytes written from one aligned buffer with
        zt_aio_write on an O_DIRECT file, fsync'd (timed apart, as fio's bandwidth excludes it),
        then read back with zt_aio_read.
Every file is deleted after its rep. The table shows the median GB/s (1e9 bytes/s) over the reps
per direction and the ratio zerotask / fio (the target is >= 0.9).

Usage: bench/swap_vs_fio.py [--dir DIR] [--bytes 1G] [--configs 1M:8,256K:32] [--reps 3]
                            [--engine auto|io_uring|threads] [--call-bytes C] [--build build]
DIR defaults to /work/.bench_swap (the disk that backs /work); it is created if missing and
removed at the end if this script created it. Needs /usr/bin/fio and a build with the bench
targets (cmake --build build); uses only the standard library.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    s = s.strip().upper().rstrip("B").rstrip("I")
    if s and s[-1] in mult:
        return int(float(s[:-1]) * mult[s[-1]])
    return int(s)


def human(n):
    for unit, m in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= m and n % m == 0:
            return "%d %s" % (n // m, unit)
    return "%d B" % n


def run(cmd, what):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("swap_vs_fio: %s failed (exit %d): %s" % (what, p.returncode,
                                                          (p.stderr or p.stdout)[-2000:]))
    return p.stdout


def fio_rep(fio, path, nbytes, bs, qd):
    out = {}
    try:
        for rw in ("write", "read"):
            cmd = [fio, "--name=zt-swap-vs-fio", "--filename=" + path, "--ioengine=io_uring",
                   "--direct=1", "--rw=" + rw, "--bs=%d" % bs, "--iodepth=%d" % qd,
                   "--size=%d" % nbytes, "--numjobs=1", "--fallocate=none",
                   "--output-format=json"]
            j = json.loads(run(cmd, "fio --rw=" + rw))
            job = j["jobs"][0]
            if job.get("error"):
                sys.exit("swap_vs_fio: fio --rw=%s: error %s" % (rw, job["error"]))
            out[rw] = job[rw]["bw_bytes"] / 1e9
    finally:
        if os.path.exists(path):
            os.unlink(path)
    return out


def zt_rep(exe, d, nbytes, bs, qd, engine, call):
    cmd = [exe, "--dir", d, "--bytes", str(nbytes), "--block-size", str(bs), "--queue-depth",
           str(qd), "--engine", engine, "--reps", "1"]
    if call:
        cmd += ["--call-bytes", str(call)]
    line = [l for l in run(cmd, "zt-swap-bench").splitlines() if l.startswith("swap_bench ")][-1]
    kv = dict(f.split("=", 1) for f in line.split()[1:])
    return {"write": float(kv["write_GBps"]), "read": float(kv["read_GBps"]),
            "fsync_ms": float(kv["fsync_ms"]), "engine": kv["engine"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default="/work/.bench_swap")
    ap.add_argument("--bytes", default="1G")
    ap.add_argument("--configs", default="1M:8,256K:32", help="BLOCK:DEPTH,...")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--engine", default="auto", choices=["auto", "io_uring", "threads"])
    ap.add_argument("--call-bytes", default="0",
                    help="bytes per zt_aio_write/read call (0: one call for all)")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--fio", default=shutil.which("fio") or "/usr/bin/fio")
    a = ap.parse_args()
    nbytes, call = size(a.bytes), size(a.call_bytes)
    exe = os.path.join(a.build, "bench", "zt-swap-bench")
    if not os.access(exe, os.X_OK):
        sys.exit("swap_vs_fio: %s not found: build first (cmake --build build)" % exe)
    fio_ver = run([a.fio, "--version"], "fio --version").strip()
    created = not os.path.isdir(a.dir)
    os.makedirs(a.dir, exist_ok=True)
    fs = subprocess.run(["df", "--output=source,fstype", a.dir], capture_output=True,
                        text=True).stdout.split("\n")[1].split()
    configs = [tuple(size(x) if i == 0 else int(x) for i, x in enumerate(c.split(":")))
               for c in a.configs.split(",")]
    print("zerotask %s vs %s; %s per direction on %s (%s, %s), O_DIRECT, 1 job; %d reps "
          "in alternation; zt_aio calls of %s" % (exe, fio_ver, human(nbytes), a.dir, fs[0],
                                                  fs[1], a.reps,
                                                  human(call) if call else "all the bytes"))
    rows = []
    try:
        for bs, qd in configs:
            res = {"fio": {"write": [], "read": []}, "zt": {"write": [], "read": [],
                                                            "fsync_ms": []}}
            engine = "?"
            for rep in range(a.reps):
                f = fio_rep(a.fio, os.path.join(a.dir, "fio_swap.%d" % os.getpid()), nbytes, bs,
                            qd)
                z = zt_rep(exe, a.dir, nbytes, bs, qd, a.engine, call)
                engine = z["engine"]
                for k in ("write", "read"):
                    res["fio"][k].append(f[k])
                    res["zt"][k].append(z[k])
                res["zt"]["fsync_ms"].append(z["fsync_ms"])
                print("  bs %-7s qd %-3d rep %d: fio write %.3f read %.3f | zerotask (%s) write "
                      "%.3f read %.3f GB/s (fsync %.0f ms)"
                      % (human(bs), qd, rep + 1, f["write"], f["read"], engine, z["write"],
                         z["read"], z["fsync_ms"]), flush=True)
            for k in ("write", "read"):
                fm, zm = statistics.median(res["fio"][k]), statistics.median(res["zt"][k])
                rows.append((human(bs), qd, k, fm, zm, zm / fm if fm else float("nan"), engine))
    finally:
        if created:
            shutil.rmtree(a.dir, ignore_errors=True)
    print()
    print("| block | depth | direction | fio GB/s | zerotask GB/s | ratio |")
    print("|---|---|---|---|---|---|")
    for bs, qd, k, fm, zm, r, _ in rows:
        print("| %s | %d | %s | %.3f | %.3f | %.2fx |" % (bs, qd, k, fm, zm, r))
    worst = min(r[5] for r in rows)
    print("\ntarget: zerotask >= 0.9x of fio in every row: %s (worst %.2fx)"
          % ("yes" if worst >= 0.9 else "no", worst))


if __name__ == "__main__":
    main()
