"""emulate-f16: compute f16 ops in f32, keeping f16 storage between them (as MLIR's
arith-emulate-unsupported-floats does for its source types).

Each op that reads or writes f16 (other than a `cast` between f16 and f32) is rewritten to read `cast`s of
its f16 operands to f32 (an f16 constant becomes an f32 constant instead), compute in f32, and give
`cast`s of its results back to f16, so every value another op or the func's caller sees keeps its f16
type and bytes. A `kernel` region with f16 values is inlined first (its ops emulated one by one, so the
result is rounded to f16 after every op, as the numpy reference computes it). Rounding each op's f32
result to f16 is what f16 arithmetic does for + - * / and sqrt (f32 carries more than twice f16's 11
bits), and within f16 tolerance for the rest.

`intermediates=f32` (what -O2 and -O3 run, first, right after fold-qdq) then folds every cast
round trip f32 -> half -> f32 between two emulated ops: values between ops stay f32 (one rounding less
each time, C's excess precision), the model computes and stores in f32 as its f32 original does, and only
the func's half arguments and results, and half weights read by a matmul or gemm as they are, stay half.
Fusion then sees the f32 graph (with a cast at each half edge), so an f16 model compiles to as many
kernels as its f32 original: converted by onnxconverter-common's convert_float_to_float16 (keep_io_types),
the zoo's resnet18 went from 148 launches to 24 and a ViT from 155 to 20, where emulating after fusion
split every fused region back into one launch per op between casts.

The OpenCL lowering also runs this, with f16 intermediates, for devices without cl_khr_fp16 (PoCL here)
after fusion, on whatever half ops are left (a module optimized without -O2): half storage, float
compute. Left alone: matmul and gemm whose f16
operand is their constant B with an f32 A (half-precision weights, which the gemm template reads as
they are), and ops whose f16 values are not tensors of numbers (none today).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..ir.core import Block, Module, Op, Value
from ..ir.diagnostics import Diagnostic, DiagnosticError
from ..ir.types import TensorType
from .common import const_array, const_op, make_const_attr
from .manager import Pass, PassContext

HALF = ("f16", "bf16")
PASS_THROUGH = ("const", "return", "yield")


def _has_f16(op: Op, types: tuple[str, ...] = HALF) -> bool:
    return any(t.dtype in types for t in [*op.operand_types, *op.result_types])


def _is_const(v: Value) -> bool:
    return v.op is not None and v.op.name == "const"


def _half_weights(op: Op, constant: Callable[[Value], bool] = _is_const) -> bool:
    """A matmul / gemm reading f16 / bf16 weights that are `constant` with an f32 A: its template takes
    them as they are."""
    if op.name not in ("matmul", "gemm") or op.operand_types[0].dtype != "f32":
        return False
    b = op.operands[1]
    return (b.type.dtype in HALF and constant(b)
            and all(t.dtype not in HALF for i, t in enumerate(op.operand_types) if i != 1)
            and all(t.dtype not in HALF for t in op.result_types))


def _is_half_cast(op: Op) -> bool:
    """A cast between a half type and f32 (or a half type and itself): the lowering has kernels for it."""
    if op.name != "cast":
        return False
    src, dst = op.operand_types[0].dtype, op.result_types[0].dtype
    return (src in HALF and dst in (src, "f32")) or (dst in HALF and src == "f32")


def _widen(t: TensorType, types: tuple[str, ...] = HALF) -> TensorType:
    return t.with_dtype("f32") if t.dtype in types else t


def emulate_block(block: Block, module: Module, types: tuple[str, ...] = HALF) -> int:
    """Rewrite the f16 ops of `block`, a `kernel` region with f16 values first inlined (its ops become
    top-level ops of `block`, each emulated alone); returns how many ops were rewritten."""
    for op in list(block.ops):
        if op.name == "kernel" and _region_has_f16(op, types):
            _inline(block, op)
    n = 0
    widened: dict[int, Value] = {}  # an f16 value -> its f32 cast (or constant), made once
    for op in list(block.ops):
        if op.name in PASS_THROUGH or _is_half_cast(op) or _half_weights(op) or not _has_f16(op, types):
            continue
        if op.name == "kernel":  # kept above: its only half values are a contraction's weights
            continue
        for i, v in enumerate(op.operands):
            if v.type.dtype in types:
                if id(v) not in widened:
                    widened[id(v)] = _to_f32(block, op, v, module)
                op.set_operand(i, widened[id(v)])
        if op.name == "cast" and op.attrs.get("to") in types:  # an i32 -> f16 cast now casts to f32
            op.attrs["to"] = "f32"
        for r in op.results:
            if r.type.dtype not in types:
                continue
            half = r.type.dtype
            r.type = _widen(r.type)
            users = list(r.users)
            back = Op("cast", [r], [r.type.with_dtype(half)], {"to": half}, loc=op.loc, pos=op.pos)
            block.insert_after(op, back)
            back.result.name, r.name = r.name, None  # the f16 value keeps the name its readers know
            for u in users:
                for j, o in enumerate(u.operands):
                    if o is r:
                        u.set_operand(j, back.result)
        n += 1
    for op in list(block.ops):  # f16 constants whose readers now read their f32 copies
        if op.name == "const" and op.results[0].type.dtype in types and not op.results[0].uses:
            block.remove(op)
    return n


def _region_has_f16(op: Op, types: tuple[str, ...]) -> bool:
    """Whether a `kernel` region computes in a half type: half weights of a contraction inside (a
    constant kernel operand) do not count, so a gemm + epilogue on f16 weights stays one kernel."""
    body = op.regions[0].blocks[0]
    weights = {id(a) for a, v in zip(body.args, op.operands, strict=True) if _is_const(v)}
    if any(t.dtype in types for t in op.result_types):
        return True
    return any(_has_f16(o, types) and not _half_weights(o, lambda v: id(v) in weights) for o in body.ops)


def _inline(block: Block, kernel: Op) -> None:
    """Move a `kernel` op's body before it (block arguments replaced by its operands) and replace its
    results by the yielded values: f16 rounding then happens after every op, as the reference does it,
    not only at the region's edges."""
    body = kernel.regions[0].blocks[0]
    args = {id(a): v for a, v in zip(body.args, kernel.operands, strict=True)}
    yielded: list[Value] = []
    for op in list(body.ops):
        body.remove(op)
        if op.name == "yield":
            yielded = [args.get(id(v), v) for v in op.operands]
            op.drop_operands()
            continue
        for i, v in enumerate(op.operands):
            if id(v) in args:
                op.set_operand(i, args[id(v)])
        block.insert_before(kernel, op)
    for r, v in zip(kernel.results, yielded, strict=True):
        v.name = v.name or r.name
        r.replace_all_uses_with(v)
    kernel.drop_operands()
    block.remove(kernel)


def _to_f32(block: Block, op: Op, v: Value, module: Module) -> Value:
    """`v` (f16) as f32 before `op`: an f32 constant for a constant, else a cast."""
    arr = const_array(v, module) if v.op is not None and v.op.name == "const" else None
    t = _widen(v.type)
    if arr is not None:
        c = const_op(v.op.loc, make_const_attr(np.asarray(arr, np.float32), t, module, "widened"))  # type: ignore[union-attr]
    else:
        c = Op("cast", [v], [t], {"to": "f32"}, loc=op.loc, pos=op.pos)
    block.insert_before(op, c)
    return c.results[0]


def fold_round_trips(block: Block, types: tuple[str, ...] = HALF) -> int:
    """Replace each cast(cast(x: f32 -> half) -> f32) by x (dropping that rounding to half), then remove
    the casts to half left unused; returns how many round trips were folded."""
    n = 0
    for op in list(block.ops):
        if op.name != "cast" or op.attrs.get("to") != "f32":
            continue
        p = op.operands[0].op
        if (p is None or p.name != "cast" or p.attrs.get("to") not in types
                or p.operand_types[0].dtype != "f32"):
            continue
        x = p.operands[0]
        op.results[0].replace_all_uses_with(x)
        op.drop_operands()
        block.remove(op)
        n += 1
    for op in reversed(list(block.ops)):
        if op.name == "cast" and op.attrs.get("to") in types and not op.results[0].uses:
            op.drop_operands()
            block.remove(op)
    return n


@dataclass
class EmulateF16(Pass):
    """Compute f16 ops in f32 between casts, keeping f16 storage (for devices without f16 arithmetic), or
    with intermediates=f32, in f32 throughout between the func's f16 edges."""

    NAME = "emulate-f16"
    STATISTICS = {"num-emulated": "Number of f16 / bf16 ops computed in f32",
                  "num-round-trips": "Number of f32 -> half -> f32 cast pairs folded (intermediates=f32)"}
    types: str = "f16"  # the half types to emulate: f16, bf16 or both (f16+bf16; ',' outside a pipeline)
    intermediates: str = "f16"  # f16: each op's result rounded to half and stored so; f32: kept in f32

    def run(self, module: Module, ctx: PassContext) -> None:
        types = tuple(t.strip() for t in self.types.replace("+", ",").split(",") if t.strip())
        if not types or any(t not in HALF for t in types):
            raise DiagnosticError(Diagnostic(
                "error", f"emulate-f16: types must be f16 and/or bf16, got types={self.types}"))
        if self.intermediates not in ("f16", "f32"):
            raise DiagnosticError(Diagnostic("error", "emulate-f16: intermediates must be f16 or f32, got "
                                             f"intermediates={self.intermediates}"))
        for func in module.funcs:
            self.stat("num-emulated", emulate_block(func.block, module, types))
            if self.intermediates == "f32":
                self.stat("num-round-trips", fold_round_trips(func.block, types))


PASS = EmulateF16
