"""Compiling a cold program's kernels on the other cores while the first run compiles them in order.

PoCL compiles each kernel at its first launch, one after another on the thread that launches it: a cold
squeezenet's first run spent 8 s compiling its 37 kernels on one of the machine's two cores. When a
program was never built on this machine (the build records, cache.py), `start` writes a small job (the
program's source and options, the device, and each step's kernel, sizes and argument bytes) and starts
one child process a further core (`python -m tessel.targets.opencl.warm JOB`): the child builds the same
program (PoCL's cache has it from the parent's build) and launches its share of the kernels, from the
last backwards, each once on zero-filled buffers of its arguments' sizes, so PoCL compiles them into its
disk cache. The parent's first run goes forward and loads what a child compiled before it got there; it
stops the children once it is done. No weights and no results cross: a kernel run on zeros reads and
writes only its own scratch buffers, and its sizes are the parent's, so PoCL compiles the same variant.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import Any

MIN_KERNELS = 8
"""Fewer distinct kernels compile too quickly to be worth a process (its start costs ~0.5 s)."""


def start(exe: Any) -> list[Any]:
    """The child processes compiling `exe`'s kernels (none where it is not worth it or not possible)."""
    from . import device as dev
    from .prepare import child_python
    from .runtime import _nbytes

    cores = os.cpu_count() or 1
    python = child_python()
    if cores < 2 or exe.checks is not None or python is None:
        return []
    steps, seen = [], set()
    for s in exe.steps:
        if s.name in seen or not all(s.global_size):
            continue
        seen.add(s.name)
        sizes = [_nbytes(a) for a in s.args]
        steps.append([s.name, list(s.global_size), list(s.local_size) if s.local_size else None, sizes])
    if len(steps) < MIN_KERNELS:
        return []
    where = dev.locate(exe.device)
    if where is None:
        return []
    children = []
    n = min(cores - 1, len(steps) // MIN_KERNELS)
    ordered = steps[::-1]  # the first run compiles from the first kernel on
    for i in range(n):
        job = {"device": where, "source": exe._source, "options": ["-w"], "steps": ordered[i::n]}
        fd, path = tempfile.mkstemp(prefix="tessel-warm-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(job, f)
        try:
            children.append(subprocess.Popen([python, "-m", "tessel.targets.opencl.warm", path],
                                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        except OSError:
            os.unlink(path)
    return children


def stop(children: list[Any]) -> None:
    """Stop the children (the first run is done: what they had left, it compiled)."""
    for p in children:
        if p.poll() is None:
            p.kill()
        p.wait()


def warm(path: str) -> None:
    import numpy as np
    import pyopencl as cl

    from . import device as dev

    with open(path) as f:
        job = json.load(f)
    os.unlink(path)
    platform, index = job["device"]
    device = cl.get_platforms()[platform].get_devices()[index]
    context = dev.context_for(device)  # as the parent's: with the inline companion where there is one
    queue = cl.CommandQueue(context, device)
    source = dev.with_build_preamble(job["source"], [device])  # as runtime.build_program builds it
    program = cl.Program(context, source).build(options=job["options"], devices=[device], cache_dir=False)
    for name, global_size, local_size, sizes in job["steps"]:
        kernel = cl.Kernel(program, name)
        buffers = []
        for size in sizes:
            b = cl.Buffer(context, cl.mem_flags.READ_WRITE, max(size, 4))
            cl.enqueue_fill_buffer(queue, b, np.uint8(0), 0, max(size, 4))
            buffers.append(b)
        kernel.set_args(*buffers)
        cl.enqueue_nd_range_kernel(queue, kernel, global_size, local_size)
        queue.finish()


if __name__ == "__main__":
    warm(sys.argv[1])
