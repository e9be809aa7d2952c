"""Run one op's template directly on the OpenCL device: for template tests and micro-benchmarks.

`run_op("relu", [x])` infers the result types with the registry, lowers with the op's template, packs
operands as the template asks (with the registry's `pack` reference), builds the kernels, runs them and
returns the results. `check_op` compares them with the registry's numpy reference.
"""

from __future__ import annotations

import re
import time
from typing import Any

import numpy as np

from ....ir.ops.registry import get_op
from ....ir.types import TensorType
from .. import device as dev
from .base import TEMPLATES, Ctx, Lowered


def lower_op(
    op_name: str,
    types: list[TensorType],
    attrs: dict[str, Any],
    *,
    constant: tuple[bool, ...] = (),
    schedule: dict[str, Any] | None = None,
    info: Any = None,
) -> tuple[Ctx, Lowered]:
    from . import load_all

    load_all()
    opdef = get_op(op_name)
    assert opdef is not None, op_name
    sig = opdef.sig(types, attrs)
    sig.results = opdef.infer(sig)
    ctx = Ctx(
        op_name,
        sig,
        info or dev.device_info(dev.pick_device()),
        constant or (False,) * len(types),
        dict(schedule or {}),
    )
    return ctx, TEMPLATES[op_name](ctx)


def build(lowered: Lowered, context: Any, info: Any) -> list[Any]:
    """The kernel objects of `lowered`, in order."""
    cl = dev.cl()
    names = [f"k{i}" for i in range(len(lowered.kernels))]
    src = dev.preamble(info) + "\n".join(
        re.sub(r"\bKERNEL", n, k.source) for n, k in zip(names, lowered.kernels, strict=True)
    )
    prg = cl.Program(context, src).build(options=["-w"])
    return [getattr(prg, n) for n in names]


def run_op(
    op_name: str,
    inputs: list[np.ndarray],
    attrs: dict[str, Any] | None = None,
    *,
    schedule: dict[str, Any] | None = None,
    repeat: int = 0,
    info: Any = None,
) -> tuple[list[np.ndarray], float]:
    """Results and (when repeat > 0) the median seconds of `repeat` timed runs of all the op's kernels;
    `info`: the DeviceInfo to lower for (default: the device it runs on)."""
    cl = dev.cl()
    device = dev.pick_device()
    info = info or dev.device_info(device)
    context = dev.context_for(device)
    queue = cl.CommandQueue(context)
    types = [TensorType.of(np.asarray(a)) for a in inputs]
    ctx, lowered = lower_op(op_name, types, dict(attrs or {}), schedule=schedule, info=info)
    arrays = [np.ascontiguousarray(a) for a in inputs]
    for i, spec in lowered.pack.items():
        arrays[i] = spec.apply(arrays[i])
    mf = cl.mem_flags
    ins = [
        cl.Buffer(context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a)
        if a.nbytes
        else cl.Buffer(context, mf.READ_ONLY, 4)
        for a in arrays
    ]
    outs_host = [np.empty(t.dims, t.np_dtype) for t in ctx.results]
    outs = [cl.Buffer(context, mf.READ_WRITE, max(o.nbytes, 4)) for o in outs_host]
    tmps = [cl.Buffer(context, mf.READ_WRITE, max(n, 4)) for n in lowered.scratch]
    kernels = build(lowered, context, info)
    table = (
        {f"in{i}": b for i, b in enumerate(ins)}
        | {f"out{i}": b for i, b in enumerate(outs)}
        | {f"tmp{i}": b for i, b in enumerate(tmps)}
    )
    for kobj, k in zip(kernels, lowered.kernels, strict=True):
        names = k.args or tuple(f"in{i}" for i in range(len(ins))) + tuple(
            f"out{i}" for i in range(len(outs))
        )
        kobj.set_args(*[table[n] for n in names])

    def once() -> None:
        for kobj, k in zip(kernels, lowered.kernels, strict=True):
            if all(k.global_size):
                cl.enqueue_nd_range_kernel(queue, kobj, k.global_size, k.local_size)
        queue.finish()

    once()
    for o, b in zip(outs_host, outs, strict=True):
        if o.nbytes:
            cl.enqueue_copy(queue, o, b)
    queue.finish()
    seconds = 0.0
    if repeat:
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            once()
            times.append(time.perf_counter() - t0)
        seconds = float(np.median(times))
    return outs_host, seconds


def check_op(
    op_name: str,
    inputs: list[np.ndarray],
    attrs: dict[str, Any] | None = None,
    *,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    schedule: dict[str, Any] | None = None,
    info: Any = None,
) -> None:
    """Assert the OpenCL template (lowered for `info`, default the device) matches the registry reference
    on `inputs`."""
    opdef = get_op(op_name)
    assert opdef is not None
    types = [TensorType.of(np.asarray(a)) for a in inputs]
    sig = opdef.sig(types, dict(attrs or {}))
    sig.results = opdef.infer(sig)
    want = opdef.reference(sig, *inputs)
    want = list(want) if isinstance(want, list | tuple) else [want]
    got, _ = run_op(op_name, inputs, attrs, schedule=schedule, info=info)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        w = np.asarray(w)
        assert g.shape == w.shape, f"result {i}: shape {g.shape}, expected {w.shape}"
        if w.dtype.kind in "fc":
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"{op_name} result {i}")
        else:
            np.testing.assert_array_equal(g, w.astype(g.dtype), err_msg=f"{op_name} result {i}")
