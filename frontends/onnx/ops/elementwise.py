"""Converters for ONNX's elementwise ops: arithmetic, activations, comparisons, logic, Cast.

Most are one table entry mapping the ONNX op to the tessel op; the rest spell out the ONNX attributes
and their opset differences.
"""

from __future__ import annotations

import math

import numpy as np

from ....ir.ops.elementwise import SATURATING
from ..builder import Builder, Tensor
from ..registry import converter
from ..types import onnx_element_type

# ONNX op -> tessel op, for ops whose only ONNX attributes (if any) map by name
UNARY = {
    "Neg": "neg", "Abs": "abs", "Sign": "sign", "Sqrt": "sqrt", "Reciprocal": "reciprocal", "Exp": "exp",
    "Log": "log", "Tanh": "tanh", "Sin": "sin", "Cos": "cos", "Floor": "floor", "Ceil": "ceil",
    "Round": "round", "Erf": "erf", "Sigmoid": "sigmoid", "Relu": "relu", "Softplus": "softplus",
    "Softsign": "softsign", "HardSwish": "hard_swish", "Mish": "mish", "Not": "not", "Identity": "identity",
}
BINARY = {
    "Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Pow": "pow", "PRelu": "prelu",
    "Equal": "equal", "Less": "less", "LessOrEqual": "less_equal", "Greater": "greater",
    "GreaterOrEqual": "greater_equal", "And": "and", "Or": "or", "Xor": "xor",
}


def _unary(onnx_op: str, tessel_op: str) -> None:
    def convert(b: Builder, x: Tensor) -> Tensor:
        return b.op(tessel_op, [x])

    convert.__name__ = onnx_op
    converter(onnx_op)(convert)


def legacy_broadcast(b: Builder, a: Tensor, c: Tensor, broadcast: int, axis: int | None) -> Tensor:
    """Before opset 7, binary ops broadcast `c` only with broadcast=1, aligned at `axis` (default: the
    trailing dims): reshape it so numpy-style broadcasting means the same."""
    if not broadcast or axis is None:
        return c
    axis = axis % a.rank if a.rank else 0
    return b.reshape(c, list(c.shape) + [1] * (a.rank - axis - c.rank))


def _binary(onnx_op: str, tessel_op: str) -> None:
    def convert(b: Builder, a: Tensor, c: Tensor, *, broadcast: int = 0, axis: int | None = None,
                consumed_inputs: list[int] | None = None) -> Tensor:
        if onnx_op == "Pow" and c.dtype != a.dtype:  # ONNX Pow allows another exponent type
            c = b.cast(c, a.dtype)
        if onnx_op == "PRelu" and b.opset < 7 and c.rank == 1 and a.rank > 2 and c.shape[0] == a.shape[1]:
            c = b.reshape(c, [c.shape[0]] + [1] * (a.rank - 2))  # old PRelu: a per-channel slope
        c = legacy_broadcast(b, a, c, broadcast, axis)
        return b.op(tessel_op, [a, c])

    convert.__name__ = onnx_op
    converter(onnx_op)(convert)


for _o, _t in UNARY.items():
    _unary(_o, _t)
for _o, _t in BINARY.items():
    _binary(_o, _t)


@converter("LeakyRelu")
def LeakyRelu(b: Builder, x: Tensor, *, alpha: float = 0.01) -> Tensor:
    return b.op("leaky_relu", [x], {"alpha": float(alpha)})


@converter("Elu")
def Elu(b: Builder, x: Tensor, *, alpha: float = 1.0) -> Tensor:
    return b.op("elu", [x], {"alpha": float(alpha)})


@converter("Selu")
def Selu(b: Builder, x: Tensor, *, alpha: float = 1.67326319217681884765625,
         gamma: float = 1.05070102214813232421875) -> Tensor:
    return b.op("selu", [x], {"alpha": float(alpha), "gamma": float(gamma)})


@converter("HardSigmoid")
def HardSigmoid(b: Builder, x: Tensor, *, alpha: float = 0.2, beta: float = 0.5) -> Tensor:
    return b.op("hard_sigmoid", [x], {"alpha": float(alpha), "beta": float(beta)})


@converter("Gelu", since=20)
def Gelu(b: Builder, x: Tensor, *, approximate: str = "none") -> Tensor:
    return b.op("gelu", [x], {"approximate": approximate})


@converter("Mod")
def Mod(b: Builder, a: Tensor, c: Tensor, *, fmod: int = 0) -> Tensor:
    if fmod:
        return b.op("mod", [a, c])
    # Python-style modulo (the sign of the divisor), from the truncating one: add b where the signs differ
    r = b.op("mod", [a, c])
    zero = b.const(np.zeros((), a.type.np_dtype))
    fix = b.op("and", [b.op("not", [b.op("equal", [r, zero])]),
                       b.op("xor", [b.op("less", [r, zero]), b.op("less", [c, zero])])])
    return b.op("where", [fix, b.op("add", [r, c]), r])


@converter("Clip")
def Clip(b: Builder, x: Tensor, lo: Tensor | None = None, hi: Tensor | None = None, *,
         min: float | None = None, max: float | None = None) -> Tensor:
    if b.opset >= 11:
        runtime = [t for t in (lo, hi) if t is not None and not t.is_const]
        if runtime:  # a bound computed at run time (a spectrogram's max - 80 dB): max and min ops
            if lo is not None:
                x = b.op("max", [x, lo] if not lo.is_const else [x, b.const(lo.const(), x.dtype)])
            if hi is not None:
                x = b.op("min", [x, hi] if not hi.is_const else [x, b.const(hi.const(), x.dtype)])
            return x
        min = float(lo.const("Clip's min")) if lo is not None else None
        max = float(hi.const("Clip's max")) if hi is not None else None
    return b.op("clip", [x], {"min": -math.inf if min is None else float(min),
                              "max": math.inf if max is None else float(max)})


def _cast(b: Builder, x: Tensor, to: str, saturate: int, round_mode: str) -> Tensor:
    """`cast`, with saturate (Cast-19: float8 and f8E8M0FNU targets) and round_mode (Cast-24: f8E8M0FNU)
    only where they apply and differ from the defaults."""
    if x.dtype == to:
        return x
    attrs: dict[str, object] = {"to": to}
    if not saturate and (to in SATURATING or to == "f8E8M0FNU"):
        attrs["saturate"] = False
    if round_mode != "up" and to == "f8E8M0FNU":
        attrs["round_mode"] = round_mode
    return b.op("cast", [x], attrs)


@converter("Cast")
def Cast(b: Builder, x: Tensor, *, to: int, saturate: int = 1, round_mode: str = "up") -> Tensor:
    return _cast(b, x, onnx_element_type(to, "Cast's 'to'"), saturate, round_mode)


@converter("CastLike")
def CastLike(b: Builder, x: Tensor, like: Tensor, *, saturate: int = 1, round_mode: str = "up") -> Tensor:
    return _cast(b, x, like.dtype, saturate, round_mode)


def _variadic(tessel_op: str):
    def convert(b: Builder, *xs: Tensor) -> Tensor:
        acc = xs[0]
        for x in xs[1:]:
            acc = b.op(tessel_op, [acc, x])
        return acc

    return convert


converter("Sum")(_variadic("add"))
converter("Max")(_variadic("max"))
converter("Min")(_variadic("min"))


@converter("Mean")
def Mean(b: Builder, *xs: Tensor) -> Tensor:
    total = _variadic("add")(b, *xs)
    return b.op("div", [total, b.const(np.array(len(xs), total.type.np_dtype))])


@converter("Where")
def Where(b: Builder, cond: Tensor, x: Tensor, y: Tensor) -> Tensor:
    return b.op("where", [cond, x, y])


@converter("Swish", since=24)
def Swish(b: Builder, x: Tensor, *, alpha: float = 1.0) -> Tensor:
    scaled = x if alpha == 1.0 else b.op("mul", [x, b.const(np.array(alpha, x.type.np_dtype))])
    return b.op("mul", [x, b.op("sigmoid", [scaled])])
