"""Soak checks: a lowered model run many times in one process, then loaded and unloaded many times,
watching the process's resident memory and the live OpenCL objects (`make soak`, bench/soak.py; the slow
test tests/opencl/test_soak.py).

Live OpenCL objects are counted by their Python wrappers' types. pyopencl's objects are nanobind
instances: most types are tracked by the garbage collector but `Event` is not, none takes a weak
reference, and an object leaked by a missing decref in C++ is reachable from nothing. What every instance
does, whoever holds it, is hold a reference to its (heap) type. So an instance count is the type's
reference count less the references that are not instances (module dicts, `__mro__` tuples, subclasses),
which are measured at the first count (and again when a new subclass appears) as the reference count
less the instances found then (every tracked object through `gc.get_objects()`, untracked ones through
the referents of tracked ones). After that a count is exact for any instance, reachable or not, and costs
a `sys.getrefcount` per type.

RSS is the resident set (/proc/self/statm), read after `gc.collect()` and glibc's `malloc_trim(0)` (see
rss_bytes). Library code: returns a report and prints nothing.
"""

from __future__ import annotations

import gc
import os
import resource
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..ir.core import Func, Module

KINDS = {
    "buffers": "MemoryObjectHolder",  # Buffer (sub-buffers too), Image, Pipe, PooledBuffer
    "svm": "SVMPointer",  # SVM (a kernel argument) and SVMAllocation (the memory behind svm_empty)
    "kernels": "Kernel",
    "programs": "_Program",  # the binary behind pyopencl's Python-level Program
    "queues": "CommandQueue",
    "contexts": "Context",
    "events": "Event",  # not tracked by the garbage collector: only the reference count sees them
    "samplers": "Sampler",
}
"""What is counted: a kind of OpenCL object and the pyopencl._cl class whose subclasses (all, at any
depth, itself included) are its Python wrappers."""

_BASE: dict[int, int] = {}
"""Per counted type (by id: a key must not add a reference), the references to it that are not its
instances."""


def _classes(root: type) -> list[type]:
    out, todo = [], [root]
    while todo:
        t = todo.pop()
        out.append(t)
        todo.extend(t.__subclasses__())
    return out


def _types() -> dict[str, list[type]]:
    from ..targets.opencl import device as dev

    module = sys.modules.get("pyopencl._cl")
    if module is None:
        dev.cl()
        module = sys.modules["pyopencl._cl"]
    return {kind: _classes(getattr(module, name)) for kind, name in KINDS.items()}


def _instances(ids: set[int]) -> dict[int, int]:
    """The instances of the types of these ids now: every tracked object, and the untracked ones (an
    Event) that tracked objects hold."""
    found = dict.fromkeys(ids, 0)
    seen: set[int] = set()
    tracked = gc.get_objects()
    for o in tracked:
        if id(type(o)) in ids:
            found[id(type(o))] += 1
            seen.add(id(o))
    for o in gc.get_referents(*tracked):
        if id(type(o)) in ids and id(o) not in seen and not gc.is_tracked(o):
            found[id(type(o))] += 1
            seen.add(id(o))
    return found


def live_opencl_objects() -> dict[str, int]:
    """The live pyopencl objects of each kind of KINDS (module docstring: how they are counted)."""
    types = _types()
    flat = [t for ts in types.values() for t in ts]
    raw = {id(t): sys.getrefcount(t) for t in flat}  # taken with the same references held every time
    if any(i not in _BASE for i in raw):  # the first count, or a new subclass (it refers to its bases)
        found = _instances(set(raw))
        _BASE.update({i: raw[i] - found[i] for i in raw})
    return {kind: sum(raw[id(t)] - _BASE[id(t)] for t in ts) for kind, ts in types.items()}


_TRIM: Any = None  # glibc's malloc_trim, once looked up (False: none)


def _malloc_trim() -> None:
    """Hand glibc's free heap memory back to the system (nothing where there is no glibc)."""
    global _TRIM
    if _TRIM is None:
        try:
            import ctypes

            _TRIM = ctypes.CDLL("libc.so.6").malloc_trim
        except (OSError, AttributeError):
            _TRIM = False
    if _TRIM:
        _TRIM(0)


def rss_bytes() -> int:
    """This process's resident memory in bytes, after a garbage collection and glibc's malloc_trim: freed
    memory the allocator keeps comes and goes by megabytes between two readings (squeezenet loaded 700
    times under cooperative execution: 72-85 MiB untrimmed, 45.5-46.5 trimmed), and is not a leak.
    Where /proc is missing: the peak, getrusage's ru_maxrss."""
    gc.collect()
    _malloc_trim()
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        scale = 1 if sys.platform == "darwin" else 1024
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


MAX_GROWTH = 1 << 20
"""RSS growth over a loop after its warm-up that counts as a leak (`make soak`, and the slow test's bound)."""


@dataclass
class SoakReport:
    """One model soaked one way (`execution`): `runs` runs of one executable, then `loads` executables
    each loaded, run once and dropped. RSS in bytes; objects as live_opencl_objects() gives them."""

    model: str
    execution: str  # the way asked for (runtime.EXECUTIONS)
    running_on: str  # where the runs went at the end (what `auto` chose)
    runs: int
    warmup_runs: int  # of `runs`: the first, before rss_warm
    loads: int
    warmup_loads: int  # of `loads`: the first, before rss_loads_warm
    rss_warm: int  # after the warm-up runs
    rss_runs_mid: int  # halfway between the warm-up and the end of the runs
    rss_runs: int  # after every run
    rss_loads_warm: int  # after the warm-up loads
    rss_loads_mid: int  # halfway between the warm-up and the end of the loads
    rss_loads: int  # after every load
    objects_warm: dict[str, int]  # after the warm-up runs (the executable loaded)
    objects_runs: dict[str, int]  # after every run (the same executable)
    objects_unloaded: dict[str, int]  # after the runs' executable was dropped, before the loads
    objects_loads: dict[str, int]  # after every load was dropped
    run_seconds: float = 0.0  # the runs after the warm-up
    load_seconds: float = 0.0  # the loads after the warm-up
    notes: list[str] = field(default_factory=list)

    @property
    def run_growth(self) -> int:
        """RSS growth over the runs after the warm-up, in bytes."""
        return self.rss_runs - self.rss_warm

    @property
    def load_growth(self) -> int:
        """RSS growth over the loads after the warm-up, in bytes."""
        return self.rss_loads - self.rss_loads_warm

    @property
    def late_growth(self) -> tuple[int, int]:
        """RSS growth over the second half of the runs and of the loads after the warm-up: a steady leak
        grows there by half its growth, a one-time step (a cache filling, a thread's stack or arena
        touched for the first time) only when it happens to fall there."""
        return self.rss_runs - self.rss_runs_mid, self.rss_loads - self.rss_loads_mid

    def rss_verdicts(self) -> tuple[list[str], list[str]]:
        """(leaks, steps): the loops ('runs', 'loads') whose RSS grew by MAX_GROWTH, and by half of it in
        their second half (a steady leak) or not (a one-time step)."""
        leaks, steps = [], []
        for what, growth, late in (("runs", self.run_growth, self.late_growth[0]),
                                   ("loads", self.load_growth, self.late_growth[1])):
            if growth >= MAX_GROWTH:
                (leaks if late >= MAX_GROWTH // 2 else steps).append(what)
        return leaks, steps

    def leaks(self) -> dict[str, int]:
        """The kinds of OpenCL object left behind, by how many: those more numerous after the runs than
        after their warm-up (but for one event: a cooperative executable holds its pool kernel's while it
        runs, and `auto` may switch to or from cooperative between the two counts), and those more
        numerous after the loads than before them (no executable is alive at either)."""
        out = {}
        for kind, n in self.objects_runs.items():
            extra = n - self.objects_warm.get(kind, 0) - (1 if kind == "events" else 0)
            if extra > 0:
                out[kind] = extra
        for kind, n in self.objects_loads.items():
            extra = n - self.objects_unloaded.get(kind, 0)
            if extra > 0:
                out[kind] = max(out.get(kind, 0), extra)
        return out


Progress = Callable[[str, int, int], None]
"""on_progress(phase, done, total): phase 'runs' or 'loads'."""


def soak(module: Module, func: Func, inputs: Sequence[np.ndarray], runs: int, loads: int,
         execution: str = "auto", device: Any = None, model: str = "",
         on_progress: Progress | None = None) -> SoakReport:
    """Run the lowered `func` `runs` times on one Executable (`execution` way, `device` or the default),
    then load it `loads` times more, each run once and dropped (a garbage collection after each), and
    report the RSS and live OpenCL objects after the warm-up part of each loop and at its end. The warm-up:
    a tenth of the runs, at least 2 * ADAPT_AFTER so `auto` has settled; a quarter of the loads,
    at least 5: the caches a load fills (pyopencl's kernel invokers, PoCL's) grow for the first hundreds of
    loads, then stay (the transformer encoder under cooperative execution: +1.3 MiB by the 750th load, not
    a byte more by the 2500th)."""
    from ..targets.opencl import device as dev
    from ..targets.opencl.adapt import ADAPT_AFTER
    from ..targets.opencl.runtime import Executable

    device = device if device is not None else dev.pick_device()
    warm_r = min(runs, max(2 * ADAPT_AFTER, runs // 10))
    warm_l = min(loads, max(5, loads // 4))
    tick = on_progress or (lambda phase, done, total: None)
    step = max(1, runs // 100)

    live_opencl_objects()  # the first count measures what it subtracts: its garbage precedes the RSS
    exe = Executable(module, func, device, execution=execution)
    for i in range(warm_r):
        exe.run(inputs)
        if i % step == 0:
            tick("runs", i, runs)
    objects_warm, rss_warm = live_opencl_objects(), rss_bytes()
    mid_r = warm_r + (runs - warm_r) // 2
    rss_runs_mid = rss_warm
    t0 = time.perf_counter()
    for i in range(warm_r, runs):
        if i == mid_r:
            rss_runs_mid = rss_bytes()
        exe.run(inputs)
        if i % step == 0:
            tick("runs", i, runs)
    run_seconds = time.perf_counter() - t0
    tick("runs", runs, runs)
    objects_runs, rss_runs = live_opencl_objects(), rss_bytes()
    running_on, note = exe.running_on, exe.adapt_note
    del exe
    gc.collect()
    objects_unloaded = live_opencl_objects()

    def load_once() -> None:
        e = Executable(module, func, device, execution=execution)
        e.run(inputs)
        del e
        gc.collect()

    for i in range(warm_l):
        load_once()
        tick("loads", i, loads)
    rss_loads_warm = rss_loads_mid = rss_bytes()
    mid_l = warm_l + (loads - warm_l) // 2
    t0 = time.perf_counter()
    for i in range(warm_l, loads):
        if i == mid_l:
            rss_loads_mid = rss_bytes()
        load_once()
        tick("loads", i, loads)
    load_seconds = time.perf_counter() - t0
    tick("loads", loads, loads)
    objects_loads, rss_loads = live_opencl_objects(), rss_bytes()
    return SoakReport(model, execution, running_on, runs, warm_r, loads, warm_l, rss_warm, rss_runs_mid,
                      rss_runs, rss_loads_warm, rss_loads_mid, rss_loads, objects_warm, objects_runs,
                      objects_unloaded, objects_loads, run_seconds, load_seconds, [note] if note else [])
