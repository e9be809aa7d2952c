"""Multi-op makers for modules.py: the subgraphs the passes rewrite, so that each pass has work in the
random modules and not just a chance to leave them alone. Registered in module_ops.MAKERS under names
that are not op names (`conv_bn`, `pad_conv`, ...); each says which pass it feeds.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .module_ops import MAKERS, image
from .modules import ModuleBuilder

PATTERN_OPS: dict[str, frozenset[str]] = {}
"""Pattern name -> the ops of which its result always has one (tests/fuzz/test_fuzz_modules.py)."""


def pattern(name: str, *ops: str):  # noqa: ANN201 - a decorator
    def register(fn: Any) -> Any:
        MAKERS[name] = fn
        PATTERN_OPS[name] = frozenset(ops)
        return fn

    return register


def _conv(b: ModuleBuilder, x: Any, o: int, k: int = 3, pads: list[int] | None = None) -> Any:
    c = x.type.dims[1]
    w = b.weight((o, c, k, k), 1 / math.sqrt(c * k * k), dtype=x.type.dtype)
    ops = [x, w] + ([b.weight((o,), 0.5, dtype=x.type.dtype)] if b.chance(50) else [])
    return b.one("conv2d", ops, {"pads": pads if pads is not None else [k // 2] * 4}, scale=3.0)


@pattern("conv_bn", "conv2d")
def conv_bn(b: ModuleBuilder) -> Any:
    """conv2d -> batch_norm or a per-channel mul/add (fold-batchnorm), then an activation (fuse)."""
    x = image(b)
    if x is None:
        return None
    o = b.choice([4, 16, 32])
    y = _conv(b, b.tame(x, 4.0), o, b.choice([1, 3]))
    if y is None:
        return None
    dt = x.type.dtype
    if b.chance(50):
        var = b.const(b.rng.uniform(0.5, 2, (o,)).astype(y.type.np_dtype))
        stats = [b.weight((o,), 1.5, dtype=dt), b.weight((o,), dtype=dt), b.weight((o,), dtype=dt), var]
        y = b.one("batch_norm", [y, *stats], scale=8.0)
    else:
        y = b.one("mul", [y, b.weight((o, 1, 1), 1.5, dtype=dt)])
        y = b.one("add", [y, b.weight((o, 1, 1), dtype=dt)])
    return b.one(b.choice(["relu", "sigmoid", "tanh", "hard_swish"]), [y])


@pattern("pad_conv", "pad")
def pad_conv(b: ModuleBuilder) -> Any:
    """An explicit zero pad (or -inf before a max pool) into conv2d / pools (fold-pad)."""
    x = image(b)
    if x is None:
        return None
    p = [0, 0, 1, 1, 0, 0, b.integer(0, 1), 1]
    kind = b.choice(["conv", "max", "avg"])
    value = -math.inf if kind == "max" and b.chance(70) else 0.0
    y = b.one("pad", [x], {"pads": p, "value": value})
    if y is None:
        return None
    if kind == "conv":
        return _conv(b, y, b.choice([2, 16]), 3, [0, 0, 0, 0])
    op = "max_pool2d" if kind == "max" else "avg_pool2d"
    return b.one(op, [y], {"kernel": [2, 2], "count_include_pad": True if kind == "avg" else None})


@pattern("conv_transpose", "conv_transpose2d")
def conv_transpose(b: ModuleBuilder) -> Any:
    """A strided conv_transpose2d (decompose-conv-transpose)."""
    x = image(b)
    if x is None:
        return None
    c = x.type.dims[1]
    s = b.choice([2, 3])
    k = b.choice([s, s + 1, 2 * s])
    w = b.weight((c, b.choice([2, 4]), k, k), 1 / math.sqrt(c * k), dtype=x.type.dtype)
    return b.one("conv_transpose2d", [b.tame(x, 4.0), w], {"strides": [s, s], "pads": [b.integer(0, 1)] * 4},
                 scale=4.0)


@pattern("sibling_matmuls", "matmul")
def sibling_matmuls(b: ModuleBuilder) -> Any:
    """Two or three matmuls of one input by constant weights (merge-sibling-matmuls)."""
    x = b.pick(lambda v: v.type.rank >= 2)
    if x is None:
        return None
    x = b.tame(x, 4.0)
    k = x.type.dims[-1]
    outs = [b.one("matmul", [x, b.weight((k, b.choice([16, 32, 4])), 1 / math.sqrt(k), dtype=x.type.dtype)],
                  scale=4.0) for _ in range(b.integer(2, 3))]
    outs = [o for o in outs if o is not None]
    if len(outs) >= 2 and outs[0].type == outs[1].type:
        return b.one("add", outs[:2])
    return outs[-1] if outs else None


@pattern("transpose_pair", "transpose")
def transpose_pair(b: ModuleBuilder) -> Any:
    """transpose -> elementwise -> the inverse transpose, or reshape pairs (cancel-transposes)."""
    x = b.pick(lambda v: v.type.rank >= 2)
    if x is None:
        return None
    perm = [int(i) for i in b.rng.permutation(x.type.rank)]
    t = b.one("transpose", [x], {"perm": perm}, exact=id(x) in b.exact)
    if b.chance(60):
        t = b.one(b.choice(["relu", "neg", "sigmoid"]), [t])
    inv = [perm.index(i) for i in range(len(perm))]
    if b.chance(30):  # another transpose: composed, not cancelled
        inv = [int(i) for i in b.rng.permutation(x.type.rank)]
    return b.one("transpose", [t], {"perm": inv})


@pattern("gelu_expanded", "mul")
def gelu_expanded(b: ModuleBuilder) -> Any:
    """x * 0.5 * (1 + erf(x / sqrt(2))), or the tanh form (recognize-gelu)."""
    x = b.pick()
    if x is None:
        return None
    x = b.tame(x, 8.0)
    if b.chance(60):
        inner = b.one("erf", [b.one("div", [x, b.scalar(math.sqrt(2), x)])])
    else:
        cube = b.one("mul", [b.one("mul", [x, x]), x])
        s = b.one("add", [x, b.one("mul", [cube, b.scalar(0.044715, x)])])
        inner = b.one("tanh", [b.one("mul", [s, b.scalar(math.sqrt(2 / math.pi), x)])])
    one = b.one("add", [inner, b.scalar(1.0, x)])
    return b.one("mul", [b.one("mul", [x, b.scalar(0.5, x)]), one], scale=8.0)


@pattern("layernorm_expanded", "reduce_mean")
def layernorm_expanded(b: ModuleBuilder) -> Any:
    """(x - mean) / sqrt(var + eps) * g + b over the last axis (recognize-layernorm)."""
    x = b.pick(lambda v: v.type.rank >= 1 and v.type.dims[-1] >= 2)
    if x is None:
        return None
    m = b.one("reduce_mean", [x], {"axes": [-1]})
    d = b.one("sub", [x, m])
    v = b.one("reduce_mean", [b.one("mul", [d, d]) if b.chance(60) else b.one("pow", [d, b.scalar(2.0, d)])],
              {"axes": [-1]})
    # eps bounds the normalization's gain at 1/sqrt(eps): in f16, where a difference of two near-equal values
    # keeps few digits, 1e-5 let that gain carry the reference's own rounding past the f16 tolerance (a
    # pass computing in f32 was flagged for being more accurate); 1e-2 keeps it within (gain 10)
    eps = 1e-2 if v is not None and v.type.dtype == "f16" else 1e-5
    n = b.one("div", [d, b.one("sqrt", [b.one("add", [v, b.scalar(eps, v)])])], scale=8.0)
    if b.chance(60):
        n = b.one("add", [b.one("mul", [n, b.weight(x.type.dims[-1:], 1.5, dtype=x.type.dtype)]),
                          b.weight(x.type.dims[-1:], dtype=x.type.dtype)], scale=16.0)
    return n


@pattern("softmax_expanded", "exp")
def softmax_expanded(b: ModuleBuilder) -> Any:
    """exp(x - max(x)) / sum(exp(x - max(x))) (recognize-softmax)."""
    x = b.pick(lambda v: v.type.rank >= 1)
    if x is None:
        return None
    axis = b.choice([-1, 0])
    if b.chance(70):
        x = b.one("sub", [x, b.one("reduce_max", [x], {"axes": [axis]})])
    else:
        x = b.tame(x, 4.0)
    e = b.one("exp", [x], scale=60.0)
    return b.one("div", [e, b.one("reduce_sum", [e], {"axes": [axis]})], scale=1.0)


@pattern("attention_expanded", "softmax")
def attention_expanded(b: ModuleBuilder) -> Any:
    """matmul(softmax(matmul(q, k^T) * scale [+ mask]), v) (recognize-attention)."""
    bsz, s, d = b.choice([1, 2]), b.choice([2, 4, 5]), b.choice([4, 8])
    q = b.pick(lambda v: v.type.dims == (bsz, s, d)) or b.weight((bsz, s, d))
    k = b.weight((bsz, s, d))
    v = b.weight((bsz, s, d))
    kt = b.one("transpose", [k], {"perm": [0, 2, 1]})
    sc = b.one("mul", [b.one("matmul", [q, kt]), b.scalar(1 / math.sqrt(d), q)], scale=4.0)
    if b.chance(40):
        sc = b.one("add", [sc, b.const(np.where(np.tril(np.ones((s, s))) > 0, 0, -1e4).astype(np.float32))])
    p = b.one("softmax", [sc], {"axis": -1}, scale=1.0)
    return b.one("matmul", [p, v], scale=2.0)


@pattern("gemm_reshape", "gemm")
def gemm_reshape(b: ModuleBuilder) -> Any:
    """reshape(gemm(a, b, c)) splitting the rows into a batch (unflatten-gemm)."""
    bsz, s, k, n = b.choice([2, 3]), b.choice([2, 4]), b.choice([4, 8]), b.choice([4, 16])
    a = b.pick(lambda v: v.type.dims == (bsz * s, k)) or b.weight((bsz * s, k))
    w, c = b.weight((k, n), 1 / math.sqrt(k), dtype=a.type.dtype), b.weight((n,), dtype=a.type.dtype)
    g = b.one("gemm", [a, w, c], scale=3.0)
    return b.one("reshape", [g], {"shape": [bsz, s, n]}) if g is not None else None


@pattern("expand_elementwise", "add", "mul", "max")
def expand_elementwise(b: ModuleBuilder) -> Any:
    """expand (or a repeating constant) into an elementwise op that broadcasts anyway
    (simplify-broadcasts)."""
    x = b.pick(lambda v: v.type.rank >= 1)
    if x is None:
        return None
    small = b.weight((x.type.dims[-1],), dtype=x.type.dtype)
    if b.chance(50):
        big = b.one("expand", [small], {"shape": list(x.type.dims)})
    else:
        row = b.rng.uniform(-1, 1, (x.type.dims[-1],))
        big = b.const(np.broadcast_to(row, x.type.dims).astype(x.type.np_dtype))
    return b.one(b.choice(["add", "mul", "max"]), [x, big])
