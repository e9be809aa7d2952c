"""Preparing `auto`'s other ways to run (inline, cooperative) in a child process, so no run waits for them.

PoCL compiles a kernel at its first launch, holding a lock its launches of compiled kernels also take:
compiled in a thread of the running process, a cooperative program stalled the model's runs on the pool for
6 s (squeezenet, measured). A child process (`python -m tessel.targets.opencl.prepare MODULE FUNC`, at the
lowest CPU priority) instead loads the module, runs it once on zeros inline and once cooperatively, and so
fills the driver's cache (PoCL's POCL_CACHE_DIR, tessel's program cache) and the build records
(cache.py `note_built`); the running process then builds those programs from the caches in milliseconds.
The module goes to the child without its weights (the kernels only need their sizes: the child runs on
zeros), so writing it is no longer a stall of the run that starts the child (vgg19: 3.4 s).
The child's exit status says whether it did; its stderr, why not.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

PRIORITY = 5
"""The child's niceness: about a quarter of a core beside a process keeping both busy (19 gave it 1-2%:
it had not finished after 10 000 runs of a squeezenet; 10 took 30 s over a warm cache, 0.8 s alone), all
of an idle one."""


class Preparer:
    """The child preparing one executable's other ways: `poll()` is None while it runs, then "ready" or
    "failed: why"."""

    def __init__(self, module: Any, func_name: str):
        from ...ir.printer import print_module

        python = child_python()
        if python is None:
            raise OSError("no Python interpreter to start a child process with (sys.executable), or "
                          "TESSEL_BACKGROUND=0")
        fd, self.path = tempfile.mkstemp(prefix="tessel-prepare-", suffix=".tsl")
        with os.fdopen(fd, "w") as f:  # no weights: the child runs on zeros (vgg19's printed 3.4 s, in a run)
            print_module(module, f, elide_resources=True)
        cmd = [python, "-m", "tessel.targets.opencl.prepare", self.path, func_name]
        try:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        except OSError:
            os.unlink(self.path)
            raise

    def poll(self) -> str | None:
        code = self.proc.poll()
        if code is None:
            return None
        err = (self.proc.stderr.read() if self.proc.stderr else "").strip()
        self.close()
        if code == 0:
            return "ready"
        return "failed: " + (err.splitlines()[-1] if err else f"the preparing process exited with {code}")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stderr:
            self.proc.stderr.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass


def child_python() -> str | None:
    """The interpreter child processes run in: this one's, when it is a Python (an embedding program's
    sys.executable may be the program itself), unless TESSEL_BACKGROUND=0 turns the children off."""
    if os.environ.get("TESSEL_BACKGROUND", "1") == "0":
        return None
    exe = sys.executable or ""
    return exe if os.path.basename(exe).lower().startswith(("python", "pypy")) else None


def prepare(path: str, func_name: str) -> list[tuple[str, float]]:
    """Load the module at `path`, run `func_name` once on zeros on each other way; (way, seconds) each."""
    from ...ir.parser import parse_module
    from .runtime import Executable

    with open(path) as f:
        module = parse_module(f.read(), path)
    zero_weights(module)
    func = module.func(func_name)
    if func is None:
        raise SystemExit(f"{path}: no func @{func_name}")
    exe = Executable(module, func, execution="pool")
    return prepare_ways(exe, [np.zeros(v.type.dims, v.type.np_dtype) for v in func.args])


def zero_weights(module: Any) -> None:
    """Give every elided resource of `module` zeros of its size: the parent writes the module without its
    weights, and building the programs and compiling their kernels needs their sizes, not their values
    (the kernels' sources are in the module as they are)."""
    from ...ir.attributes import ResourceAttr
    from ...ir.resources import Resource

    for op in module.walk():
        for a in op.attrs.values():
            if isinstance(a, ResourceAttr):
                res = module.resources.get(a.name)
                if res is not None and not res.has_data:
                    module.resources.put(Resource(a.name, bytes(a.type.nbytes), res.digest, "zeros"))


def prepare_ways(exe: Any, zeros: list[np.ndarray]) -> list[tuple[str, float]]:
    """Run `exe` once on `zeros` inline and once cooperatively (where it can), so that their programs are
    built, their kernels compiled into the caches and the build records say so (`tessel compile
    --build=all` does this ahead of time); (way, seconds) each. Leaves it placed on the pool."""
    from . import cache

    if exe.companion is None:
        return []
    n = len(exe._live)
    ways = [("inline", ["inline"] * n, [exe.companion])]
    if exe._cooperative_runner() is not None:
        ways.append(("cooperative", ["cooperative"] * n, [exe.device, exe.companion]))
    folder, fingerprint = exe._records_folder(), exe._fingerprint()
    done = []
    for way, where, devices in ways:
        key = cache.built_key(exe._source, way, devices)
        cold = not cache.was_built(folder, key)
        t0 = time.perf_counter()
        exe.place(where)
        exe.enqueue(zeros)
        seconds = time.perf_counter() - t0
        cache.note_built(folder, key, seconds, len(exe._source.encode()), fingerprint, cold)
        done.append((way, seconds))
    exe.place(["pool"] * n)  # parks the cooperative pool's work-group
    return done


def main() -> int:
    if len(sys.argv) != 3:
        print("usage: python -m tessel.targets.opencl.prepare MODULE.tsl FUNC", file=sys.stderr)
        return 2
    if hasattr(os, "nice"):
        os.nice(PRIORITY)  # here, not in a preexec_fn: the parent has PoCL's threads
    try:
        prepare(sys.argv[1], sys.argv[2])
    except Exception as e:  # noqa: BLE001 - reported to the parent, which stays on the pool
        print(f"{type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
