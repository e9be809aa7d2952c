"""A cold program's first run: its kernels compiled by child processes on the other cores (warm.py) while
the run compiles them in order, and `auto`'s other ways prepared by a child (prepare.py). The mechanism is
checked (which kernels a child gets, that children start, stop and leave the results alone), never a time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from tessel.targets.opencl import cache, warm
from tessel.targets.opencl import device as dev
from tessel.targets.opencl.runtime import Executable

from .test_execution import inputs, lowered, needs_companion


def test_children_take_the_kernels_from_the_last_backwards(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each distinct kernel with work once, the last first, dealt round-robin to one child a further core
    (no more children than MIN_KERNELS kernels each can keep busy)."""
    jobs: list[dict] = []

    class Started:
        def __init__(self, cmd: list[str], **_kw: object) -> None:
            with open(cmd[-1]) as f:
                jobs.append(json.load(f))
            os.unlink(cmd[-1])

    monkeypatch.setattr(warm.subprocess, "Popen", Started)
    monkeypatch.setattr(warm.os, "cpu_count", lambda: 3)
    monkeypatch.setattr(dev, "locate", lambda d: (0, 1))
    buf = SimpleNamespace(size=64)
    steps = [SimpleNamespace(name=f"k{i}", global_size=(4, 1), local_size=(4, 1), args=(buf, buf))
             for i in range(20)]
    steps.insert(3, SimpleNamespace(name="k3", global_size=(4, 1), local_size=(4, 1), args=(buf,)))  # again
    steps.append(SimpleNamespace(name="empty", global_size=(0,), local_size=None, args=()))  # no work
    exe = SimpleNamespace(checks=None, steps=steps, device=object(), _source="src")
    children = warm.start(exe)
    assert len(children) == 2 and [j["device"] for j in jobs] == [[0, 1], [0, 1]]
    names = [[s[0] for s in j["steps"]] for j in jobs]
    assert names[0] == [f"k{i}" for i in range(19, -1, -2)]
    assert names[1] == [f"k{i}" for i in range(18, -1, -2)]
    assert jobs[0]["steps"][0] == ["k19", [4, 1], [4, 1], [64, 64]]
    monkeypatch.setattr(warm.os, "cpu_count", lambda: 1)
    assert warm.start(exe) == []  # one core: the first run is the only compiler
    monkeypatch.setattr(warm.os, "cpu_count", lambda: 8)
    exe.steps = steps[:5]
    assert warm.start(exe) == []  # too few kernels to be worth a process


def test_a_warming_child_compiles_a_job_and_leaves(tmp_path: Path) -> None:
    d = dev.pick_device()
    where = dev.locate(d)
    assert where is not None and dev.cl().get_platforms()[where[0]].get_devices()[where[1]] == d
    source = "__kernel void twice(__global float *a) { int i = get_global_id(0); a[i] *= 2.0f; }\n"
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"device": list(where), "source": source, "options": ["-w"],
                               "steps": [["twice", [16], [4], [64]]]}))
    proc = subprocess.run([sys.executable, "-m", "tessel.targets.opencl.warm", str(job)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert not job.exists()  # the child removes its job


def test_a_cold_executable_warms_on_the_other_cores_then_stops(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A program this machine never built (fresh build records) starts warming children before its first
    run; the run's results are the pool's, and the children are gone after it. Built before: none."""
    needs_companion()
    monkeypatch.setenv("TESSEL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(warm, "MIN_KERNELS", 1)
    monkeypatch.setattr(warm.os, "cpu_count", lambda: 2)
    m = lowered()
    x = inputs(m.funcs[0], 0)
    exe = Executable(m, m.funcs[0], execution="pool")
    assert exe._cold and len(exe._warming) == 1
    children = list(exe._warming)
    got = exe.run(x)
    assert exe._warming == [] and all(p.poll() is not None for p in children)
    assert not exe._cold and cache.was_built(exe._records_folder(), exe._built_key)
    again = Executable(m, m.funcs[0], execution="pool")
    assert not again._cold and again._warming == []
    for a, b in zip(got, again.run(x), strict=True):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()


def test_children_need_a_python_and_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """No child process where sys.executable is not a Python (a program embedding one) or with
    TESSEL_BACKGROUND=0: the first run compiles alone, `auto` stays on the pool and says why."""
    from tessel.targets.opencl import prepare

    monkeypatch.setattr(prepare.sys, "executable", "/usr/bin/python3.11")
    assert prepare.child_python() == "/usr/bin/python3.11"
    monkeypatch.setattr(prepare.sys, "executable", "/opt/app/server")
    assert prepare.child_python() is None
    monkeypatch.setattr(prepare.sys, "executable", "/usr/bin/python3")
    monkeypatch.setenv("TESSEL_BACKGROUND", "0")
    assert prepare.child_python() is None
    exe = SimpleNamespace(checks=None, steps=[], device=object(), _source="")
    assert warm.start(exe) == []
    with pytest.raises(OSError, match="no Python interpreter"):
        prepare.Preparer(SimpleNamespace(funcs=[], attrs={}, resources=None), "main")
