"""fold-qdq: turn dequantize -> float op -> quantize into integer arithmetic.

A QDQ model (onnxruntime's `quantize_static` with QuantFormat.QDQ) computes every layer in float between
a `dequantize` of its 8-bit inputs and a `quantize` of its output. This pass rewrites, rooted at each
`quantize(y, y_scale, y_zero_point)` with constant per-tensor parameters:

- contractions: y = conv2d(dequantize(x), dequantize(W), bias) becomes
  `qconv2d(x, W, x_zp, W_zp, x_scale * W_scale / y_scale, y_zp, bias_i32)`, with W's scale and zero
  point per tensor or per output channel and the float bias quantized to i32 at x_scale * W_scale (the
  scale onnxruntime quantizes it with, so a dequantized i32 bias comes back exactly). matmul (W of rank
  2, with or without an `add` of a bias vector) and gemm (alpha = 1, trans_a = 0; trans_b transposes W)
  become `qmatmul` the same way. A `relu` or `clip` between the contraction and the quantize becomes the
  requantization's saturation bounds.
- data movement: y = P(dequantize(x, s, z)) quantized with the same s and z, for P a reshape, a
  transpose, a concat (every input at s and z) or a max pool (dequantize is increasing), becomes P(x) on
  the integers; a concat or max pool at other parameters becomes P of its inputs requantized
  (quantize(dequantize(x_i)) at the output's parameters, which fold-lookup makes tables).
- quantize(dequantize(x, s, z), s, z) is x.
- a residual add, quantize(dequantize(a) + dequantize(b)) with per-tensor parameters and one 8-bit type,
  becomes `qadd(a, b)`: float32 fmas from the integers as onnxruntime's QLinearAdd computes it, so a QDQ
  model's residual adds match onnxruntime's to the bit (the float chain, dequantize / add / quantize,
  differs from it on a few elements in ten thousand, which a deep network grows into whole steps).
- an average pool, quantize(avg_pool2d(dequantize(x))), keeps the pool in float and quantizes as
  onnxruntime's QLinearAveragePool does, the zero point added before rounding (`average`).
- a mul of two dequantized tensors quantized per tensor (a hard-swish's) becomes `qmul(a, b)`:
  onnxruntime's QLinearMul arithmetic (the integer product times a_scale * b_scale / scale in float32).
- a softmax of ui8 to ui8, quantize(softmax(dequantize(x))), becomes `qsoftmax(x)`: onnxruntime's
  QLinearSoftmax arithmetic (an exp table, float sums, floor(1 / y_scale)).

Other elementwise ops between dequantize and quantize (a sigmoid, a mul of a float) stay in float: fold-lookup
makes a chain of one 8-bit tensor a table, `fuse` the others one kernel that reads and writes 8-bit
values; they, and other ops that stay in float there, get a missed remark `float-op`. A `quantize` of a
conv2d, matmul or gemm the pass cannot fold gets a missed remark (category `quantization`) saying why:
`not-dequantized` (an operand does not come from a dequantize), `not-constant` (a scale or zero point is
not a constant), `per-channel` (a scale that is not per tensor, or a weight scale not along the output
channels), `multi-use` (the float result has other users), `attributes` (gemm's alpha, beta or trans_a),
`dtype` (not 8-bit).

Run it before fold-constants (which would fold a dequantize of constant weights into float weights): -O2
and -O3 begin with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..ir.core import Module, Op, Value, fuse_locs
from ..ir.ops.registry import get_op
from ..ir.types import TensorType, int_range
from .common import Refusal, const_array, const_op, make_const_attr
from .manager import Pass, PassContext
from .rewrite import Rewriter, apply_patterns_greedily

EIGHT_BIT = ("i8", "ui8")
MOVEMENT = ("reshape", "transpose", "max_pool2d", "concat")  # exact on the integers at equal parameters
REQUANTIZED = ("max_pool2d", "concat")  # at others, each input requantized first
CONTRACTIONS = ("conv2d", "matmul", "gemm")


@dataclass
class Quant:
    """A dequantize's (or quantize's) integer value and constant parameters, as float64 / int arrays."""

    value: Value  # the integers (for a quantize: the float input)
    scale: np.ndarray
    zero_point: np.ndarray
    zp_value: Value
    op: Op
    reshape: Op | None = None  # a reshape of the dequantized value the contraction reads through

    @property
    def per_tensor(self) -> bool:
        return self.scale.size == 1 and self.zero_point.size == 1

    def same(self, other: Quant) -> bool:
        return (self.per_tensor and other.per_tensor
                and self.zp_value.type.dtype == other.zp_value.type.dtype
                and float(self.scale.reshape(-1)[0]) == float(other.scale.reshape(-1)[0])
                and int(self.zero_point.reshape(-1)[0]) == int(other.zero_point.reshape(-1)[0]))


class Folder:
    def __init__(self, owner: FoldQdq, module: Module, ctx: PassContext):
        self.owner, self.module, self.ctx = owner, module, ctx
        self.reported: set[int] = set()

    # reading the pattern -----------------------------------------------------------------------------
    def params(self, op: Op | None, name: str) -> Quant | Refusal:
        if op is None or op.name != name:
            what = "an argument" if op is None else f"'{op.name}'"
            return Refusal("not-dequantized", f"an operand is {what}, not a {name}", [])
        scale, zp = (const_array(v, self.module) for v in op.operands[1:3])
        if scale is None or zp is None:
            return Refusal("not-constant", f"the {name}'s scale or zero point is not a constant", [op])
        return Quant(op.operands[0], np.asarray(scale, np.float64), np.asarray(zp), op.operands[2], op)

    def missed(self, root: Op, r: Refusal, what: str) -> None:
        if id(root) in self.reported:
            return
        self.reported.add(id(root))
        self.owner.stat("num-missed")
        self.ctx.remark_missed("quantization", r.reason, [root, *r.ops],
                               f"{what} stays in float: {r.message}")

    def const(self, anchor: Op, array: np.ndarray, t: TensorType, hint: str) -> Value:
        assert anchor.parent is not None
        attr = make_const_attr(array, t, self.module, hint)
        return anchor.parent.insert_before(anchor, const_op(anchor.loc, attr)).result

    # patterns ---------------------------------------------------------------------------------------
    def quantize(self, q: Op, rw: Rewriter) -> bool:
        out = self.params(q, "quantize")
        if isinstance(out, Refusal) or not out.per_tensor or out.zp_value.type.dtype not in EIGHT_BIT:
            return False
        y = q.operands[0]
        p = y.op
        if p is None:
            return False
        if p.name == "dequantize":
            return self.identity(q, out, p, rw)
        reshape = None
        if p.name == "reshape" and len(p.result.uses) == 1 and _produced_by(p.operands[0],
                                                                             (*CONTRACTIONS, "relu", "clip")):
            reshape, p = p, p.operands[0].op  # a conv1d's squeeze (the importer's conv2d on [N, C, L, 1])
            assert p is not None
        if p.name in MOVEMENT:
            if self.movement(q, out, p, rw):
                return True
            if p.name in REQUANTIZED:
                self.float_op(p, "an input is not dequantized per tensor")
            return False
        if p.name in ("add", "mul") and self.add(q, out, p, rw):
            return True
        if p.name == "avg_pool2d" and self.average(q, out, p, rw):
            return True
        if p.name == "softmax" and self.softmax(q, out, p, rw):
            return True
        lo, hi, contraction = self.bounds(p, out)
        if contraction is None or contraction.name not in CONTRACTIONS:
            self.float_op(p)
            return False
        act = p if p is not contraction else None
        found = self.contraction(q, out, contraction, act, lo, hi, rw, reshape)
        if isinstance(found, Refusal):
            self.missed(contraction, found, f"'{contraction.name}'")
            return False
        return True

    def float_op(self, p: Op, how: str = "") -> None:
        """A missed remark for an op between dequantizes and a quantize that stays in float."""
        if not any(v.op is not None and v.op.name == "dequantize" for v in p.operands):
            return
        opdef = get_op(p.name)
        how = how or ("fuse makes the chain one kernel on the 8-bit values" if opdef is not None
                      and opdef.has("elementwise") else "it has no integer form here")
        self.missed(p, Refusal("float-op", how), f"'{p.name}' between dequantize and quantize")

    def identity(self, q: Op, out: Quant, dq: Op, rw: Rewriter) -> bool:
        inp = self.params(dq, "dequantize")
        if isinstance(inp, Refusal) or not inp.same(out) or inp.value.type != q.result.type:
            return False
        rw.replace_op(q, [inp.value])
        self.owner.stat("num-identities")
        return True

    def movement(self, q: Op, out: Quant, p: Op, rw: Rewriter) -> bool:
        """P(dequantize(x, s, z)...) quantized with the same s and z is P on the integers, for P a reshape,
        transpose, concat (every input at those parameters) or max pool (dequantize is increasing: the
        largest integer is the largest float). A concat or max pool at other parameters takes each input
        quantized at the output's: quantize(P(v)) = P(quantize(v)) for them, exactly."""
        ins = [self.params(v.op, "dequantize") for v in p.operands]
        if not ins or any(isinstance(i, Refusal) or not i.per_tensor for i in ins) or len(p.result.uses) != 1:
            return False
        t = p.result.type.with_dtype(out.zp_value.type.dtype)
        values = [i.value for i in ins if not isinstance(i, Refusal)]
        if any(not i.same(out) for i in ins if not isinstance(i, Refusal)):
            if p.name not in REQUANTIZED:
                return False
            # the quantize moves onto each input (it is elementwise, and non-decreasing for the max): a
            # requantization of one 8-bit tensor, which fold-lookup makes a table, or nothing at equal
            # parameters
            values = [rw.create(q, "quantize", [v, q.operands[1], q.operands[2]],
                                [v.type.with_dtype(t.dtype)], {}, q.loc).result for v in p.operands]
        new = rw.create(q, p.name, values, [t], dict(p.attrs), fuse_locs(p.loc, q.loc))
        new.result.name = q.result.name
        rw.replace_op(q, [new.result])
        self.owner.stat("num-integer-movement")
        self.ctx.remark_passed("quantization", "integer", [p], f"'{p.name}' runs on the 8-bit values")
        return True

    def add(self, q: Op, out: Quant, p: Op, rw: Rewriter) -> bool:
        """quantize(dequantize(a) + dequantize(b)) (or *) with per-tensor parameters and one 8-bit type
        throughout: a `qadd` (`qmul`) on the integers, onnxruntime's QLinearAdd (QLinearMul) arithmetic."""
        a, b = (self.params(v.op, "dequantize") for v in p.operands)
        if isinstance(a, Refusal) or isinstance(b, Refusal) or len(p.result.uses) != 1:
            return False
        dtype = out.zp_value.type.dtype
        if not (a.per_tensor and b.per_tensor) or {a.value.type.dtype, b.value.type.dtype} != {dtype}:
            return False
        attrs: dict[str, Any] = {"a_scale": float(np.float32(a.scale.reshape(-1)[0])),
                 "a_zero_point": int(a.zero_point.reshape(-1)[0]),
                 "b_scale": float(np.float32(b.scale.reshape(-1)[0])),
                 "b_zero_point": int(b.zero_point.reshape(-1)[0]),
                 "scale": float(np.float32(out.scale.reshape(-1)[0])),
                 "zero_point": int(out.zero_point.reshape(-1)[0])}
        op = "qadd" if p.name == "add" else "qmul"
        new = rw.create(q, op, [a.value, b.value], [q.result.type], attrs, fuse_locs(p.loc, q.loc))
        new.result.name = q.result.name
        rw.replace_op(q, [new.result])
        self.owner.stat("num-integer-adds")
        self.ctx.remark_passed("quantization", "integer", [p], f"'{p.name}' runs on the 8-bit values as {op}")
        return True

    def average(self, q: Op, out: Quant, p: Op, rw: Rewriter) -> bool:
        """quantize(avg_pool2d(dequantize(x))): the pool stays in float, and its quantize rounds as
        onnxruntime's QLinearAveragePool does, the zero point added before rounding: clip(round(avg /
        y_scale + y_zp)), cast. Averages of 2 or 4 integer steps land on .5 often, where rounding before
        adding an odd zero point goes the other way (13% of a PP-OCR recognizer's pooled values, which
        its next layers grew into 5-11 steps)."""
        inp = self.params(p.operands[0].op, "dequantize")
        if isinstance(inp, Refusal) or not inp.per_tensor or len(p.result.uses) != 1:
            return False
        y, t = q.operands[0], q.operands[0].type
        scalar = TensorType((), t.dtype)
        scale = self.const(q, np.array(np.float32(out.scale.reshape(-1)[0]), t.np_dtype), scalar, "y_scale")
        zp = self.const(q, np.array(float(out.zero_point.reshape(-1)[0]), t.np_dtype), scalar, "y_zero_point")
        dtype = out.zp_value.type.dtype
        lo, hi = int_range(dtype)
        v = rw.create(q, "div", [y, scale], [t], {}, q.loc).result
        v = rw.create(q, "add", [v, zp], [t], {}, q.loc).result
        v = rw.create(q, "round", [v], [t], {}, q.loc).result
        v = rw.create(q, "clip", [v], [t], {"min": float(lo), "max": float(hi)}, q.loc).result
        new = rw.create(q, "cast", [v], [q.result.type], {"to": dtype}, q.loc)
        new.result.name = q.result.name
        rw.replace_op(q, [new.result])
        self.owner.stat("num-average-pools")
        self.ctx.remark_passed("quantization", "average-pool", [p],
                               "'avg_pool2d' quantized as onnxruntime's QLinearAveragePool rounds")
        return True

    def softmax(self, q: Op, out: Quant, p: Op, rw: Rewriter) -> bool:
        """quantize(softmax(dequantize(x))) with ui8 x and y, per-tensor parameters: a `qsoftmax`, as
        onnxruntime's QLinearSoftmax computes it (its exp table, float sums, and floor(1 / y_scale) in place
        of 1 / y_scale: a YOLOv8 head's DFL softmax differed from the float chain on 6% of its values,
        which the next conv grew to 6 steps)."""
        inp = self.params(p.operands[0].op, "dequantize")
        if (isinstance(inp, Refusal) or not inp.per_tensor or len(p.result.uses) != 1
                or inp.value.type.dtype != "ui8" or out.zp_value.type.dtype != "ui8"):
            return False
        axis = p.attrs.get("axis", -1)
        assert isinstance(axis, int)
        attrs: dict[str, Any] = {"axis": axis,
                                 "x_scale": float(np.float32(inp.scale.reshape(-1)[0])),
                                 "y_scale": float(np.float32(out.scale.reshape(-1)[0])),
                                 "y_zero_point": int(out.zero_point.reshape(-1)[0])}
        new = rw.create(q, "qsoftmax", [inp.value], [q.result.type], attrs, fuse_locs(p.loc, q.loc))
        new.result.name = q.result.name
        rw.replace_op(q, [new.result])
        self.owner.stat("num-softmaxes")
        self.ctx.remark_passed("quantization", "integer", [p],
                               "'softmax' runs on the 8-bit values as qsoftmax (as QLinearSoftmax)")
        return True

    def bounds(self, p: Op, out: Quant) -> tuple[int, int, Op | None]:
        """The saturation bounds a relu or clip between the contraction and the quantize gives, and the
        contraction (None when there is none or the activation has other users)."""
        lo, hi = -(2**31), 2**31 - 1
        if p.name not in ("relu", "clip"):
            return lo, hi, p
        if len(p.result.uses) != 1 or p.operands[0].op is None:
            return lo, hi, None
        s, z = float(out.scale.reshape(-1)[0]), int(out.zero_point.reshape(-1)[0])
        if p.name == "relu":
            return z, hi, p.operands[0].op
        a, b = float(p.attrs.get("min", -np.inf)), float(p.attrs.get("max", np.inf))  # type: ignore[arg-type]
        lo = z + int(np.rint(a / s)) if np.isfinite(a) else lo
        hi = z + int(np.rint(b / s)) if np.isfinite(b) else hi
        return max(lo, -(2**31)), min(hi, 2**31 - 1), p.operands[0].op

    def operand(self, v: Value) -> Quant | Refusal:
        """A contraction's dequantized operand, seen through a reshape that only it reads (the importer's
        conv1d unsqueezes its input and weights to rank 4 after their dequantizes). A per-channel
        dequantize is seen through one only where the reshape keeps the channels as its first dim."""
        r = v.op
        if r is None or r.name != "reshape" or len(r.result.uses) != 1:
            return self.params(r, "dequantize")
        dq = self.params(r.operands[0].op, "dequantize")
        if isinstance(dq, Refusal):
            return dq
        if not dq.per_tensor:
            before, after = dq.value.type, r.result.type
            ws = _channel_vector(dq.scale, before, 0)
            wz = _channel_vector(dq.zero_point, before, 0)
            if ws is None or wz is None or not after.rank or after.dims[0] != before.dims[0]:
                return Refusal("per-channel", "a per-channel operand is reshaped across its channels", [r])
            # broadcast-shaped for the new rank, channels first
            shape = (before.dims[0],) + (1,) * (after.rank - 1)
            dq.scale = np.broadcast_to(ws, (before.dims[0],)).reshape(shape)
            dq.zero_point = np.broadcast_to(wz, (before.dims[0],)).reshape(shape)
        dq.reshape = r
        return dq

    def integer(self, d: Quant, anchor: Op, rw: Rewriter) -> Value:
        """The 8-bit value a contraction reads for d: reshaped as its dequantized value was."""
        if d.reshape is None:
            return d.value
        t = d.reshape.result.type.with_dtype(d.value.type.dtype)
        return rw.create(anchor, "reshape", [d.value], [t], dict(d.reshape.attrs), d.reshape.loc).result

    def contraction(self, q: Op, out: Quant, c: Op, act: Op | None, lo: int, hi: int,
                    rw: Rewriter, reshape: Op | None = None) -> Refusal | None:
        if len(c.result.uses) != 1:
            return Refusal("multi-use", f"its result has {len(c.result.uses)} users", [c])
        x = self.operand(c.operands[0])
        w = self.operand(c.operands[1])
        for r in (x, w):
            if isinstance(r, Refusal):
                return r
        assert isinstance(x, Quant) and isinstance(w, Quant)
        if x.value.type.dtype not in EIGHT_BIT or w.value.type.dtype not in EIGHT_BIT:
            return Refusal("dtype", f"its operands are {x.value.type.dtype} and {w.value.type.dtype}, "
                           "not 8-bit")
        if not x.per_tensor:
            return Refusal("per-channel", "the input's scale or zero point is not per tensor")
        if c.name == "gemm":
            alpha, beta = (float(c.attrs.get(k, 1.0)) for k in ("alpha", "beta"))  # type: ignore[arg-type]
            if alpha != 1.0 or c.attrs.get("trans_a", False) or (len(c.operands) == 3 and beta != 1.0):
                return Refusal("attributes", "gemm has alpha or beta other than 1 or transposes A")
        wt = w.value.type if w.reshape is None else w.reshape.result.type.with_dtype(w.value.type.dtype)
        if c.name == "conv2d":
            channels, axis = wt.dims[0], 0
        else:
            if wt.rank != 2:
                return Refusal("per-channel", f"the weight has rank {wt.rank}, not 2")
            trans = c.name == "gemm" and bool(c.attrs.get("trans_b", False))
            channels, axis = (wt.dims[0], 0) if trans else (wt.dims[1], 1)
        ws = _channel_vector(w.scale, wt, axis)
        wz = _channel_vector(w.zero_point, wt, axis)
        if wz is not None and np.all(wz == wz[0]):
            wz = wz[:1]  # one zero point for every channel (symmetric weights: 0)
        if ws is None or wz is None:
            return Refusal("per-channel", "the weight's scale or zero point is not per tensor or per output "
                           "channel")
        sx, sy = float(x.scale.reshape(-1)[0]), float(out.scale.reshape(-1)[0])
        bias = self.bias(c, channels)
        if isinstance(bias, Refusal):
            return bias
        acc_scale = (np.float32(sx) * ws.astype(np.float32))  # onnxruntime's bias scale
        loc = fuse_locs(*(o.loc for o in (x.op, w.op, c, *((act,) if act else ()), *((reshape,) if reshape
                                                                                      else ()), q)))
        ops: list[Value] = [self.integer(x, q, rw)]
        wq = self.integer(w, q, rw)
        if c.name == "gemm" and c.attrs.get("trans_b", False):  # W is [N, K]: qmatmul takes [K, N]
            tr = rw.create(q, "transpose", [wq], [TensorType(wt.dims[::-1], wt.dtype)], {"perm": [1, 0]}, loc)
            wq = tr.result
        ops += [wq, x.zp_value]
        zw = wz.astype(w.zero_point.dtype)
        ops.append(self.const(q, zw if wz.size > 1 else zw.reshape(()),
                              TensorType((channels,) if wz.size > 1 else (), wt.dtype), "zero_point"))
        scale = (acc_scale / np.float32(sy)).astype(np.float32)
        ops.append(self.const(q, scale if ws.size > 1 else scale.reshape(()),
                              TensorType((channels,) if ws.size > 1 else (), "f32"), "scale"))
        ops.append(out.zp_value)
        if bias is not None:
            bq = np.clip(np.rint(bias / np.broadcast_to(acc_scale, bias.shape).astype(np.float64)),
                         -(2**31), 2**31 - 1).astype(np.int32)
            ops.append(self.const(q, bq, TensorType((channels,), "i32"), "bias"))
        attrs = dict(c.attrs) if c.name == "conv2d" else {}
        if lo > -(2**31):
            attrs["min"] = lo
        if hi < 2**31 - 1:
            attrs["max"] = hi
        name = "qconv2d" if c.name == "conv2d" else "qmatmul"
        new = rw.create(q, name, ops, [c.result.type.with_dtype(q.result.type.dtype)], attrs, loc)
        if reshape is not None:  # the squeeze moves onto the 8-bit result
            new = rw.create(q, "reshape", [new.result], [q.result.type], dict(reshape.attrs), reshape.loc)
        new.result.name = q.result.name
        rw.replace_op(q, [new.result])
        self.owner.stat("num-folded")
        self.ctx.remark_passed("quantization", "integer", [c],
                               f"'{c.name}' runs on 8-bit operands with i32 accumulators as '{name}'")
        return None

    def bias(self, c: Op, channels: int) -> np.ndarray | None | Refusal:
        """The contraction's float bias per output channel (conv2d's bias, gemm's c), or None."""
        if len(c.operands) < 3:
            return None
        v = c.operands[2]
        arr = const_array(v, self.module)
        if arr is None:
            dq = self.params(v.op, "dequantize")
            if isinstance(dq, Refusal) or (arr := const_array(dq.value, self.module)) is None:
                return Refusal("not-constant", "the bias is not a constant", [c])
            arr = (arr.astype(np.float64) - dq.zero_point.astype(np.float64)) * dq.scale
        flat = np.asarray(arr, np.float64)
        if flat.size == 1:
            return np.full(channels, float(flat.reshape(-1)[0]))
        if flat.reshape(-1).size != channels or (flat.ndim == 2 and flat.shape[0] != 1):
            return Refusal("per-channel", f"the bias {v.type} is not one value per output channel", [c])
        return flat.reshape(-1)


def _produced_by(v: Value, names: tuple[str, ...]) -> bool:
    return v.op is not None and v.op.name in names


def _channel_vector(a: np.ndarray, wt: TensorType, axis: int) -> np.ndarray | None:
    """A weight's scale or zero point (broadcast-shaped by the importer) as a vector over output channels
    (size 1 when per tensor), None when it varies along another axis."""
    if a.size == 1:
        return a.reshape(1)
    shape = (1,) * (wt.rank - a.ndim) + a.shape
    if any(d != 1 for i, d in enumerate(shape) if i != axis) or shape[axis] != wt.dims[axis]:
        return None
    return a.reshape(-1)


@dataclass
class FoldQdq(Pass):
    """Turn dequantize -> conv2d / matmul / gemm -> quantize into integer ops."""

    NAME = "fold-qdq"
    STATISTICS = {
        "num-folded": "Number of contractions turned into qconv2d / qmatmul",
        "num-integer-movement": "Number of reshapes and transposes moved onto 8-bit values",
        "num-identities": "Number of quantize(dequantize(x)) with the same parameters removed",
        "num-integer-adds": "Number of quantized adds and muls made qadd and qmul",
        "num-softmaxes": "Number of quantized softmaxes made qsoftmax",
        "num-average-pools": "Number of average pools quantized as onnxruntime's QLinearAveragePool rounds",
        "num-missed": "Number of quantized contractions left in float",
    }

    def run(self, module: Module, ctx: PassContext) -> None:
        apply_patterns_greedily(module, {"quantize": [Folder(self, module, ctx).quantize]})


PASS = FoldQdq
