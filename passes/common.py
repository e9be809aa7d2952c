"""Helpers the passes share: reading constants, making them, and evaluating ops with their reference."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..ir.attributes import LITERAL_LIMIT, DenseAttr, ResourceAttr
from ..ir.core import Block, Loc, Module, Op, Value
from ..ir.ops.registry import OpError, get_op, has_trait, op_sig
from ..ir.types import TensorType

_SPLAT_CACHE: dict[str, object] = {}


def const_attr(v: Value) -> DenseAttr | ResourceAttr | None:
    op = v.op
    if op is None or op.name != "const":
        return None
    a = op.attrs.get("value")
    return a if isinstance(a, DenseAttr | ResourceAttr) else None


def const_array(v: Value, module: Module) -> np.ndarray | None:
    a = const_attr(v)
    if isinstance(a, DenseAttr):
        return a.data
    if isinstance(a, ResourceAttr):
        res = module.resources.get(a.name)
        if res is None or not res.has_data:
            return None
        return res.array(a.type)
    return None


def splat_value(v: Value, module: Module | None = None) -> float | int | bool | None:
    """The single value every element of a constant holds, or None (not a constant, or not a splat)."""
    a = const_attr(v)
    if isinstance(a, DenseAttr):
        return a.splat_value().item() if a.is_splat and a.data.size else None
    if isinstance(a, ResourceAttr) and module is not None:
        res = module.resources.get(a.name)
        if res is None or not res.has_data:
            return None
        key = res.digest + str(a.type)
        if key not in _SPLAT_CACHE:
            d = DenseAttr(a.type, res.array(a.type))
            _SPLAT_CACHE[key] = d.splat_value().item() if d.is_splat and d.data.size else None
        return _SPLAT_CACHE[key]  # type: ignore[return-value]
    return None


def make_const_attr(
    array: np.ndarray, t: TensorType, module: Module, hint: str = "folded"
) -> DenseAttr | ResourceAttr:
    """A constant attribute for `array`: a splat or small literal inline, anything larger as a resource
    named by its content hash (so the same bytes give the same name)."""
    arr = np.ascontiguousarray(np.asarray(array).astype(t.np_dtype, copy=False))
    d = DenseAttr(t, arr)
    if d.is_splat or arr.size <= LITERAL_LIMIT:
        return d
    digest = hashlib.sha256(arr.tobytes()).hexdigest()[:12]
    name = module.resources.add_array(f"{hint}.{digest}", arr)
    return ResourceAttr(name, t)


def evaluate(op: Op, inputs: list[np.ndarray], module: Module) -> list[np.ndarray]:
    """Run an op's numpy reference on concrete operands."""
    opdef = get_op(op.name)
    assert opdef is not None
    out = opdef.reference(op_sig(op, module.resources), *inputs)
    outs = list(out) if isinstance(out, list | tuple) else [out]
    return [np.asarray(o).astype(t.np_dtype, copy=False).reshape(t.dims)
            for o, t in zip(outs, op.result_types, strict=True)]


def infer_type(name: str, operands: list[TensorType], attrs: dict) -> TensorType | None:
    """The single result type `name` would have, or None when it rejects the operands or attributes."""
    opdef = get_op(name)
    assert opdef is not None
    try:
        return opdef.infer(opdef.sig(operands, attrs))[0]
    except OpError:
        return None


def const_op(anchor_loc: Loc, attr: DenseAttr | ResourceAttr) -> Op:
    return Op("const", (), [attr.type], {"value": attr}, loc=anchor_loc)


def producer(v: Value, *names: str) -> Op | None:
    """The op defining `v` when its name is one of `names`."""
    op = v.op
    return op if op is not None and op.name in names else None


@dataclass
class Refusal:
    """Why a pass leaves `ops` as they are: a reason code and the missed remark's message."""

    reason: str
    message: str
    ops: list[Op] = field(default_factory=list)


class Refuser:
    """Reports a pattern pass's refusal once per (root op, reason): bumps `num-refused` and emits a missed
    remark of category `pattern`. Call as `refuse(root, reason, ops, message)`."""

    def __init__(self, pass_: Any, ctx: Any) -> None:
        self.pass_, self.ctx = pass_, ctx
        self.seen: set[tuple[int, str]] = set()

    def __call__(self, root: Op, reason: str, ops: list[Op], message: str) -> None:
        if (id(root), reason) in self.seen:
            return
        self.seen.add((id(root), reason))
        self.pass_.stat("num-refused")
        self.ctx.remark_missed("pattern", reason, ops, message)


def reshape_groups(a: tuple[int, ...], b: tuple[int, ...]) -> list[tuple[list[int], list[int]]] | None:
    """How a reshape from dims `a` to dims `b` regroups them: consecutive runs of a's dims and of b's dims
    with equal products ([2, 4, 64] -> [8, 64]: ([0, 1], [0]), ([2], [1])); size-1 dims join the run they
    fall in, trailing ones the last. None for an empty tensor."""
    if 0 in a or 0 in b or not a or not b:
        return None
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(a) and j < len(b):
        ga, gb = [i], [j]
        pa, pb = a[i], b[j]
        i, j = i + 1, j + 1
        while pa != pb:
            if pa < pb:
                ga.append(i)
                pa *= a[i]
                i += 1
            else:
                gb.append(j)
                pb *= b[j]
                j += 1
        groups.append((ga, gb))
    groups[-1][0].extend(range(i, len(a)))
    groups[-1][1].extend(range(j, len(b)))
    return groups


def control_blocks(block: Block) -> list[Block]:
    """`block` and, recursively, the blocks of the control ops' regions in it (an if's branches, a loop's
    or scan's body): the blocks a pass that works one block at a time (fuse) treats as func bodies."""
    out = [block]
    for op in block.ops:
        if has_trait(op.name, "control"):
            for r in op.regions:
                for b in r.blocks:
                    out += control_blocks(b)
    return out
