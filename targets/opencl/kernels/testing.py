"""One op on the OpenCL device: for template tests and micro-benchmarks.

`run_op("relu", [x])` builds a one-op module (`op_module`), lowers it with the real lowering and runs it
with the real runtime (`Executable`): packing, scratch buffers and launches as a compiled model has
them. `check_op` compares the results with the registry's numpy reference. `lower_op` only runs the
op's template (for tests that read the kernel sources or schedule), and `build` compiles its kernels.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ....ir.core import Func, Module, Op
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
    values: list[Any] | None = None,
) -> tuple[Ctx, Lowered]:
    """The template's lowering of one op (`values`: the operands' arrays, which a template may read where
    `constant` marks the operand constant)."""
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
        values=None if values is None else values.__getitem__,
    )
    return ctx, TEMPLATES[op_name](ctx)


def build(lowered: Lowered, context: Any, info: Any) -> list[Any]:
    """The kernel objects of `lowered`, in order."""
    cl = dev.cl()
    names = [f"k{i}" for i in range(len(lowered.kernels))]
    src = dev.preamble(info) + "\n".join(
        re.sub(r"\bKERNEL", n, k.source) for n, k in zip(names, lowered.kernels, strict=True)
    )
    prg = cl.Program(context, dev.with_build_preamble(src, context.devices)).build(options=["-w"])
    return [getattr(prg, n) for n in names]


def op_module(op_name: str, inputs: list[np.ndarray], attrs: dict[str, Any],
              constant: tuple[bool, ...] = ()) -> tuple[Module, list[np.ndarray]]:
    """A module `@main` computing one `op_name` on `inputs`: operand i a func argument, or a constant
    where `constant[i]` (uploaded once, packed at load time as a weight is); and the arguments' arrays."""
    from ....passes.common import const_op, make_const_attr

    opdef = get_op(op_name)
    assert opdef is not None, op_name
    types = [TensorType.of(np.asarray(a)) for a in inputs]
    sig = opdef.sig(types, attrs)
    results = opdef.infer(sig)
    fixed = [i < len(constant) and constant[i] for i in range(len(inputs))]
    args = [i for i in range(len(inputs)) if not fixed[i]]
    module = Module("op")
    func = Func.new("main", [types[i] for i in args], [f"in{i}" for i in args], results)
    block = func.block
    values, it = [], iter(block.args)
    for i, a in enumerate(inputs):
        if fixed[i]:
            c = block.append(const_op((), make_const_attr(np.asarray(a), types[i], module, f"in{i}")))
            values.append(c.results[0])
        else:
            values.append(next(it))
    op = block.append(Op(op_name, values, results, attrs))
    block.append(Op("return", op.results))
    module.funcs.append(func)
    return module, [np.ascontiguousarray(inputs[i]) for i in args]


def run_op(
    op_name: str,
    inputs: list[np.ndarray],
    attrs: dict[str, Any] | None = None,
    *,
    schedule: dict[str, Any] | None = None,
    repeat: int = 0,
    info: Any = None,
    constant: tuple[bool, ...] = (),
) -> tuple[list[np.ndarray], float]:
    """Results and (when repeat > 0) the median over `repeat` timed runs of the summed time of the op's
    kernels (profiling events; packing of constant operands happens once, at load, and is not counted).
    The op runs as a one-op module through the real lowering (`lower_module`, `info`: the DeviceInfo to
    lower for, default the device it runs on) and runtime (`Executable`); `constant[i]` makes operand i
    a constant instead of an argument."""
    from ..lower import lower_module
    from ..runtime import Executable

    device = dev.pick_device()
    info = info or dev.device_info(device)
    module, args = op_module(op_name, inputs, dict(attrs or {}), constant)
    lower_module(module, info, schedule=schedule)
    func = module.funcs[0]
    exe = Executable(module, func, device, profile=bool(repeat))
    outs = exe.run(args)
    seconds = 0.0
    if repeat:
        _, stats = exe.measure(args, repeat)
        runs = len(stats.seconds)
        seconds = float(np.median([sum(ns[r] for ns in stats.kernel_ns.values()) for r in range(runs)])) / 1e9
    return outs, seconds


def check_op(
    op_name: str,
    inputs: list[np.ndarray],
    attrs: dict[str, Any] | None = None,
    *,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    schedule: dict[str, Any] | None = None,
    info: Any = None,
    constant: tuple[bool, ...] = (),
) -> None:
    """Assert the op lowered for `info` (default the device) and run on the device matches the registry
    reference on `inputs` (`constant`: as run_op)."""
    opdef = get_op(op_name)
    assert opdef is not None
    types = [TensorType.of(np.asarray(a)) for a in inputs]
    sig = opdef.sig(types, dict(attrs or {}))
    sig.results = opdef.infer(sig)
    want = opdef.reference(sig, *inputs)
    want = list(want) if isinstance(want, list | tuple) else [want]
    got, _ = run_op(op_name, inputs, attrs, schedule=schedule, info=info, constant=constant)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        w = np.asarray(w)
        assert g.shape == w.shape, f"result {i}: shape {g.shape}, expected {w.shape}"
        if w.dtype.kind in "fc":
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"{op_name} result {i}")
        else:
            np.testing.assert_array_equal(g, w.astype(g.dtype), err_msg=f"{op_name} result {i}")
