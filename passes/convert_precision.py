"""convert-precision: store the weights of matmul and gemm in half precision.

`convert-precision{weights=f16}` (or `bf16`) rewrites each f32 constant that is the B operand (the
weights) of a `matmul` or `gemm` with an f32 A into an f16 (bf16) constant: the op then reads its
weights in half precision and computes in f32 (the OpenCL gemm template widens them as it loads them,
with vload_half, needing no cl_khr_fp16). Fully connected layers at batch 1 read every weight once per
run, so they are bound by weight bandwidth: halving the bytes halves their time. Values change: f16
keeps 11 significant bits (relative error up to 2^-11 per weight), bf16 8; `--validate-each` shows what
that does to a model's outputs. Weights outside f16's range (|w| > 65504) stay f32 (`out-of-range`); a
constant other ops read too is copied, the others keep the f32 one.

Convolutions keep f32 weights: they reuse each weight across the whole image and are compute bound, so
half storage would only cost the conversions. Remarks (category `precision`): `converted` per op with
the bytes saved; missed `out-of-range`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir.core import Module, Op
from ..ir.diagnostics import Diagnostic, DiagnosticError
from ..ir.types import TensorType
from .common import const_array, const_op, make_const_attr
from .manager import Pass, PassContext

CONTRACTIONS = ("matmul", "gemm")


@dataclass
class ConvertPrecision(Pass):
    """Store matmul and gemm weights (constant B operands) as f16 or bf16."""

    NAME = "convert-precision"
    STATISTICS = {
        "num-converted": "Number of matmul / gemm weight constants stored in half precision",
        "bytes-saved": "Bytes of weights saved",
    }
    weights: str = "f16"  # the storage type of matmul / gemm weights: f16 or bf16

    def run(self, module: Module, ctx: PassContext) -> None:
        if self.weights not in ("f16", "bf16"):
            raise DiagnosticError(Diagnostic(
                "error", f"convert-precision: weights must be f16 or bf16, got weights={self.weights}"))
        done: dict[int, object] = {}  # f32 constant value id -> its converted constant value
        for op in list(module.walk()):
            if op.name not in CONTRACTIONS or op.operand_types[0].dtype != "f32":
                continue
            w = op.operands[1]
            if w.type.dtype != "f32" or w.op is None or w.op.name != "const":
                continue
            self.convert(module, ctx, op, done)

    def convert(self, module: Module, ctx: PassContext, op: Op, done: dict[int, object]) -> None:
        w = op.operands[1]
        if id(w) not in done:
            arr = const_array(w, module)
            if arr is None:
                return
            if self.weights == "f16" and np.any(np.abs(arr) > np.finfo(np.float16).max):
                ctx.remark_missed("precision", "out-of-range", [op],
                                  f"'{op.name}' weights stay f32: some exceed f16's range")
                return
            t = TensorType(w.type.dims, self.weights)
            assert w.op is not None and w.op.parent is not None
            attr = make_const_attr(np.asarray(arr, np.float32).astype(t.np_dtype), t, module, "weights")
            c = w.op.parent.insert_before(w.op, const_op(w.op.loc, attr))
            c.result.name = w.name
            done[id(w)] = c.result
            saved = w.type.nbytes - t.nbytes
            self.stat("num-converted")
            self.stat("bytes-saved", saved)
        new = done[id(w)]
        op.set_operand(1, new)  # type: ignore[arg-type]
        ctx.remark_passed("precision", "converted", [op],
                          f"'{op.name}' reads its {w.type} weights as {self.weights}")


PASS = ConvertPrecision
