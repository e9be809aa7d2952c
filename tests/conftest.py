"""Test-session setup shared by every suite.

OpenBLAS starts one thread per core in each process; under pytest-xdist's two workers on a 2-core
machine that oversubscribes the cores, and the numpy interpreter's conv/matmul references ran the light
models ~3x slower than with one thread per worker (measured: 11.1 s -> 3.8 s for the nine models). The
variable must be set before numpy is first imported, which is why it lives here; xdist workers inherit it.
"""

import os
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
if "numpy" in sys.modules and os.environ["OPENBLAS_NUM_THREADS"] == "1":  # too late for this process
    sys.stderr.write("conftest: numpy was imported before OPENBLAS_NUM_THREADS was set\n")
