#!/usr/bin/env python3
"""tests/tasks/test_p2p.py: the fatal ends of the point-to-point tasks (tasks/p2p.c), on 2 ranks.

Cases (test_p2p's failure modes):
  - mismatch: rank 1 receives into a 128-byte block what rank 0 sends from a 64-byte one: the
    job ends non-zero with one error line naming rank 1, the peer, the tag, the expected and
    the received bytes;
  - silent: rank 1 receives from rank 0, which never sends, with ZT_COMM_TIMEOUT=2: the job
    ends non-zero within a bounded time (not a hang) with one error line
    "rank 1: recv from rank 0 tag 7 (step 3 layer 5 mb 1 ...) timed out: nothing of its stream
    came for N s";
  - slow: rank 1 posts 4 recvs of one stream at once and rank 0 sends one every 1.2 s: the last
    waits 4.8 s from its posting but never 2 s from when it was due, so the job ends 0 with no
    error line (a pipeline posts every micro-batch's recv long before the last one's data).
Under mpirun, stderr also holds mpirun's own notes; the error lines are those holding "error:".

Usage: test_p2p.py TEST_P2P MPIEXEC
"""
import subprocess
import sys
import time

PROG, MPIEXEC = sys.argv[1], sys.argv[2]
MPI = [MPIEXEC, "--allow-run-as-root", "--oversubscribe", "-np", "2", "-x", "STARPU_NCPU=1",
       "-x", "STARPU_SILENT=1", "-x", "ZT_COMM_TIMEOUT=2"]
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def run(mode, limit_s):
    """rc, the error lines and the seconds the job took (None, None, limit on a hang)"""
    t0 = time.monotonic()
    try:
        p = subprocess.run(MPI + [PROG, mode], capture_output=True, text=True, timeout=limit_s)
    except subprocess.TimeoutExpired:
        return None, [], limit_s
    errors = [l for l in p.stderr.splitlines() if "error:" in l]
    if p.returncode == 0 or len(errors) != 1:
        sys.stderr.write(p.stderr[-4000:])
    return p.returncode, errors, time.monotonic() - t0


rc, errors, took = run("mismatch", 120)
check(rc is not None and rc != 0, "mismatch: the job ends non-zero (rc %s)" % rc)
check(len(errors) == 1, "mismatch: one error line (got %d)" % len(errors))
check(any("zerotask: error: rank 1: recv from rank 0 tag 9 (step 3 layer 5 mb 1" in l and
          "expected 128 bytes, got 64" in l for l in errors),
      "mismatch: the line names the peer, the tag and both sizes: %s" % errors)

rc, errors, took = run("silent", 120)
check(rc is not None and rc != 0, "silent: the job ends non-zero (rc %s)" % rc)
check(took < 60, "silent: it ends in %.1f s, well before the test's limit" % took)
check(len(errors) == 1, "silent: one error line (got %d)" % len(errors))
check(any("zerotask: error: rank 1: recv from rank 0 tag 7 (step 3 layer 5 mb 1" in l and
          "timed out: nothing of its stream came for" in l for l in errors),
      "silent: the line names the peer, the tag, the task and the timeout: %s" % errors)

rc, errors, took = run("slow", 120)
check(rc == 0 and not errors and took >= 4.8, "slow: a stream whose messages come 1.2 s apart "
      "under a 2 s timeout ends 0 (rc %s) after %.1f s with no error line %s" % (rc, took, errors))

print("test_p2p.py: %s" % ("ok" if not failures else "%d check(s) failed" % len(failures)))
sys.exit(1 if failures else 0)
