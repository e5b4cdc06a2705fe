"""tests/graph/trainlib.py: what the zt-train script tests share: JSON inputs in a work
directory, launching one rank (directly) or several (mpirun), and ok/FAIL bookkeeping."""
import json
import os
import shutil
import subprocess


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
