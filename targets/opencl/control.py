"""Control flow on OpenCL: a func holding `if`, `loop` or `scan` runs as a host plan.

The plan cuts the func's block at its control ops. Each run of ops between them (a segment) becomes a func
of its own, whose arguments are the values it reads from before it and whose results are the values read
after it; it is compiled per input size like any dynamic func (dynamic.DynamicExecutable: specialized,
optimized, lowered, its programs cached), so the sizes a loop produces are known when the code after it
is compiled. A control op is run by the host: `if` reads its condition back and runs the plan of the
region it picks; `loop` reads its trip count and condition, and runs its body's plan once per iteration
(the body compiled once per size, its kernels launched each iteration); `scan` runs its body's plan on each
slice. Regions' plans are made the same way, recursively, and kept.

Values stay on the device between the parts: a segment's results are DeviceArrays (runtime.py) over its
result slots, which the next segment's run copies device to device; what a region yields is copied out of
those slots on the device (a loop's next iteration runs the same segments again), so loop-carried values
never cross to the host. The host reads back only what it decides on (a condition, a trip count), a
scan's inputs (it slices them) and the func's results.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...ir.core import Block, Func, Module, Op, Region, Value
from ...ir.ops.registry import get_op, has_trait, op_sig
from ...ir.resources import ResourceTable
from .dynamic import SPECIALIZE, DynamicExecutable
from .runtime import DeviceArray


def on_host(op: Op) -> bool:
    """An op the host plan carries out: `if`, `loop`, `scan` and `assert`."""
    return has_trait(op.name, "control") or has_trait(op.name, "host")


def has_control(func: Func) -> bool:
    """Whether `func`'s body holds an `if`, `loop`, `scan` or `assert` (which the host plan runs)."""
    return any(on_host(op) for op in func.block.ops)


def _clone(op: Op, mapping: dict[int, Value]) -> Op:
    regions = []
    for r in op.regions:
        region = Region()
        for b in r.blocks:
            nb = Block([a.type for a in b.args], [a.name for a in b.args])
            mapping.update({id(a): x for a, x in zip(b.args, nb.args, strict=True)})
            for inner in b.ops:
                nb.append(_clone(inner, mapping))
            region.add_block(nb)
        regions.append(region)
    new = Op(op.name, [mapping[id(v)] for v in op.operands], op.result_types, dict(op.attrs), regions, op.loc,
             [r.name for r in op.results], op.pos)
    mapping.update({id(r): x for r, x in zip(op.results, new.results, strict=True)})
    return new


def _defined_in(ops: Sequence[Op]) -> set[int]:
    out: set[int] = set()
    for op in ops:
        for inner in op.walk():
            out.update(id(r) for r in inner.results)
            for r in inner.regions:
                for b in r.blocks:
                    out.update(id(a) for a in b.args)
    return out


def _reads(ops: Sequence[Op]) -> list[Value]:
    """The values `ops` (and their regions) read that they do not define, in first-use order."""
    inside = _defined_in(ops)
    seen: dict[int, Value] = {}
    for op in ops:
        for inner in op.walk():
            for v in inner.operands:
                if id(v) not in inside:
                    seen.setdefault(id(v), v)
    return list(seen.values())


class _Segment:
    """Ops between control ops, compiled as a func of their own per input size."""

    def __init__(self, module: Module, ops: list[Op], later: set[int], index: int, pipeline: Any,
                 device: Any, options: dict[str, Any]):
        self.inputs = _reads(ops)
        defined = _defined_in(ops)
        outs: dict[int, Value] = {}
        for op in ops:
            for r in op.results:
                if id(r) in later and id(r) in defined:
                    outs.setdefault(id(r), r)
        self.outputs = list(outs.values())
        table = ResourceTable()
        for r in module.resources:
            table.put(r)
        func = Func.new(f"part{index}", [v.type for v in self.inputs], [v.name or f"a{i}" for i, v in
                                                                      enumerate(self.inputs)], [])
        mapping: dict[int, Value] = {id(v): a for v, a in zip(self.inputs, func.args, strict=True)}
        for op in ops:
            func.block.append(_clone(op, mapping))
        results = [mapping[id(v)] for v in self.outputs]
        func.block.append(Op("return", results))
        func.result_types = [v.type for v in results]
        func.result_attrs = [{} for _ in results]
        if pipeline is not None:
            func.attrs[SPECIALIZE] = pipeline
        self.module = Module(module.name, [func], dict(module.attrs), table)
        self.runner = DynamicExecutable(self.module, func, device, **options)

    def run(self, env: dict[int, Any]) -> None:
        outs = self.runner.run([env[id(v)] for v in self.inputs], on_device=True)
        env.update({id(v): o for v, o in zip(self.outputs, outs, strict=True)})


class Plan:
    """A block run from the host: its segments compiled per size, its control ops run here."""

    def __init__(self, module: Module, block: Block, pipeline: Any, device: Any, options: dict[str, Any]):
        self.module, self.block, self.pipeline = module, block, pipeline
        self.device, self.options = device, options
        self.steps: list[Any] = []
        self.sub: dict[int, Plan] = {}  # region id -> its plan
        ops = [op for op in block.ops if op.name not in ("return", "yield")]
        group: list[Op] = []
        k = 0
        for i, op in enumerate(ops + [None]):  # type: ignore[list-item]
            if op is None or on_host(op):
                if group:
                    later = {id(v) for v in _reads(ops[i:] + [block.ops[-1]])}
                    self.steps.append(_Segment(module, group, later, k, pipeline, device, options))
                    k += 1
                    group = []
                if op is not None:
                    self.steps.append(op)
            else:
                group.append(op)
        self.terminator = block.ops[-1]

    def plan_of(self, region: Region) -> Plan:
        p = self.sub.get(id(region))
        if p is None:
            p = Plan(self.module, region.block, self.pipeline, self.device, self.options)
            self.sub[id(region)] = p
        return p

    def run(self, env: dict[int, Any]) -> list[Any]:
        for step in self.steps:
            if isinstance(step, _Segment):
                step.run(env)
            else:
                outs = self.control(step, env)
                env.update({id(r): o for r, o in zip(step.results, outs, strict=True)})
        return [env[id(v)] for v in self.terminator.operands]

    def region(self, op: Op, k: int, env: dict[int, Any], args: Sequence[Any]) -> list[Any]:
        """Run region `k` of `op` on block arguments `args`. What it yields is copied, on the device, out
        of the slots of the segments that made it (a loop's next iteration runs them again)."""
        region = op.regions[k]
        inner = dict(env)
        inner.update({id(a): x for a, x in zip(region.block.args, args, strict=True)})
        return [o.detached() if isinstance(o, DeviceArray) else o for o in self.plan_of(region).run(inner)]

    def control(self, op: Op, env: dict[int, Any]) -> list[Any]:
        """Run `if`, `loop`, `scan` or `assert` `op` by its registry reference, whose regions run as plans:
        the host reads back a condition or trip count, and values stay on the device (a scan's inputs,
        which it slices, are read back)."""
        opdef = get_op(op.name)
        assert opdef is not None
        ins = [env[id(v)] for v in op.operands]
        if op.name == "scan":
            ins = [np.asarray(x) for x in ins]
        return list(opdef.reference(op_sig(op, self.module.resources), *ins,
                                    run=lambda k, args: self.region(op, k, env, args)))


class ControlExecutable:
    """Runs a func holding control flow as a host Plan (see the module docstring)."""

    def __init__(self, module: Module, func: Func, device: Any = None, **options: Any):
        from . import device as dev

        self.module, self.func = module, func
        self.device = device if device is not None else dev.pick_device()
        self.plan = Plan(module, func.block, func.attrs.get(SPECIALIZE), self.device, options)
        self.running_on, self.adapt_note = "host plan", "control flow: the host runs each region's kernels"
        self.build_seconds = 0.0
        self.peak_bytes = self.weight_bytes = 0
        self.steps: list[Any] = []

    def run(self, arrays: Sequence[Any], on_device: bool = False) -> list[Any]:
        env: dict[int, Any] = {id(a): x for a, x in zip(self.func.args, arrays, strict=True)}
        outs = self.plan.run(env)
        return outs if on_device else [np.asarray(o) for o in outs]

    def measure(self, arrays: Sequence[np.ndarray], repeat: int, warmup: int = 0) -> Any:
        from .runtime import RunStats

        stats = RunStats()
        results: list[np.ndarray] = []
        for _ in range(warmup):
            self.run(arrays)
        for _ in range(max(repeat, 1)):
            t0 = time.perf_counter()
            results = self.run(arrays)
            stats.seconds.append(time.perf_counter() - t0)
        return results, stats
