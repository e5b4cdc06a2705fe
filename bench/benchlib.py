"""bench/benchlib.py: what the Python benchmarks share."""
import os


def openblas_envs(names):
    """[(name, environment)] for the OpenBLAS environments named in the comma list `names`:
    "default" (OPENBLAS_CORETYPE unset, the CPU's own kernels) and "Haswell"
    (OPENBLAS_CORETYPE=Haswell, as this machine sets it), in that order"""
    envs = [("default", {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}),
            ("Haswell", dict(os.environ, OPENBLAS_CORETYPE="Haswell"))]
    return [x for x in envs if x[0] in names.split(",")]
