"""fold-batchnorm: fold batch_norm and per-channel scale/shift into the preceding conv2d/gemm/matmul.

An inference `batch_norm` is a per-channel affine map `x * s + t` (`s = scale / sqrt(var + eps)`,
`t = bias - mean * s`). When `x` is the only use of a `conv2d` (any groups), `gemm` or `matmul` whose
weights (and bias, if any) are constants, the map folds into new constant weights, scaled per output
channel, and a new bias: conv2d's bias operand, gemm's `c` (with `beta = 1`), and for `matmul` an `add`
of a constant bias right after it. `mul`, `add`, `sub` and `div` by constants that broadcast only along
the output-channel axis (`1xCx1x1` or `C` after a conv2d, `C` on the last axis after a matmul) fold the
same way. The folding math runs in float64 and the new constants are cast to the weights' type.

It refuses, with a missed remark (category `algebraic`), when the producer has other users
(`multi-use`), when the weights, bias or batch_norm parameters are not constants (`not-constant`), when
there is no contraction to fold into (`no-producer`), or when batch_norm's channel axis (1) is not the
contraction's output-channel axis (`channel-axis`: a matmul of rank above 2). Such a batch_norm with
constant parameters becomes `mul` + `add` by constant per-channel vectors (option
`decompose-standalone`), an elementwise chain that fusion handles like any other; one with non-constant
parameters stays.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir.core import Module, Op, Value, fuse_locs
from ..ir.ops.registry import get_op
from ..ir.types import TensorType
from .common import Refusal, const_array, const_op, make_const_attr
from .manager import Pass, PassContext
from .rewrite import Pattern, Rewriter, apply_patterns_greedily

CONTRACTIONS = ("conv2d", "gemm", "matmul")


@dataclass
class Anchor:
    """A contraction a per-channel affine map can fold into: `op`, optionally followed by `bias_add`
    (matmul's `add` of a constant bias), with its weights and bias read as float64 arrays."""

    op: Op
    out: Value  # what the affine map reads: op's result, or bias_add's
    axis: int  # the output-channel axis of `out`
    weight: np.ndarray
    bias: np.ndarray | None  # conv2d's bias [C], gemm's c (beta applied), matmul's bias vector [C]
    bias_add: Op | None = None


def _f64(a: np.ndarray) -> np.ndarray:
    return np.asarray(a).astype(np.float64)


def channel_vector(c: np.ndarray, out: TensorType, axis: int) -> np.ndarray | None:
    """`c` as a float64 vector over `out`'s channel axis when it broadcasts to `out` along that axis
    only (size-1 everywhere else), else None."""
    if c.ndim > out.rank or type(out.shape[axis]) is not int:
        return None
    shape = (1,) * (out.rank - c.ndim) + c.shape
    n = out.shape[axis]
    if any(d != 1 for i, d in enumerate(shape) if i != axis) or shape[axis] not in (1, n):
        return None
    return np.broadcast_to(_f64(c).reshape(-1), (n,)).copy()


def bn_affine(op: Op, module: Module) -> tuple[np.ndarray, np.ndarray] | None:
    """(s, t) of `batch_norm` as float64 [C] vectors, or None when a parameter is not a constant."""
    params = [const_array(v, module) for v in op.operands[1:]]
    if any(p is None for p in params):
        return None
    scale, bias, mean, var = (_f64(p) for p in params)  # type: ignore[arg-type]
    opdef = get_op("batch_norm")
    assert opdef is not None
    eps = float(opdef.with_defaults(op.attrs)["epsilon"])
    s = scale / np.sqrt(var + eps)
    return s, bias - mean * s


class Folder:
    """The patterns of one run, sharing the module, the context and what was already reported."""

    def __init__(self, owner: FoldBatchNorm, module: Module, ctx: PassContext):
        self.owner, self.module, self.ctx = owner, module, ctx
        self.reported: set[Op] = set()  # ops already given a missed remark (the driver revisits ops)
        self.made: set[Op] = set()  # the mul/add a decomposed batch_norm became: reported already

    def const(self, v: Value) -> np.ndarray | None:
        return const_array(v, self.module)

    # finding what to fold into ----------------------------------------------------------------------
    def anchor(self, v: Value) -> Anchor | Refusal:
        p = v.op
        if p is None or p.name not in (*CONTRACTIONS, "add"):
            what = "an argument" if p is None else f"'{p.name}'"
            return Refusal("no-producer", f"its input is {what}, not a conv2d, gemm or matmul")
        bias_add = None
        if p.name == "add":  # matmul + add of a constant bias vector: matmul's bias form
            found = self.matmul_bias(p)
            if found is None:
                return Refusal("no-producer", "its input is 'add', not a conv2d, gemm or matmul")
            p, bias_add = found
        if len(v.uses) != 1 or (bias_add is not None and len(p.result.uses) != 1):
            n = len(v.uses) if len(v.uses) != 1 else len(p.result.uses)
            return Refusal("multi-use", f"'{p.name}' has {n} uses; folding would change them all", [p])
        out = p.result.type
        axis = out.rank - 1 if p.name == "matmul" else 1
        if p.name == "matmul" and p.operands[1].type.rank < 2:
            return Refusal("channel-axis", "a matmul by a vector has no output-channel axis", [p])
        w = self.const(p.operands[1])
        if w is None:
            return Refusal("not-constant", f"the weights of '{p.name}' are not a constant", [p])
        bias: np.ndarray | None = None
        if bias_add is not None:
            bias = channel_vector(self.const(bias_add.operands[1]), out, axis)  # type: ignore[arg-type]
        elif len(p.operands) == 3:
            b = self.const(p.operands[2])
            if b is None:
                return Refusal("not-constant", f"the bias of '{p.name}' is not a constant", [p])
            bias = _f64(b)
            if p.name == "gemm":
                bias = bias * float(p.attrs.get("beta", 1.0))  # type: ignore[arg-type]
        return Anchor(p, v, axis, _f64(w), bias, bias_add)

    def matmul_bias(self, add: Op) -> tuple[Op, Op] | None:
        """(matmul, add) when `add` adds a constant channel vector to a matmul's result."""
        a, c = add.operands
        if a.op is None or a.op.name != "matmul" or add.result.type != a.type:
            return None
        k = self.const(c)
        if k is None or channel_vector(k, a.type, a.type.rank - 1) is None:
            return None
        return a.op, add

    # rewriting ------------------------------------------------------------------------------------
    def new_const(self, anchor: Op, array: np.ndarray, t: TensorType, like: Value | None = None) -> Value:
        """A constant before `anchor`, located where `like` (the constant it replaces) was, if given."""
        assert anchor.parent is not None
        loc = like.op.loc if like is not None and like.op is not None else anchor.loc
        c = anchor.parent.insert_before(
            anchor, const_op(loc, make_const_attr(array, t, self.module, "folded"))
        )
        c.result.name = like.name if like is not None else None
        return c.result

    def fold(self, a: Anchor, s: np.ndarray, t: np.ndarray, consumer: Op, rw: Rewriter) -> Value:
        """New ops before `consumer` computing `a.out * s + t` with the map folded into the weights."""
        p, out_t = a.op, a.out.type
        loc = fuse_locs(p.loc, *(() if a.bias_add is None else (a.bias_add.loc,)), consumer.loc)
        bias = t if a.bias is None else a.bias * s + t
        w_t = p.operands[1].type
        same_w = bool(np.all(s == 1))  # a pure shift keeps the weights

        def weights(scaled: np.ndarray) -> Value:
            return p.operands[1] if same_w else self.new_const(consumer, scaled, w_t, p.operands[1])

        if p.name == "conv2d":
            w = weights(a.weight * s.reshape(-1, 1, 1, 1))
            b = self.new_const(consumer, bias, TensorType((out_t.shape[1],), out_t.dtype))
            new = rw.create(consumer, "conv2d", [p.operands[0], w, b], [out_t], dict(p.attrs), loc)
        elif p.name == "gemm":
            scaled = a.weight * (s[:, None] if p.attrs.get("trans_b") else s[None, :])
            w = weights(scaled)
            c_t = TensorType(bias.shape, out_t.dtype)
            c = self.new_const(consumer, bias, c_t)
            new = rw.create(consumer, "gemm", [p.operands[0], w, c], [out_t], {**p.attrs, "beta": 1.0}, loc)
        else:
            w = weights(a.weight * s)
            has_bias = a.bias is not None or bool(np.any(bias != 0))
            if has_bias:
                b = self.new_const(consumer, bias, TensorType((out_t.shape[-1],), out_t.dtype))
            new = rw.create(consumer, "matmul", [p.operands[0], w], [p.result.type], dict(p.attrs), loc)
            if has_bias:
                new = rw.create(consumer, "add", [new.result, b], [out_t], {}, loc)
        new.result.name = consumer.result.name
        return new.result

    def missed(self, op: Op, r: Refusal, message: str) -> None:
        if op in self.reported or op in self.made:
            return
        self.reported.add(op)
        self.ctx.remark_missed("algebraic", r.reason, [op, *r.ops], f"{message}: {r.message}")

    # patterns -------------------------------------------------------------------------------------
    def batch_norm(self, op: Op, rw: Rewriter) -> bool:
        # batch_norm(P(x, W, b)) -> P(x, W * s, b * s + t); a standalone one -> x * s + t
        affine = bn_affine(op, self.module)
        if affine is None:
            self.missed(
                op,
                Refusal("not-constant", "its scale, bias, mean or var is not a constant"),
                "'batch_norm' not folded",
            )
            return False
        s, t = affine
        x = op.operands[0]
        a = self.anchor(x)
        if isinstance(a, Anchor) and a.axis != 1:
            a = Refusal(
                "channel-axis",
                f"batch_norm normalizes axis 1, '{a.op.name}' produces channels on axis {a.axis}",
                [a.op],
            )
        if isinstance(a, Anchor):
            new = self.fold(a, s, t, op, rw)
            self.ctx.remark_passed(
                "algebraic", "folded", [op, a.op], f"folded 'batch_norm' into the weights of '{a.op.name}'"
            )
            rw.replace_op(op, [new])
            self.owner.stat("num-folded")
            return True
        if not self.owner.decompose_standalone:
            self.missed(op, a, "'batch_norm' not folded")
            return False
        if type(x.type.shape[1]) is not int:
            self.missed(op, a, "'batch_norm' not decomposed: its channel count is dynamic")
            return False
        shape = (1, x.type.shape[1], *(1 for _ in x.type.shape[2:]))
        ct = TensorType(shape, x.type.dtype)
        sv = self.new_const(op, s.reshape(shape), ct)
        tv = self.new_const(op, t.reshape(shape), ct)
        mul = rw.create(op, "mul", [x, sv], [x.type])
        add = rw.create(op, "add", [mul.result, tv], [x.type])
        add.result.name = op.result.name
        self.missed(op, a, "'batch_norm' not folded, became mul + add by constants")
        self.made.update((mul, add))
        rw.replace_op(op, [add.result])
        self.owner.stat("num-decomposed")
        return True

    def scale_shift(self, op: Op, rw: Rewriter) -> bool:
        # P(x, W, b) * c -> P(x, W * c, b * c); P + c -> P(x, W, b + c); also P - c, c - P and P / c
        for i in (0, 1) if op.name != "div" else (0,):
            v, other, p = op.operands[i], op.operands[1 - i], op.operands[i].op
            if p is None or op.result.type != v.type:
                continue
            if p.name == "matmul" and (op.name == "add" or (op.name == "sub" and i == 0)):
                return False  # matmul + a bias vector is the folded form already
            if p.name not in CONTRACTIONS and not (p.name == "add" and self.matmul_bias(p) is not None):
                continue
            c = self.const(other)
            if c is None or c.dtype.kind != "f":
                continue
            vec = channel_vector(c, v.type, v.type.rank - 1 if p.name in ("matmul", "add") else 1)
            if vec is None or (op.name == "div" and not np.all(vec != 0)):
                continue
            a = self.anchor(v)
            if isinstance(a, Refusal):
                self.missed(op, a, f"'{op.name}' by a per-channel constant not folded")
                return False
            n = vec.shape[0]
            s, t = np.ones(n), np.zeros(n)
            if op.name == "mul":
                s = vec
            elif op.name == "add":
                t = vec
            elif op.name == "sub":
                s, t = (s, -vec) if i == 0 else (-s, vec)
            else:
                s = 1.0 / vec
            new = self.fold(a, s, t, op, rw)
            self.ctx.remark_passed(
                "algebraic",
                "folded",
                [op, a.op],
                f"folded '{op.name}' by a per-channel constant into '{a.op.name}'",
            )
            rw.replace_op(op, [new])
            self.owner.stat("num-folded")
            return True
        return False

    def patterns(self) -> dict[str, list[Pattern]]:
        return {
            "batch_norm": [self.batch_norm],
            "mul": [self.scale_shift],
            "add": [self.scale_shift],
            "sub": [self.scale_shift],
            "div": [self.scale_shift],
        }


@dataclass
class FoldBatchNorm(Pass):
    """Fold batch_norm and per-channel scale/shift into the preceding conv2d/gemm/matmul weights."""

    NAME = "fold-batchnorm"
    STATISTICS = {
        "num-folded": "Number of batch_norm and per-channel mul/add/sub/div folded into weights",
        "num-decomposed": "Number of standalone batch_norm turned into mul + add by constants",
    }
    decompose_standalone: bool = True

    def run(self, module: Module, ctx: PassContext) -> None:
        apply_patterns_greedily(module, Folder(self, module, ctx).patterns())


PASS = FoldBatchNorm
