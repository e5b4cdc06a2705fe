#!/usr/bin/env python3
"""tests/faults/test_env.py: StarPU's own environment variables with a bad value end zt-train
with one line (exit 2, a configuration error) before StarPU starts, instead of StarPU's
assertion and backtrace; a good value of each still trains (exit 0).

Cases:
  - the values seen to abort StarPU: STARPU_NCPU=-3, STARPU_NCPU=abc, STARPU_HOME naming a file;
  - each checked variable with a value StarPU cannot take: every integer variable (STARPU_NCPU,
    STARPU_NCUDA, STARPU_NOPENCL, STARPU_LIMIT_CPU_MEM, ... as sched/starpu_env.c lists them)
    with letters, a sign, a fraction, an empty value and a number past the int range;
    STARPU_SCHED naming no policy; STARPU_HOME / STARPU_PERF_MODEL_DIR naming a file or a path
    under a file; STARPU_WORKERS_CPUID that does not parse, runs backwards or names a CPU that
    does not exist;
  - only the calibration directory StarPU will use is checked, chosen as StarPU 1.3 does:
    STARPU_PERF_MODEL_DIR, else the first set of XDG_CACHE_HOME, STARPU_HOME, HOME (where
    zt-train puts STARPU_HOME at ~/.cache/zerotask): XDG_CACHE_HOME or HOME naming a file is
    an error naming that variable; STARPU_HOME naming a file while XDG_CACHE_HOME or
    STARPU_PERF_MODEL_DIR decides still trains;
  - a valid value of STARPU_NCPU, STARPU_NCUDA, STARPU_NOPENCL, STARPU_SCHED, STARPU_HOME,
    STARPU_PERF_MODEL_DIR (a directory to be created), STARPU_WORKERS_CPUID and
    STARPU_LIMIT_CPU_MEM trains one step (exit 0).
Under the sanitizers (ZT_TEST_SANITIZED=1) 3 of the integer variables and 5 of the malformed
values run (one parser reads them all).

Usage: test_env.py APPS_DIR MPIEXEC WORKDIR
"""
import contextlib
import os

import faultlib as F

F.setup()
# the cases set the variables that choose StarPU's calibration directory themselves
for name in ("XDG_CACHE_HOME", "STARPU_PERF_MODEL_DIR"):
    os.environ.pop(name, None)


@contextlib.contextmanager
def unset(name):
    """name out of the environment of the runs inside the block"""
    old = os.environ.pop(name, None)
    try:
        yield
    finally:
        if old is not None:
            os.environ[name] = old

ZT = F.prog("zt-train")
base = F.tiny_run()
a_file = F.write_json("not_a_dir.json", {})

# the integer variables of sched/starpu_env.c (StarPU reads each with starpu_get_env_number)
INT_VARS = [
    "STARPU_NCPU", "STARPU_NCPUS", "STARPU_RESERVE_NCPU", "STARPU_NCUDA",
    "STARPU_NWORKER_PER_CUDA", "STARPU_NOPENCL", "STARPU_WORKERS_NOBIND",
    "STARPU_MAIN_THREAD_CPUID", "STARPU_MAIN_THREAD_BIND", "STARPU_CALIBRATE",
    "STARPU_BUS_CALIBRATE", "STARPU_PREFETCH", "STARPU_SILENT", "STARPU_STATS",
    "STARPU_MEMORY_STATS", "STARPU_LIMIT_CPU_MEM", "STARPU_LIMIT_CPU_NUMA_MEM",
    "STARPU_LIMIT_CUDA_MEM", "STARPU_LIMIT_OPENCL_MEM", "STARPU_LIMIT_MAX_SUBMITTED_TASKS",
    "STARPU_LIMIT_MIN_SUBMITTED_TASKS", "STARPU_MINIMUM_AVAILABLE_MEM",
    "STARPU_TARGET_AVAILABLE_MEM", "STARPU_MINIMUM_CLEAN_BUFFERS", "STARPU_TARGET_CLEAN_BUFFERS",
    "STARPU_DISABLE_PINNING", "STARPU_TRACE_BUFFER_SIZE", "STARPU_CATCH_SIGNALS",
    "STARPU_DISPLAY_BINDINGS"]


def bad(name, value, words):
    """zt-train with name=value: exit 2, one line 'NAME=value: ...' holding words"""
    F.expect("%s=%s" % (name, value), [ZT] + base, 2, words, timeout=60, env={name: value},
             prefix="zerotask: error: %s=%s: " % (name, value))


def good(name, value):
    p = F.run([ZT] + base, timeout=120, env={name: value})
    F.check("%s=%s runs" % (name, value), p is not None and p.returncode == 0,
            "no answer" if p is None else "exit %d, %r" % (p.returncode, F.error_lines(p)[-3:]))


# seen to abort StarPU
bad("STARPU_NCPU", "-3", ["expected a non-negative integer"])
bad("STARPU_NCPU", "abc", ["expected a non-negative integer"])
bad("STARPU_HOME", a_file, ["not a directory"])

# under the sanitizers (one parser for all of them) a few of the variables and values
for name in INT_VARS[:3] if F.SANITIZED else INT_VARS:
    bad(name, "x1", ["expected a non-negative integer"])
for value in ("-1", "", "12MB") if F.SANITIZED else ("-1", "+1", "1.5", "4 ", "", "12MB"):
    bad("STARPU_LIMIT_CPU_MEM", value, ["expected a non-negative integer"])
bad("STARPU_NCPU", "99999999999", ["expected a non-negative integer up to 2147483647"])
bad("STARPU_SCHED", "no-such-policy", ["not a StarPU scheduling policy", "lws", "eager"])
bad("STARPU_PERF_MODEL_DIR", a_file, ["not a directory"])
bad("STARPU_HOME", a_file + "/sub", [a_file + " is not a directory"])
bad("STARPU_PERF_MODEL_DIR", a_file + "/a/b", [a_file + " is not a directory"])
bad("STARPU_HOME", "", ["expected a directory"])
for value in ("0,,1", "1-x") if F.SANITIZED else ("abc", "0,,1", ",0", "0;1", "-1", "1-x"):
    bad("STARPU_WORKERS_CPUID", value, ["expected CPU numbers N, ranges N-M or N-"])
bad("STARPU_WORKERS_CPUID", "1-0", ["range 1-0 runs backwards"])
bad("STARPU_WORKERS_CPUID", "0,100000", ["CPU 100000 does not exist"])
bad("STARPU_WORKERS_CPUID", "0-100000", ["CPU 100000 does not exist"])
bad("STARPU_WORKERS_COREID", "100000", ["CPU 100000 does not exist"])

# StarPU's home: XDG_CACHE_HOME before STARPU_HOME before HOME, STARPU_PERF_MODEL_DIR before all
bad("XDG_CACHE_HOME", a_file, ["not a directory"])
bad("XDG_CACHE_HOME", "", ["expected a directory"])
with unset("STARPU_HOME"):
    bad("HOME", a_file, ["not a directory"])


def good_env(label, env):
    p = F.run([ZT] + base, timeout=120, env=env)
    F.check(label, p is not None and p.returncode == 0,
            "no answer" if p is None else "exit %d, %r" % (p.returncode, F.error_lines(p)[-3:]))


good_env("STARPU_HOME unused (XDG_CACHE_HOME decides) runs",
         {"STARPU_HOME": a_file, "XDG_CACHE_HOME": F.path("xdg-cache")})
F.check("XDG_CACHE_HOME holds StarPU's files", os.path.isdir(F.path("xdg-cache/.starpu/sampling")),
        "a directory .starpu/sampling under it")
good_env("STARPU_HOME unused (STARPU_PERF_MODEL_DIR decides) runs",
         {"STARPU_HOME": a_file, "STARPU_PERF_MODEL_DIR": F.path("perf2")})
good_env("XDG_CACHE_HOME unused (STARPU_PERF_MODEL_DIR decides) runs",
         {"XDG_CACHE_HOME": a_file, "STARPU_PERF_MODEL_DIR": F.path("perf3")})

good("STARPU_NCPU", "1")
good("STARPU_NCUDA", "0")
good("STARPU_NOPENCL", "0")
good("STARPU_SCHED", "eager")
good("STARPU_HOME", F.path("starpu-home"))
good("STARPU_PERF_MODEL_DIR", F.path("perf/models"))
good("STARPU_WORKERS_CPUID", "0-")
good("STARPU_WORKERS_CPUID", "0, 0")
good("STARPU_LIMIT_CPU_MEM", "4096")
F.check("STARPU_PERF_MODEL_DIR created", os.path.isdir(F.path("perf/models")),
        "a directory StarPU can use")
F.finish()
