"""Test-session setup shared by every suite.

Tests keep their compiled programs and device calibrations in a cache of their own
(~/.cache/tessel-tests, unless TESSEL_CACHE_DIR is set): a calibration measured by the tuner's tests on a
machine busy with the suite (measured: 48 GFLOP/s and 7.4 GB/s against ~400 and ~20) must not become the
peaks a user's profile and tuner read.

OpenBLAS starts one thread per core in each process; under pytest-xdist's two workers on a 2-core
machine that oversubscribes the cores, and the numpy interpreter's conv/matmul references ran the light
models ~3x slower than with one thread per worker (measured: 11.1 s -> 3.8 s for the nine models). The
variable must be set before numpy is first imported, which is why it lives here; xdist workers inherit it.

The compiled-module cache (targets/opencl/compiled.py) is off: a test that compiles a model after patching
a pass or a template must compile it, not load what an earlier test compiled. tests/unit/test_module_cache.py
turns it on for its own cases.
"""

import os
import sys

os.environ.setdefault("TESSEL_CACHE_DIR", os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tessel-tests"))
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ["TESSEL_MODULE_CACHE"] = "0"
if "numpy" in sys.modules and os.environ["OPENBLAS_NUM_THREADS"] == "1":  # too late for this process
    sys.stderr.write("conftest: numpy was imported before OPENBLAS_NUM_THREADS was set\n")
