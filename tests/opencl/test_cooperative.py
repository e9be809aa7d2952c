"""Cooperative execution (targets/opencl/cooperative.py): one persistent kernel a segment, its work-groups
shared by the calling thread (PoCL's basic device) and the pool's workers. The kernels are the same
source, so results are bit-identical to the pool's, run after run (the counters' two halves), whether the
workers join or not, and around steps that run alone (barrier kernels) or split at their barrier."""

from __future__ import annotations

import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from tessel.frontends.onnx.importer import import_model
from tessel.ir.parser import parse_module
from tessel.passes.manager import PassManager
from tessel.passes.pipeline import O_LEVELS, parse_pipeline
from tessel.targets.opencl import device as dev
from tessel.targets.opencl.lower import lower_module
from tessel.targets.opencl.runtime import Executable

from .test_execution import inputs, lowered, needs_companion


def compiled(model: onnx.ModelProto, schedule: dict | None = None) -> object:
    """`model` at -O2 lowered for this device, with `schedule`'s keys for every template."""
    m = import_model(model.SerializeToString(), "test.onnx")
    PassManager(parse_pipeline(O_LEVELS[2])).run(m)
    lower_module(m, dev.device_info(dev.pick_device()), schedule=schedule)
    return m


def mobile_block() -> onnx.ModelProto:
    """1x1 expand, padded 3x3 depthwise (its input repacked into local memory: a phased kernel), 1x1
    project, residual add."""
    rng = np.random.default_rng(0)
    c, e = 16, 32

    def w(*shape: int) -> onnx.TensorProto:
        return onnx.numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32))

    inits = [w(e, c, 1, 1), w(e, 1, 3, 3), w(c, e, 1, 1)]
    for t, n in zip(inits, ("we", "wd", "wp"), strict=True):
        t.name = n
    nodes = [
        helper.make_node("Conv", ["x", "we"], ["a"]),
        helper.make_node("Relu", ["a"], ["b"]),
        helper.make_node("Conv", ["b", "wd"], ["d"], group=e, pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["d"], ["r"]),
        helper.make_node("Conv", ["r", "wp"], ["p"]),
        helper.make_node("Add", ["p", "x"], ["y"]),
    ]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, c, 20, 20]) for n in ("x", "y")]
    g = helper.make_graph(nodes, "block", io[:1], io[1:], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def gru() -> onnx.ModelProto:
    """A matmul, a GRU scan and a matmul after it. The scan is one work-item's loop, a cooperative step;
    spread over a work-group (`LONE`: schedule work_items 2, barriers inside its loop) it runs alone."""
    rng = np.random.default_rng(1)
    t, b, i, h = 6, 1, 8, 32
    arrays = {"W": rng.standard_normal((1, 3 * h, i)), "R": rng.standard_normal((1, 3 * h, h)) * 0.3,
              "P": rng.standard_normal((h, 4)), "Q": rng.standard_normal((i, i))}
    inits = [onnx.numpy_helper.from_array(a.astype(np.float32), name=n) for n, a in arrays.items()]
    nodes = [
        helper.make_node("MatMul", ["x", "Q"], ["xq"]),
        helper.make_node("GRU", ["xq", "W", "R"], ["ys", "yh"], hidden_size=h),
        helper.make_node("Squeeze", ["ys", "axes"], ["s"]),
        helper.make_node("MatMul", ["s", "P"], ["y"]),
    ]
    inits.append(onnx.numpy_helper.from_array(np.array([1], np.int64), name="axes"))
    g = helper.make_graph(nodes, "gru", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [t, b, i])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [t, b, 4])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


LONE = {"work_items": 2}


def same_as_pool(m, runs: int = 3) -> Executable:  # noqa: ANN001
    pool = Executable(m, m.funcs[0], execution="pool")
    exe = Executable(m, m.funcs[0], execution="cooperative")
    assert exe.running_on == "cooperative"
    for seed in range(runs):
        x = inputs(m.funcs[0], seed)
        want = pool.run(x)
        for _ in range(2):  # the second run uses the counters' other half
            for a, b in zip(want, exe.run(x), strict=True):
                assert a.tobytes() == b.tobytes()
    return exe


def test_cooperative_matches_the_pool_bit_for_bit() -> None:
    needs_companion()
    exe = same_as_pool(lowered())
    assert all(s.kernel for s in exe._cooperative.plan.segments)


def test_a_phased_kernel_runs_its_fill_first() -> None:
    needs_companion()
    m = compiled(mobile_block())
    assert "barrier(" in next(op for op in m.funcs[0].block.ops if op.name == "cl.program").attrs["source"]
    exe = same_as_pool(m)
    plan = exe._cooperative.plan
    assert plan.scratch > 0 and "_fill(" in plan.source  # the depthwise conv joined a segment
    assert all(s.kernel for s in plan.segments)


def test_steps_that_run_alone_split_the_segments() -> None:
    needs_companion()
    exe = same_as_pool(compiled(gru(), LONE))
    kinds = [s.kernel is not None for s in exe._cooperative.plan.segments]
    assert False in kinds and True in kinds
    exe = same_as_pool(compiled(gru()))  # the scan as one work-item's loop: a step like the others
    assert all(s.kernel is not None for s in exe._cooperative.plan.segments)


def test_the_calling_thread_alone_finishes_every_step() -> None:
    """Nothing waits for a worker that has not woken: with the pool's persistent kernel never launched,
    the run still completes, with the same results."""
    needs_companion()
    m = compiled(mobile_block())
    pool = Executable(m, m.funcs[0], execution="pool")
    exe = Executable(m, m.funcs[0], execution="cooperative")
    runner = exe._cooperative
    runner.pool = None
    x = inputs(m.funcs[0], 3)
    for a, b in zip(pool.run(x), exe.run(x), strict=True):
        assert a.tobytes() == b.tobytes()


def test_back_to_back_runs_keep_the_pools_work_group(monkeypatch: pytest.MonkeyPatch) -> None:
    """Between runs the pool's work-group spins for the next: runs in a row launch it once and give the
    pool's results; moving to the pool parks it first, and the next cooperative run launches it again.
    (The wait is made long, 0.2 s, or 2^30 reads where there is no cycle counter. Still, on a loaded machine
    under `make test`'s two workers, a clean-clone CI run saw a second launch in 12 back-to-back runs, with
    no pause between them over 40 us: the host may stall inside a run after the worker is done. So a
    relaunch now and then is allowed; a work-group that did not outlive its run would be 12 launches.)"""
    needs_companion()
    from tessel.targets.opencl import cooperative as coop

    monkeypatch.setattr(coop, "POOL_SPIN", 1 << 30)
    monkeypatch.setattr(coop, "POOL_WAIT_US", 200_000)
    m = compiled(mobile_block())
    pool = Executable(m, m.funcs[0], execution="pool")
    exe = Executable(m, m.funcs[0], execution="cooperative")
    runner = exe._cooperative
    assert ("> WAIT) return;" if coop.CYCLE_COUNTER else f"spin == {1 << 30}") in runner.plan.source
    cl = runner.cl
    real, launches = cl.enqueue_nd_range_kernel, []

    def launch(queue, *args):  # noqa: ANN001, ANN002, ANN202
        if queue is runner.pool_queue:
            launches.append(args)
        return real(queue, *args)

    monkeypatch.setattr(cl, "enqueue_nd_range_kernel", launch)
    x = inputs(m.funcs[0], 5)
    want = pool.run(x)
    try:
        for _ in range(12):
            for a, b in zip(want, exe.run(x), strict=True):
                assert a.tobytes() == b.tobytes()
        assert 1 <= len(launches) <= 3  # once, but for a stall of the loaded host now and then
        first = len(launches)
        exe.place(["pool"] * len(exe._live))
        assert runner.pending is None and runner.control[0] == -1  # parked: the pool has both cores
        for a, b in zip(want, exe.run(x), strict=True):
            assert a.tobytes() == b.tobytes()
        exe.place(["cooperative"] * len(exe._live))
        for a, b in zip(want, exe.run(x), strict=True):
            assert a.tobytes() == b.tobytes()
        assert len(launches) == first + 1
    finally:
        runner.park()


def test_an_idle_pool_work_group_leaves_by_itself() -> None:
    """With no next run, the pool's work-group stops spinning after POOL_WAIT_US (POOL_SPIN reads where
    there is no cycle counter): its command completes without a park."""
    needs_companion()
    m = compiled(mobile_block())
    exe = Executable(m, m.funcs[0], execution="cooperative")
    exe.run(inputs(m.funcs[0], 6))
    runner = exe._cooperative
    done = threading.Event()
    threading.Thread(target=lambda: (runner.pending.wait(), done.set()), daemon=True).start()
    assert done.wait(30), "the pool's work-group still spins with no run to come"
    assert runner.control[1] == -1  # in no run


def test_a_failed_run_releases_the_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    """When the calling thread's part of a run fails after the pool's work-group was enqueued, the abort
    flag lets that work-group leave its waits: the pool finishes instead of spinning forever."""
    needs_companion()
    m = compiled(mobile_block())
    exe = Executable(m, m.funcs[0], execution="cooperative")
    runner = exe._cooperative
    cl = runner.cl
    real = cl.enqueue_nd_range_kernel

    def launch(queue, *args):  # noqa: ANN001, ANN002, ANN202
        if queue is runner.inline_queue:
            raise cl.RuntimeError("injected")
        return real(queue, *args)

    monkeypatch.setattr(cl, "enqueue_nd_range_kernel", launch)
    with pytest.raises(cl.RuntimeError, match="injected"):
        exe.run(inputs(m.funcs[0], 0))
    monkeypatch.undo()
    done = threading.Event()
    threading.Thread(target=lambda: (runner.pool_queue.finish(), done.set()), daemon=True).start()
    assert done.wait(30), "the pool's work-group still waits for steps nobody runs"
    x = inputs(m.funcs[0], 1)  # and the executable runs again
    want = Executable(m, m.funcs[0], execution="pool").run(x)
    for a, b in zip(want, exe.run(x), strict=True):
        assert a.tobytes() == b.tobytes()


def test_auto_measures_cooperative_and_profiles_it() -> None:
    needs_companion()
    m = lowered()
    exe = Executable(m, m.funcs[0], profile=True)
    x = inputs(m.funcs[0], 0)
    exe.settle(x)
    assert "cooperative " in exe.adapt_note
    exe.place(["cooperative"] * len(exe._live))
    _, stats = exe.measure(x, 3)
    assert exe.running_on == "cooperative" and len(stats.seconds) == 3
    # each kernel's span inside the persistent kernels, from the cycle counter (x86), else each kernel
    # launched alone on the pool
    assert sorted(stats.kernel_ns) == exe._live and all(len(v) == 3 for v in stats.kernel_ns.values())
    runner = exe._cooperative
    assert all(t > 0 for v in stats.kernel_ns.values() for t in v), (
        stats.kernel_ns, runner.ticks_per_ns, runner.time_halves, runner.spans())
    if exe._cooperative.plan.profile:
        total = [sum(v[r] for v in stats.kernel_ns.values()) / 1e9 for r in range(3)]
        assert all(0 < k < 2 * w for k, w in zip(total, stats.seconds, strict=True))


def test_profiling_without_a_cycle_counter_times_each_kernel_on_the_pool(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Off x86 (no cycle counter user code may read) a profiling executable runs cooperatively with a plain
    plan, and `measure` times each kernel launched alone on the pool instead, as many times as it ran."""
    needs_companion()
    from tessel.targets.opencl import cooperative as coop

    monkeypatch.setattr(coop, "CYCLE_COUNTER", False)
    m = compiled(mobile_block())
    exe = Executable(m, m.funcs[0], profile=True, execution="cooperative")
    assert not exe._cooperative.plan.profile and "readcyclecounter" not in exe._cooperative.plan.source
    x = inputs(m.funcs[0], 7)
    results, stats = exe.measure(x, 3)
    assert exe.running_on == "cooperative" and len(stats.seconds) == 3
    assert sorted(stats.kernel_ns) == exe._live
    assert all(len(v) == 3 and all(t > 0 for t in v) for v in stats.kernel_ns.values())
    want = Executable(m, m.funcs[0], execution="pool").run(x)
    for a, b in zip(want, results, strict=True):
        assert a.tobytes() == b.tobytes()


def test_a_profiled_run_records_lone_steps() -> None:
    needs_companion()
    m = compiled(gru(), LONE)
    exe = Executable(m, m.funcs[0], profile=True, execution="cooperative")
    _, stats = exe.measure(inputs(m.funcs[0], 0), 2)
    assert sorted(stats.kernel_ns) == exe._live and all(t > 0 for v in stats.kernel_ns.values() for t in v)


def test_cooperative_needs_the_companion(monkeypatch: pytest.MonkeyPatch) -> None:
    needs_companion()
    m = lowered()
    monkeypatch.setattr(dev, "inline_companion", lambda d: None)
    from tessel.ir.diagnostics import DiagnosticError

    with pytest.raises(DiagnosticError, match="cooperative execution needs"):
        Executable(m, m.funcs[0], execution="cooperative")


def _sizes_module() -> str:
    """lrn at two sizes (one kernel, as inception's two LRNs, launched with work-groups of 32 and 64),
    and two 3x3 stride-2 convs that differ in their input channels (64 and 192: one shared kernel)."""
    x, y = "tensor<1x64x56x56xf32>", "tensor<1x192x56x56xf32>"
    w1, w2, o = "tensor<16x64x3x3xf32>", "tensor<16x192x3x3xf32>", "tensor<1x16x28x28xf32>"
    lrn = "{alpha = 1.0e-04, beta = 7.5e-01, bias = 1.0, size = 5}"
    conv = "{pads = [1, 1, 1, 1], strides = [2, 2]}"
    return "\n".join([
        "module @m {",
        f"  func @main(%x: {x}, %y: {y}, %w1: {w1}, %w2: {w2}) -> ({x}, {y}, {o}, {o}) {{",
        f"    %1 = lrn %x {lrn} : ({x}) -> {x}",
        f"    %2 = lrn %y {lrn} : ({y}) -> {y}",
        f"    %3 = conv2d %x, %w1 {conv} : ({x}, {w1}) -> {o}",
        f"    %4 = conv2d %y, %w2 {conv} : ({y}, {w2}) -> {o}",
        f"    return %1, %2, %3, %4 : {x}, {y}, {o}, {o}",
        "  }",
        "}",
    ]) + "\n"


def test_a_kernel_shared_at_several_sizes_runs_cooperatively() -> None:
    """One elementwise kernel launched at two sizes, and one conv kernel shared by two convs that differ in
    their input channels (share.py): the cooperative plan makes a function of each for each size it runs
    at (its work-item ids become literals there), so every launch computes what it does on the pool."""
    needs_companion()
    from tessel.ir.parser import parse_module

    m = parse_module(_sizes_module().encode(), "sizes.tsl")
    lower_module(m, dev.device_info(dev.pick_device()))
    launches = [op for op in m.funcs[0].block.ops if op.name == "cl.launch"]
    seen: dict[str, set[tuple[int, ...]]] = {}
    for op in launches:
        for k in op.attrs["kernels"]:
            seen.setdefault(k["name"], set()).add(tuple(k["local"]))
    assert any(len(local) > 1 for local in seen.values())  # a kernel launched with two work-group sizes
    pool = Executable(m, m.funcs[0], execution="pool")
    coop = Executable(m, m.funcs[0], execution="cooperative")
    if coop.running_on != "cooperative":
        pytest.skip("this device cannot run cooperatively")
    for seed in range(2):
        x = inputs(m.funcs[0], seed)
        for a, b in zip(pool.run(x), coop.run(x), strict=True):
            assert a.tobytes() == b.tobytes()


def _qconv(y: str, x: str, w: str, scale: str, c: int, o: int) -> str:
    t = (f"tensor<1x{c}x8x8xui8>, tensor<{o}x{c}x1x1xi8>, tensor<ui8>, tensor<i8>, tensor<{o}xf32>, "
         "tensor<ui8>")
    return (f"    {y} = qconv2d {x}, {w}, %z, %wz, {scale}, %z {{pads = [0, 0, 0, 0]}} : ({t}) -> "
            f"tensor<1x{o}x8x8xui8>\n")


INT8_POINTWISE = (
    "module @m {\n  func @main(%x: tensor<1x24x8x8xf32>) -> tensor<1x40x8x8xf32> {\n"
    "    %s = const {value = dense<0.05> : tensor<f32>} : () -> tensor<f32>\n"
    "    %z = const {value = dense<128> : tensor<ui8>} : () -> tensor<ui8>\n"
    "    %wz = const {value = dense<0> : tensor<i8>} : () -> tensor<i8>\n"
    "    %w1 = const {value = dense<3> : tensor<300x24x1x1xi8>} : () -> tensor<300x24x1x1xi8>\n"
    "    %s1 = const {value = dense<0.01> : tensor<300xf32>} : () -> tensor<300xf32>\n"
    "    %w2 = const {value = dense<-2> : tensor<40x300x1x1xi8>} : () -> tensor<40x300x1x1xi8>\n"
    "    %s2 = const {value = dense<0.002> : tensor<40xf32>} : () -> tensor<40xf32>\n"
    "    %0 = quantize %x, %s, %z : (tensor<1x24x8x8xf32>, tensor<f32>, tensor<ui8>) -> "
    "tensor<1x24x8x8xui8>\n"
    + _qconv("%1", "%0", "%w1", "%s1", 24, 300) + _qconv("%2", "%1", "%w2", "%s2", 300, 40)
    + "    %3 = dequantize %2, %s, %z : (tensor<1x40x8x8xui8>, tensor<f32>, tensor<ui8>) -> "
    "tensor<1x40x8x8xf32>\n"
    "    return %3 : tensor<1x40x8x8xf32>\n  }\n}\n"
)


def test_a_kernel_filling_its_work_groups_global_slice_runs_cooperatively() -> None:
    """The integer 1x1 convs' work-groups interleave their pixels into their own slice of scratch and meet
    at a global barrier (no local arrays): a phased step like a local-memory fill, in a segment, with the
    pool's results (300 outputs: two work-groups a panel)."""
    needs_companion()
    m = parse_module(INT8_POINTWISE, "int8.tsl")
    lower_module(m, dev.device_info(dev.pick_device()))
    source = next(op for op in m.funcs[0].block.ops if op.name == "cl.program").attrs["source"]
    assert source.count("barrier(CLK_GLOBAL_MEM_FENCE)") == 2 and "__local" not in source
    exe = same_as_pool(m)
    plan = exe._cooperative.plan
    assert plan.source.count("_fill(") >= 2 and all(s.kernel for s in plan.segments)
