"""Soak (issue 19, debug/soak.py): a model run thousands of times in one process, and loaded and dropped
dozens of times, holds its resident memory within MAX_GROWTH after a warm-up and leaves no OpenCL object
behind. `make soak` runs the long version (bench/soak.py); the slow test here a shorter one that still
shows a leak of a few hundred bytes a run or one object a load. The fast tests check the counter itself."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from tessel.debug.soak import MAX_GROWTH, live_opencl_objects, rss_bytes, soak
from tessel.targets.opencl import device as dev
from tessel.targets.opencl.adapt import ADAPT_AFTER
from tessel.targets.opencl.lower import lower_module

from .conftest import here
from .test_execution import inputs, lowered, needs_companion


def _block():  # noqa: ANN202
    m = lowered()
    return m, m.funcs[0], inputs(m.funcs[0], 0)


def test_the_counter_sees_an_object_made_and_dropped() -> None:
    cl = dev.cl()
    d = dev.pick_device()
    ctx = dev.context_for(d)
    before = live_opencl_objects()
    assert live_opencl_objects() == before  # counting makes nothing
    b = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 64)
    q = cl.CommandQueue(ctx, d)
    event = cl.enqueue_fill_buffer(q, b, np.float32(1), 0, 64)  # an Event: not tracked by gc
    q.finish()
    now = live_opencl_objects()
    assert now["buffers"] == before["buffers"] + 1
    assert now["queues"] == before["queues"] + 1
    assert now["events"] == before["events"] + 1
    del b, q, event
    assert live_opencl_objects() == before  # nanobind frees on the last reference: no collection needed


def test_the_counter_sees_svm_and_kernels_and_agrees_with_gc() -> None:
    cl = dev.cl()
    d = dev.pick_device()
    ctx = dev.context_for(d)
    if not getattr(d, "svm_capabilities", 0) & getattr(cl.device_svm_capabilities, "FINE_GRAIN_BUFFER", 0):
        pytest.skip("the default device has no fine-grained SVM")
    gc.collect()
    before = live_opencl_objects()
    flags = cl.svm_mem_flags.READ_WRITE | cl.svm_mem_flags.SVM_FINE_GRAIN_BUFFER
    svm = cl.SVM(cl.svm_empty(ctx, flags, 16, np.float32, alignment=128))
    prg = cl.Program(ctx, "__kernel void f(__global float* a) { a[get_global_id(0)] = 1; }").build()
    k = cl.Kernel(prg, "f")
    k.set_args(svm)
    now = live_opencl_objects()
    assert now["svm"] == before["svm"] + 2  # the SVM argument and the SVMAllocation behind it
    assert now["kernels"] == before["kernels"] + 1 and now["programs"] == before["programs"] + 1
    # every gc-tracked wrapper the garbage collector knows is counted, and no more
    kernels = sum(1 for o in gc.get_objects() if isinstance(o, cl.Kernel))
    assert kernels == now["kernels"]
    del svm, prg, k
    gc.collect()
    assert live_opencl_objects() == before


def test_rss_is_the_resident_set() -> None:
    before = rss_bytes()
    block = np.ones(64 << 20, np.uint8)  # 64 MiB, touched
    assert rss_bytes() - before > 48 << 20
    del block


def test_a_short_soak_reports_both_loops() -> None:
    m, func, x = _block()
    r = soak(m, func, x, runs=40, loads=6, execution="pool", model="block")
    assert (r.runs, r.warmup_runs, r.loads, r.warmup_loads) == (40, 2 * ADAPT_AFTER, 6, 5)
    assert r.objects_runs == r.objects_warm and r.objects_runs["kernels"] > 0  # the executable's
    assert r.objects_loads == r.objects_unloaded and r.objects_loads["kernels"] == 0
    assert not r.leaks() and r.rss_warm > 0


def test_a_leak_of_objects_and_memory_shows(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that keeps a buffer and 64 KiB of host memory: the report sees both."""
    from tessel.targets.opencl.runtime import Executable

    cl = dev.cl()
    kept: list = []
    run = Executable.run

    def leaky(self, inputs):  # noqa: ANN001, ANN202
        kept.append((cl.Buffer(self.context, cl.mem_flags.READ_WRITE, 64), np.ones(64 << 10, np.uint8)))
        return run(self, inputs)

    monkeypatch.setattr(Executable, "run", leaky)
    m, func, x = _block()
    runs = 2 * ADAPT_AFTER + 24  # the warm-up, then 24 runs x 64 KiB: more than MAX_GROWTH
    r = soak(m, func, x, runs=runs, loads=6, execution="pool", model="block")
    assert r.leaks() == {"buffers": 24}  # the runs after the warm-up (the loads leak 6)
    assert r.objects_loads["buffers"] - r.objects_unloaded["buffers"] == 6
    assert r.run_growth >= MAX_GROWTH


def _transformer():  # noqa: ANN202
    from tessel.api import import_model_source, optimize
    from tessel.ir.interpreter import check_inputs

    from ..models.transformer import build_encoder, encoder_inputs

    model = build_encoder(layers=2, hidden=128, heads=4, seq=64, ffn=512, seed=0)
    module = import_model_source(model)
    optimize(module, 2)
    lower_module(module, here())
    func = module.funcs[0]
    return module, func, check_inputs(func, encoder_inputs(model))


@pytest.mark.slow
@pytest.mark.parametrize("execution", ["pool", "cooperative", "auto"])
def test_soak_holds_memory_and_objects(execution: str) -> None:
    """2000 runs (~1 ms each) and 50 loads of the transformer encoder: a leak of 500 bytes a run or 20 KiB
    a load passes MAX_GROWTH; one OpenCL object a run or a load shows in the counts."""
    if execution == "cooperative":
        needs_companion()
    d = dev.pick_device()
    module, func, x = _transformer()
    r = soak(module, func, x, runs=2000, loads=50, execution=execution, device=d, model="transformer")
    assert not r.leaks(), f"OpenCL objects over the runs: {r.objects_warm} -> {r.objects_runs}"
    assert r.objects_loads == r.objects_unloaded, (
        f"OpenCL objects over the loads: {r.objects_unloaded} -> {r.objects_loads}")
    assert r.run_growth < MAX_GROWTH, (
        f"RSS grew {r.run_growth / 1024:.0f} KiB over {r.runs - r.warmup_runs} runs")
    assert r.load_growth < MAX_GROWTH, (
        f"RSS grew {r.load_growth / 1024:.0f} KiB over {r.loads - r.warmup_loads} loads")
