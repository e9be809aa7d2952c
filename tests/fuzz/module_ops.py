"""Op makers for modules.py: `MAKERS[name](b)` tries to append one `name` op (and the helper ops it
needs) with operands and attributes its registry entry accepts. A maker whose draw does not fit (no
operand of the right rank, a shape infer refuses) adds nothing; the strategy just goes on. This file has
the elementwise, linear-algebra, convolution and normalization makers, module_shape_ops.py the
reductions, index ops and data movement, module_patterns.py multi-op patterns the passes rewrite.

Every registered op has a maker or an entry in NO_MAKER saying why not (tests/fuzz/test_fuzz_modules.py
checks it, so a new op gets one or the other).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .modules import FLOATS, ModuleBuilder

Maker = Callable[[ModuleBuilder], Any]
MAKERS: dict[str, Maker] = {}
INTS = ("i32", "i64")
_MADE_BY_PASSES = "made by passes and the lowering, not found in a graph-level module"
_RECURRENT = "a recurrence or detection op no pass rewrites, with many coupled operand shapes"
_QOPS = ("fold-qdq makes it from the dequantize -> conv2d / matmul / add -> quantize chains the `quantize` "
         "maker writes")
_SIZES = ("sizes of symbolic dims: the modules are static; the graph fuzzer's +dyn runs import them "
          "(property.dynamic_copy)")
_CONTROL = ("control flow with regions: tests/models/test_dynamic.py and the lit files; the module builder "
            "makes one block")
NO_MAKER: dict[str, str] = {
    "const": "every maker makes constants", "return": "structure", "yield": "structure (regions)",
    "kernel": _MADE_BY_PASSES + " (fuse's regions)", "cl.program": _MADE_BY_PASSES,
    "cl.launch": _MADE_BY_PASSES,
    "buf.alloc": _MADE_BY_PASSES, "buf.view": _MADE_BY_PASSES, "winograd_filter": _MADE_BY_PASSES,
    "winograd_unfilter": _MADE_BY_PASSES, "unpack": "made with its `pack` (the pack maker writes both)",
    "lstm_scan": _RECURRENT, "qlstm_scan": _RECURRENT, "gru_scan": _RECURRENT, "rnn_scan": _RECURRENT,
    "linear_attention": _RECURRENT,
    "roi_align": _RECURRENT, "col2im": _RECURRENT, "max_unpool": _RECURRENT, "grid_sample": _RECURRENT,
    "conv2d_integer": _QOPS, "qconv2d": _QOPS, "matmul_integer": _QOPS, "qmatmul": _QOPS, "qadd": _QOPS,
    "qsoftmax": _QOPS, "qmul": _QOPS,
    "lookup": "fold-lookup makes it from the elementwise chains of one 8-bit value (its lit file; the "
              "`quantize` maker's dequantize -> op -> quantize chains)",
    "bitcast": "it reinterprets bits: validation would compare NaN payloads",
    "shape": _SIZES, "dims": _SIZES, "range": _SIZES,
    "if": _CONTROL, "loop": _CONTROL, "scan": _CONTROL,
    "assert": "it fails the run on a false flag: random flags would fail most modules; the importer's "
              "size-decided Ifs make it (tests/models/test_dynamic.py)",
}
"""Registered ops without a maker, and why."""


def maker(*names: str) -> Callable[[Maker], Maker]:
    def register(fn: Maker) -> Maker:
        for n in names:
            MAKERS[n] = lambda b, fn=fn, n=n: fn(b, n)
        return fn

    return register


# elementwise -------------------------------------------------------------------------------------------
EXACT_UNARY = {"identity", "neg", "abs", "relu"}
DOMAIN = {"sqrt": "positive", "reciprocal": "positive", "log": "positive", "acosh": "positive",
          "exp": "tame", "sinh": "tame", "cosh": "tame", "tan": "unit", "asin": "unit", "acos": "unit",
          "atanh": "unit", "softplus": "tame"}
STEP = {"floor", "ceil", "round", "sign"}  # jump at integers or zero: exact operands only


@maker("identity", "neg", "abs", "relu", "sqrt", "reciprocal", "exp", "log", "tanh", "sin", "cos", "erf",
       "sigmoid", "softplus", "softsign", "hard_swish", "mish", "tan", "asin", "acos", "atan", "sinh", "cosh",
       "asinh", "acosh", "atanh", "floor", "ceil", "round", "sign")
def unary(b: ModuleBuilder, name: str) -> Any:
    x = b.pick(exact=name in STEP)
    if x is None:
        return None
    how = DOMAIN.get(name)
    if how == "positive":
        x = b.positive(x)
    elif how == "tame":
        x = b.tame(x)
    elif how == "unit":
        t = b.one("tanh", [x], scale=1.0)
        x = b.one("mul", [t, b.scalar(0.9, t)], scale=0.9)
    scale = {"exp": 60.0, "sinh": 30.0, "cosh": 30.0, "tan": 2.0}.get(name)
    return b.one(name, [x], exact=name in EXACT_UNARY | STEP and id(x) in b.exact, scale=scale)


@maker("leaky_relu", "elu", "selu", "hard_sigmoid", "gelu", "clip")
def unary_attrs(b: ModuleBuilder, name: str) -> Any:
    x = b.pick()
    if x is None:
        return None
    attrs = {"leaky_relu": {"alpha": b.choice([None, 0.1, 0.2])}, "elu": {"alpha": b.choice([None, 0.5])},
             "selu": {}, "hard_sigmoid": {"alpha": b.choice([None, 0.3]), "beta": b.choice([None, 0.4])},
             "gelu": {"approximate": b.choice([None, "none", "tanh"])},
             "clip": {"min": b.choice([None, -0.5, 0.0]), "max": b.choice([None, 0.5, 6.0])}}[name]
    return b.one(name, [x], attrs, exact=name == "clip" and id(x) in b.exact)


@maker("is_nan")
def is_nan(b: ModuleBuilder, name: str) -> Any:
    x = b.pick()
    return b.one(name, [x]) if x is not None else None


@maker("add", "sub", "mul", "div", "pow", "max", "min", "prelu", "mod")
def binary(b: ModuleBuilder, name: str) -> Any:
    x = b.pick()
    if x is None:
        return None
    if name in ("mul", "pow"):
        x = b.tame(x, 30.0)
    y = partner(b, x)
    if name in ("div", "mod"):
        y = b.positive(y)
    if name == "pow":  # a positive base, a small exponent
        x = b.positive(b.tame(x, 2.0))
        y = b.const(np.array(b.choice([2.0, 0.5, 3.0, -1.0]), np.dtype(x.type.np_dtype)))
    order = [x, y] if b.chance(70) or name in ("pow", "div", "mod") else [y, x]
    exact = name in ("max", "min") and all(id(v) in b.exact for v in order)
    bx, by = (b.scale.get(id(v), 1.0) for v in (x, y))
    scale = {"add": bx + by, "sub": bx + by, "mul": bx * by, "pow": (bx + 1) ** 3, "div": bx}.get(name)
    return b.one(name, order, exact=exact, scale=scale)


def fits(b: ModuleBuilder, x: Any, exact: bool = False) -> list[Any]:
    """The values of x's type that broadcast with it (`exact`: only exact ones)."""
    return [v for v in b.values if v.type.dtype == x.type.dtype and (not exact or id(v) in b.exact)
            and b.broadcast(v.type.dims, x.type.dims) is not None]


def partner(b: ModuleBuilder, x: Any) -> Any:
    """A second operand of x's type that broadcasts with it: an existing value or a constant."""
    near = fits(b, x)
    if near and b.chance(40):
        return b.choice(near)
    return b.weight(b.partner_shape(x.type.dims), dtype=x.type.dtype)


@maker("equal", "less", "less_equal", "greater", "greater_equal")
def compare(b: ModuleBuilder, name: str) -> Any:
    x = b.pick(exact=True, dtypes=(*FLOATS, *INTS))
    if x is None:
        return None
    if x.type.is_float and b.chance(60):  # rounded values: ties (equal) are common
        x = b.one("round", [x], exact=True)
    near = fits(b, x, exact=True)
    if near and b.chance(50):
        y = b.choice(near)
    else:
        y = b.const((b.rng.integers(-2, 3, b.partner_shape(x.type.dims))).astype(x.type.np_dtype))
    return b.one(name, [x, y] if b.chance(50) else [y, x])


def boolean(b: ModuleBuilder) -> Any:
    """An i1 operand: an existing one or a fresh comparison."""
    v = b.pick(dtypes=("i1",))
    if v is not None and b.chance(60):
        return v
    return compare(b, b.choice(["less", "greater_equal", "equal"]))


@maker("and", "or", "xor", "not")
def logic(b: ModuleBuilder, name: str) -> Any:
    x = boolean(b)
    if x is None:
        return None
    if name == "not":
        return b.one(name, [x])
    y = boolean(b)
    return b.one(name, [x, y]) if y is not None else None


@maker("where")
def where(b: ModuleBuilder, name: str) -> Any:
    c = boolean(b)
    x = b.pick(dtypes=(*FLOATS, *INTS))
    if c is None or x is None:
        return None
    y = partner(b, x)
    return b.one(name, [c, x, y], exact=id(x) in b.exact and id(y) in b.exact)


@maker("cast")
def cast(b: ModuleBuilder, name: str) -> Any:
    to = b.choice(["f32", "f16", "f64", "i32", "i64", "i1", "i8"])
    x = b.pick(exact=to not in ("f32", "f16", "f64"), dtypes=(*FLOATS, *INTS, "i1"))
    if x is None:
        return None
    if to in ("i8", "i32") and x.type.is_float:  # in range of the target type
        x = b.one("clip", [x], {"min": -100.0, "max": 100.0}, exact=True)
    return b.one(name, [x], {"to": to}, exact=id(x) in b.exact)


@maker("bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "bit_shift")
def bitwise(b: ModuleBuilder, name: str) -> Any:
    x = b.pick(dtypes=INTS)
    if x is None:
        f = b.pick(exact=True)
        if f is None:
            return None
        x = b.one("cast", [b.one("round", [f], exact=True)], {"to": b.choice(INTS)})
    if name == "bitwise_not":
        return b.one(name, [x])
    if name == "bit_shift":
        amount = b.const(b.rng.integers(0, 4, b.partner_shape(x.type.dims)).astype(x.type.np_dtype))
        return b.one(name, [x, amount], {"direction": b.choice(["left", "right"])}, scale=b.scale[id(x)] * 8)
    y = b.const(b.rng.integers(-8, 8, b.partner_shape(x.type.dims)).astype(x.type.np_dtype))
    return b.one(name, [x, y] if b.chance(50) else [y, x])


# linear algebra, convolution, pooling ----------------------------------------------------------------------
@maker("matmul")
def matmul(b: ModuleBuilder, name: str) -> Any:
    x = b.pick(lambda v: v.type.rank >= 1)
    if x is None:
        return None
    x = b.tame(x, 10.0)
    k = x.type.dims[-1]
    n = b.choice([1, 3, 4, 16, 17])
    shape = b.choice([(k, n), (k,), (2, k, n)] if x.type.rank >= 3 else [(k, n), (k,)])
    if len(shape) == 3 and x.type.dims[-3] not in (1, 2):
        shape = (k, n)
    w = b.weight(shape, 1 / math.sqrt(k), dtype=x.type.dtype)
    return b.one(name, [w, x] if b.chance(10) else [x, w], scale=b.scale[id(x)] * math.sqrt(k))


@maker("gemm")
def gemm(b: ModuleBuilder, name: str) -> Any:
    x = b.pick(lambda v: v.type.rank == 2)
    if x is None:
        return None
    ta, tb = b.chance(30), b.chance(40)
    m, k = x.type.dims[::-1] if ta else x.type.dims
    n = b.choice([1, 4, 8, 16])
    ops = [x, b.weight((n, k) if tb else (k, n), 1 / math.sqrt(k), dtype=x.type.dtype)]
    if b.chance(70):
        ops.append(b.weight(b.choice([(n,), (m, n), (1, n), ()]), dtype=x.type.dtype))
    attrs = {"alpha": b.choice([None, 0.5]), "beta": b.choice([None, 2.0]), "trans_a": ta or None,
             "trans_b": tb or None}
    return b.one(name, ops, attrs, scale=b.scale[id(x)] * math.sqrt(k) + 2)


def image(b: ModuleBuilder) -> Any:
    """A rank-4 float value (NCHW), or a fresh input-sized constant when there is none."""
    x = b.pick(lambda v: v.type.rank == 4 and v.type.dims[2] * v.type.dims[3] >= 4)
    if x is None and b.chance(50):
        x = b.weight((1, b.choice([1, 3, 16]), b.choice([4, 5, 8]), b.choice([4, 6, 8])))
    return x


@maker("conv2d", "conv_transpose2d")
def conv(b: ModuleBuilder, name: str) -> Any:
    x = image(b)
    if x is None:
        return None
    x = b.tame(x, 10.0)
    c = x.type.dims[1]
    groups = b.choice([g for g in (1, 2, c) if c % g == 0]) if b.chance(30) else 1
    o = groups * b.choice([1, 2, 4, 16 // groups if 16 % groups == 0 else 1])
    kh, kw = b.choice([(1, 1), (3, 3), (2, 3), (5, 5)])
    s = b.choice([[1, 1], [2, 2], [1, 2]])
    p = [b.integer(0, kh // 2), b.integer(0, kw // 2), b.integer(0, kh // 2), b.integer(0, kw // 2)]
    d = [2, 2] if b.chance(15) else [1, 1]
    if name == "conv2d":
        w = b.weight((o, c // groups, kh, kw), 1 / math.sqrt(c // groups * kh * kw), dtype=x.type.dtype)
        attrs: dict = {"strides": s, "pads": p, "dilations": d, "groups": groups}
    else:
        w = b.weight((c, o // groups, kh, kw), 1 / math.sqrt(c * kh * kw / s[0]), dtype=x.type.dtype)
        attrs = {"strides": s, "pads": p, "dilations": d, "groups": groups,
                 "output_padding": [b.integer(0, s[0] - 1), b.integer(0, s[1] - 1)]}
    ops = [x, w] + ([b.weight((o,), 0.5, dtype=x.type.dtype)] if b.chance(60) else [])
    return b.one(name, ops, attrs, scale=b.scale[id(x)] * 3 + 1)


@maker("max_pool2d", "avg_pool2d")
def pool(b: ModuleBuilder, name: str) -> Any:
    x = image(b)
    if x is None:
        return None
    k = b.choice([[2, 2], [3, 3], [1, 2], [3, 1]])
    attrs: dict = {"kernel": k, "strides": b.choice([None, [2, 2], [1, 2]]),
                   "ceil_mode": b.chance(20) or None,
                   "pads": [b.integer(0, k[0] // 2), b.integer(0, k[1] // 2), b.integer(0, k[0] // 2),
                            b.integer(0, k[1] // 2)] if b.chance(40) else None}
    if name == "avg_pool2d":
        attrs["count_include_pad"] = b.chance(40) or None
    elif b.chance(15):
        attrs["dilations"] = [2, 2]
    return b.one(name, [x], attrs, exact=name == "max_pool2d" and id(x) in b.exact)


@maker("global_avg_pool", "global_max_pool")
def global_pool(b: ModuleBuilder, name: str) -> Any:
    x = b.pick(lambda v: v.type.rank >= 3)
    return b.one(name, [x], exact=name == "global_max_pool" and id(x) in b.exact) if x is not None else None


@maker("batch_norm", "instance_norm")
def norm(b: ModuleBuilder, name: str) -> Any:
    x = b.pick(lambda v: v.type.rank >= (2 if name == "batch_norm" else 3))
    if x is None:
        return None
    c, dt = x.type.dims[1], x.type.dtype
    ops = [x, b.weight((c,), 1.5, dtype=dt), b.weight((c,), dtype=dt)]
    if name == "batch_norm":
        ops += [b.weight((c,), dtype=dt), b.const((b.rng.uniform(0.5, 2.0, (c,))).astype(x.type.np_dtype))]
    return b.one(name, ops, {"epsilon": b.choice([None, 1e-3])}, scale=b.scale[id(x)] * 3 + 2)


@maker("layer_norm")
def layer_norm(b: ModuleBuilder, name: str) -> Any:
    x = b.pick(lambda v: v.type.rank >= 1)
    if x is None:
        return None
    axis = b.integer(-x.type.rank, x.type.rank - 1)
    normed = x.type.dims[axis:]
    ops = [x, b.weight(normed[b.integer(0, len(normed) - 1):] if normed else (), 1.5, dtype=x.type.dtype)]
    if b.chance(60):
        ops.append(b.weight(normed, dtype=x.type.dtype))
    return b.one(name, ops, {"axis": axis}, scale=8.0)


@maker("softmax", "log_softmax")
def softmax(b: ModuleBuilder, name: str) -> Any:
    x = b.pick(lambda v: v.type.rank >= 1)
    if x is None:
        return None
    return b.one(name, [x], {"axis": b.integer(-x.type.rank, x.type.rank - 1)},
                 scale=1.0 if name == "softmax" else b.scale[id(x)] * 2 + 8)


@maker("lrn")
def lrn(b: ModuleBuilder, name: str) -> Any:
    x = b.pick(lambda v: v.type.rank >= 3)
    if x is None:
        return None
    return b.one(name, [x], {"size": b.choice([1, 3, 5]), "alpha": b.choice([None, 1e-2])})


@maker("resize")
def resize(b: ModuleBuilder, name: str) -> Any:
    x = b.pick(lambda v: v.type.rank >= 1)
    if x is None:
        return None
    mode = b.choice(["nearest", "linear"])
    sizes = [d if b.chance(50) else b.choice([1, 2 * d, d + 1, max(d // 2, 1)]) for d in x.type.dims]
    attrs = {"sizes": sizes, "mode": mode,
             "coordinate_transformation_mode": b.choice(["half_pixel", "asymmetric", "align_corners",
                                                         "pytorch_half_pixel", "tf_half_pixel_for_nn"]),
             "nearest_mode": b.choice(["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])}
    if b.chance(30):
        attrs["scales"] = [s / d for s, d in zip(sizes, x.type.dims, strict=True)]
    return b.one(name, [x], attrs, exact=mode == "nearest" and id(x) in b.exact)


def all_makers() -> dict[str, Maker]:
    """MAKERS with every maker module imported (module_shape_ops.py, module_patterns.py register theirs)."""
    from . import module_patterns, module_shape_ops  # noqa: F401

    return MAKERS
