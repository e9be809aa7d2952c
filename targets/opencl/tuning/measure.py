"""Measuring schedule points: one op, alone in a module of its own, lowered with each point and timed by
profiling events in interleaved rounds.

`standalone` copies an op (a fused `kernel` region with it) into a module whose func takes the op's
non-constant operands as arguments and makes its constant operands `const`s of seeded random values: a
kernel's code depends on which operands are constant, never on their values. `Trial` lowers that module
with a point as the lowering's schedule and loads it. `compare` times the trials in rounds: each round runs
every trial `block` times in a row in an order that rotates (the fastest run counts: the first may pay for
a switch), a run's time being the sum of its kernels' profiling events (a non-constant operand's packing
kernel included: the model pays for it too). This VM's noise comes in phases that slow every kernel, so a
point is judged by the median over rounds of its time over the default's in the same round, and its noise
by the spread of those ratios.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ....ir.attributes import DenseAttr, ResourceAttr
from ....ir.core import Block, Func, Module, Op, Region, Value
from ....ir.types import TensorType
from ..kernels.base import DeviceInfo
from ..space import Point


def clone_op(op: Op, mapping: dict[int, Value], src: Module, dst: Module) -> Op:
    """A copy of `op` (its regions too) over the values `mapping` gives for its operands; the resources
    its constants reference are copied from `src` to `dst`."""
    attrs = dict(op.attrs)
    for k, v in attrs.items():
        if isinstance(v, ResourceAttr) and v.name in src.resources:
            res = src.resources[v.name]
            attrs[k] = ResourceAttr(dst.resources.add(v.name, res.data), v.type)
    regions = []
    for region in op.regions:
        blocks = []
        for block in region.blocks:
            nb = Block([a.type for a in block.args])
            for a, c in zip(block.args, nb.args, strict=True):
                mapping[id(a)] = c
            for inner in block.ops:
                nb.append(clone_op(inner, mapping, src, dst))
            blocks.append(nb)
        regions.append(Region(blocks))
    new = Op(op.name, [mapping[id(v)] for v in op.operands], op.result_types, attrs, regions, loc=op.loc)
    for r, c in zip(op.results, new.results, strict=True):
        mapping[id(r)] = c
    return new


def standalone(op: Op, src: Module, constant: Sequence[bool]) -> Module:
    """A module whose func @main runs a copy of `op` alone (see the module's docstring); its constant
    operands are splats (a kernel's code never depends on the values, and a splat costs no memory until
    the runtime packs it)."""
    dst = Module("tune")
    distinct: list[Value] = []
    for v in op.operands:
        if all(v is not d for d in distinct):
            distinct.append(v)
    const_ids = {id(v) for v, c in zip(op.operands, constant, strict=False) if c}
    args = [v for v in distinct if id(v) not in const_ids]
    func = Func.new("main", [v.type for v in args], [f"in{i}" for i in range(len(args))], op.result_types)
    mapping: dict[int, Value] = {id(v): a for v, a in zip(args, func.args, strict=True)}
    for v in distinct:
        if id(v) in const_ids:
            t: TensorType = v.type
            splat = np.array(0.0625 if t.dtype.startswith(("f", "bf")) else 0, t.np_dtype)
            c = func.block.append(Op("const", [], [t], {"value": DenseAttr(t, splat)}))
            mapping[id(v)] = c.results[0]
    new = func.block.append(clone_op(op, mapping, src, dst))
    func.block.append(Op("return", new.results))
    dst.funcs.append(func)
    return dst


def random_inputs(func: Func, seed: int = 0) -> list[np.ndarray]:
    """Seeded random inputs of `func`, in argument order."""
    from ....ir.interpreter import check_inputs
    from ....ir.interpreter import random_inputs as by_name

    return check_inputs(func, by_name(func, seed))


@dataclass
class Trial:
    """One point of one op's space, lowered and loaded."""

    point: Point
    exe: Any  # runtime.Executable
    inputs: list[np.ndarray]
    source: str  # the kernels' source (two points giving the same kernels are one trial)

    def once(self) -> float:
        """Microseconds of one run, by its kernels' profiling events."""
        _, events = self.exe.enqueue(self.inputs)
        return sum(e.profile.end - e.profile.start for e in events) / 1e3


def lower_point(op: Op, src: Module, constant: Sequence[bool], info: DeviceInfo, options: dict[str, Any],
                point: Point) -> Module:
    """The standalone module of `op`, lowered with the point's keys as the lowering's schedule (a
    NotLowerable of the point comes back as a DiagnosticError from lower_module)."""
    from ..lower import lower_module

    module = standalone(op, src, constant)
    return lower_module(module, info, None, {**options, **point})


def program_text(module: Module) -> str:
    func = module.funcs[0]
    parts = [str(o.attrs.get("source", "")) for o in func.block.ops if o.name == "cl.program"]
    parts += [repr(o.attrs.get("kernels")) for o in func.block.ops if o.name == "cl.launch"]
    return "\n".join(parts)


def load(module: Module, device: Any, point: Point) -> Trial:
    from ..runtime import Executable

    func = module.funcs[0]
    exe = Executable(module, func, device, profile=True, execution="pool")
    inputs = random_inputs(func)
    trial = Trial(point, exe, inputs, program_text(module))
    trial.once()  # PoCL compiles a kernel at its first launch
    return trial


@dataclass
class Comparison:
    us: list[float]  # each trial's median time, in microseconds
    ratio: list[float]  # each trial's median ratio to trial 0 (the default) over rounds
    spread: list[float]  # half the interquartile range of those ratios
    rounds: int
    seconds: float


def compare(trials: Sequence[Trial], rounds: int = 7, block: int = 2,
            max_seconds: float = 5.0) -> Comparison:
    """Time `trials` (the default first) in interleaved rounds: at least three, at most `rounds`, fewer
    when a round takes long enough that `max_seconds` would pass."""
    t0 = time.perf_counter()
    n = len(trials)
    times: list[list[float]] = [[] for _ in trials]
    r = 0
    while r < rounds:
        for k in range(n):
            i = (k + r) % n
            times[i].append(min(trials[i].once() for _ in range(block)))
        r += 1
        spent = time.perf_counter() - t0
        if r >= 3 and spent / r * (r + 1) > max_seconds:
            break
    ratios = [[a / b if b > 0 else 1.0 for a, b in zip(t, times[0], strict=True)] for t in times]
    spread = []
    for rs in ratios:
        q = statistics.quantiles(rs, n=4) if len(rs) >= 2 else [rs[0]] * 3
        spread.append((q[2] - q[0]) / 2)
    return Comparison([statistics.median(t) for t in times], [statistics.median(rs) for rs in ratios],
                      spread, r, time.perf_counter() - t0)


MIN_GAIN = 0.03
"""A point must beat the default by at least this fraction (and by more than its measured noise)."""


def winner(c: Comparison) -> int:
    """The trial to keep: the fastest by median ratio when it beats the default (trial 0) by more than
    MIN_GAIN and its ratios' spread, else 0."""
    best = min(range(len(c.ratio)), key=lambda i: (c.ratio[i], i))
    if best and 1.0 - c.ratio[best] > max(MIN_GAIN, c.spread[best]) and math.isfinite(c.ratio[best]):
        return best
    return 0
