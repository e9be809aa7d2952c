"""Op makers for modules.py, continued (module_ops.py has the elementwise, linear-algebra, convolution
and normalization ones): reductions, index ops, data movement and the packed layout."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .module_ops import INTS, maker
from .modules import FLOATS, ModuleBuilder

QDQ_STEP = 0.05
"""The quantization step of the `quantize` maker's outputs (module_check.QDQ_TOLERANCE allows one)."""


# reductions -------------------------------------------------------------------------------------------------
@maker("reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod", "reduce_l1", "reduce_l2",
       "reduce_sum_square", "reduce_log_sum_exp")
def reduce(b: ModuleBuilder, name: str) -> Any:
    x = b.pick(lambda v: v.type.rank >= 1, dtypes=(*FLOATS, *INTS) if name in ("reduce_sum", "reduce_max")
               else FLOATS)
    if x is None:
        return None
    axes = [a for a in range(x.type.rank) if b.chance(50)]
    n = math.prod(x.type.dims[a] for a in axes or range(x.type.rank))
    if name == "reduce_prod" and n > 16:
        return None
    if name in ("reduce_prod", "reduce_log_sum_exp"):
        x = b.tame(x, 1.0)
    given = [a - x.type.rank if b.chance(30) else a for a in axes]
    return b.one(name, [x], {"axes": given, "keepdims": b.choice([None, True, False])},
                 exact=name in ("reduce_max", "reduce_min") and id(x) in b.exact,
                 scale=b.scale[id(x)] * (n if name in ("reduce_sum", "reduce_l1", "reduce_sum_square")
                                         else 2))


@maker("argmax", "argmin")
def argmax(b: ModuleBuilder, name: str) -> Any:
    x = b.pick(lambda v: v.type.rank >= 1, exact=True, dtypes=(*FLOATS, *INTS))
    if x is None:
        return None
    return b.one(name, [x], {"axis": b.integer(-x.type.rank, x.type.rank - 1),
                             "keepdims": b.choice([None, False]),
                             "select_last_index": b.choice([None, True])})


@maker("cumsum", "cumprod")
def cumulative(b: ModuleBuilder, name: str) -> Any:
    x = b.pick(lambda v: v.type.rank >= 1)
    if x is None:
        return None
    if name == "cumprod":
        x = b.tame(x, 1.0)
    axis = b.integer(-x.type.rank, x.type.rank - 1)
    return b.one(name, [x], {"axis": axis, "exclusive": b.choice([None, True]),
                             "reverse": b.choice([None, True])},
                 scale=b.scale[id(x)] * x.type.dims[axis])


@maker("top_k")
def top_k(b: ModuleBuilder, name: str) -> Any:
    x = b.pick(lambda v: v.type.rank >= 1, exact=True)
    if x is None:
        return None
    axis = b.integer(-x.type.rank, x.type.rank - 1)
    k = b.integer(1, x.type.dims[axis])
    return b.one(name, [x], {"k": k, "axis": axis, "largest": b.choice([None, False]),
                             "sorted": b.choice([None, False])}, exact=True)


# data movement ----------------------------------------------------------------------------------------------
ANY = (*FLOATS, *INTS, "i1")


@maker("reshape")
def reshape(b: ModuleBuilder, name: str) -> Any:
    x = b.pick(dtypes=ANY)
    if x is None:
        return None
    n = x.type.numel
    divs = [d for d in range(1, n + 1) if n % d == 0]
    first = b.choice(divs)
    shape = b.choice([[n], [first, n // first], [-1], [first, -1], [1, n, 1]])
    return b.one(name, [x], {"shape": shape}, exact=id(x) in b.exact)


@maker("transpose")
def transpose(b: ModuleBuilder, name: str) -> Any:
    x = b.pick(lambda v: v.type.rank >= 2, dtypes=ANY)
    if x is None:
        return None
    perm = [int(i) for i in b.rng.permutation(x.type.rank)]
    return b.one(name, [x], {"perm": perm}, exact=id(x) in b.exact)


@maker("concat")
def concat(b: ModuleBuilder, name: str) -> Any:
    x = b.pick(lambda v: v.type.rank >= 1, dtypes=ANY)
    if x is None:
        return None
    axis = b.integer(0, x.type.rank - 1)
    parts = [x]
    for _ in range(b.integer(1, 2)):
        same = [v for v in b.values if v.type.dtype == x.type.dtype and v.type.rank == x.type.rank
                and all(d == e for i, (d, e) in enumerate(zip(v.type.dims, x.type.dims, strict=True))
                        if i != axis)]
        if same and b.chance(50):
            parts.append(b.choice(same))
        else:
            shape = list(x.type.dims)
            shape[axis] = b.integer(1, 3)
            parts.append(b.const(b.rng.uniform(-1, 1, shape).astype(x.type.np_dtype)))
    return b.one(name, parts, {"axis": axis - x.type.rank if b.chance(30) else axis},
                 exact=all(id(p) in b.exact for p in parts))


@maker("split")
def split(b: ModuleBuilder, name: str) -> Any:
    x = b.pick(lambda v: v.type.rank >= 1 and max(v.type.dims) >= 2, dtypes=ANY)
    if x is None:
        return None
    axis = max(range(x.type.rank), key=lambda a: (x.type.dims[a], b.rng.random()))
    d = x.type.dims[axis]
    cut = b.integer(1, d - 1)
    return b.one(name, [x], {"axis": axis, "sizes": [cut, d - cut]}, exact=id(x) in b.exact)


@maker("slice")
def slice_(b: ModuleBuilder, name: str) -> Any:
    x = b.pick(lambda v: v.type.rank >= 1, dtypes=ANY)
    if x is None:
        return None
    axes = [a for a in range(x.type.rank) if b.chance(60)] or [0]
    starts, ends, steps = [], [], []
    for a in axes:
        d = x.type.dims[a]
        step = b.choice([1, 1, 2, -1, -2])
        starts.append(b.integer(-d, d - 1) if step > 0 else b.choice([d - 1, -1, 2**62]))
        ends.append(b.choice([d, 2**62, -1]) if step > 0 else b.choice([-(2**62), -d - 1, 0]))
        steps.append(step)
    return b.one(name, [x], {"starts": starts, "ends": ends, "axes": axes, "steps": steps},
                 exact=id(x) in b.exact)


@maker("gather", "gather_elements")
def gather(b: ModuleBuilder, name: str) -> Any:
    x = b.pick(lambda v: v.type.rank >= 1, dtypes=ANY)
    if x is None:
        return None
    axis = b.integer(-x.type.rank, x.type.rank - 1)
    d = x.type.dims[axis]
    if name == "gather":
        shape = b.choice([(), (3,), (2, 2), (d,)])
    else:
        shape = tuple(b.integer(1, 2 * e) if i == axis % x.type.rank else b.integer(1, e)
                      for i, e in enumerate(x.type.dims))
    idx = b.const(b.rng.integers(-d, d, shape).astype(b.choice([np.int64, np.int32])))
    return b.one(name, [x, idx], {"axis": axis}, exact=id(x) in b.exact)


@maker("scatter_elements")
def scatter(b: ModuleBuilder, name: str) -> Any:
    x = b.pick(lambda v: v.type.rank >= 1)
    if x is None:
        return None
    axis = b.integer(0, x.type.rank - 1)
    d = x.type.dims[axis]
    shape = [b.integer(1, e) for e in x.type.dims]
    shape[axis] = 1
    idx = b.const(b.rng.integers(0, d, shape).astype(np.int64))
    upd = b.weight(shape, dtype=x.type.dtype)
    reduction = b.choice(["none", "add", "mul", "max", "min"])
    return b.one(name, [x, idx, upd], {"axis": axis, "reduction": reduction})


@maker("pad")
def pad(b: ModuleBuilder, name: str) -> Any:
    x = b.pick(lambda v: v.type.rank >= 1, dtypes=ANY)
    if x is None:
        return None
    mode = b.choice(["constant", "reflect", "edge"]) if x.type.dtype != "i1" else "constant"
    r = x.type.rank
    most = [d - 1 if mode == "reflect" else 2 for d in x.type.dims]
    pads = [b.integer(-1 if d > 1 and mode == "constant" else 0, m) for d, m in zip(x.type.dims * 2, most * 2,
                                                                                     strict=True)]
    if any(d + pads[i] + pads[i + r] < 1 for i, d in enumerate(x.type.dims)):
        return None
    return b.one(name, [x], {"pads": pads, "mode": mode, "value": b.choice([None, 0.0, -1.0, 1.0])},
                 exact=id(x) in b.exact)


@maker("expand", "tile")
def expand(b: ModuleBuilder, name: str) -> Any:
    x = b.pick(dtypes=ANY)
    if x is None:
        return None
    if name == "tile":
        attrs = {"repeats": [b.choice([1, 1, 2, 3]) for _ in x.type.dims]}
    else:
        attrs = {"shape": [b.choice([2, 3]) if d == 1 and b.chance(60) else d for d in x.type.dims]}
        if len(attrs["shape"]) < 4 and b.chance(40):
            attrs["shape"] = [2] + attrs["shape"]
    return b.one(name, [x], attrs, exact=id(x) in b.exact)


@maker("depth_to_space", "space_to_depth")
def depth_space(b: ModuleBuilder, name: str) -> Any:
    bs = b.choice([2, 3])
    if name == "depth_to_space":
        x = b.pick(lambda v: v.type.rank == 4 and v.type.dims[1] % (bs * bs) == 0, dtypes=ANY)
    else:
        x = b.pick(lambda v: v.type.rank == 4 and v.type.dims[2] % bs == 0 and v.type.dims[3] % bs == 0,
                   dtypes=ANY)
    if x is None:  # reshape a value whose size fits into an image that does
        v = b.pick(lambda v: v.type.numel % (bs * bs) == 0, dtypes=ANY)
        if v is None:
            return None
        n = v.type.numel
        shape = [1, n, 1, 1] if name == "depth_to_space" else [1, n // (bs * bs), bs, bs]
        x = b.one("reshape", [v], {"shape": shape}, exact=id(v) in b.exact)
    return b.one(name, [x], {"blocksize": bs, "mode": b.choice(["DCR", "CRD"])}, exact=id(x) in b.exact)


@maker("pack")
def pack(b: ModuleBuilder, name: str) -> Any:
    """pack (NCHW -> NCHWc, or a matrix into column panels), an elementwise op, and unpack."""
    x = b.pick(lambda v: v.type.rank in (2, 4))
    if x is None:
        return None
    tile = b.choice([4, 8, 16])
    if x.type.rank == 4:
        attrs = {"inner_dims_pos": [1], "inner_tiles": [tile],
                 "outer_dims_perm": b.choice([None, [0, 1, 2, 3]])}
    else:
        attrs = {"inner_dims_pos": [1], "inner_tiles": [tile], "outer_dims_perm": b.choice([None, [1, 0]])}
    p = b.one(name, [x], attrs, exact=id(x) in b.exact)
    if p is None:
        return None
    q = b.one("relu", [p]) if b.chance(50) else p
    return b.one("unpack", [q], {**attrs, "shape": list(x.type.dims)})


@maker("det")
def det(b: ModuleBuilder, name: str) -> Any:
    n = b.choice([1, 2, 3])
    x = b.pick(lambda v: v.type.rank >= 2 and v.type.dims[-1] == n and v.type.dims[-2] == n)
    if x is None:
        x = b.weight((b.choice([1, 2]), n, n))
    return b.one(name, [x], scale=10.0)


@maker("attention")
def attention(b: ModuleBuilder, name: str) -> Any:
    bsz, heads, sq = b.choice([1, 2]), b.choice([1, 2]), b.choice([1, 3, 4])
    sk, dh = b.choice([2, 4]), b.choice([4, 8])
    q = b.pick(lambda v: v.type.dims == (bsz, heads, sq, dh)) or b.weight((bsz, heads, sq, dh))
    k = b.weight((bsz, heads, sk, dh))
    v = b.pick(lambda v: v.type.dims == (bsz, heads, sk, dh)) or b.weight((bsz, heads, sk, dh))
    ops = [q, k, v] + ([b.weight((sq, sk), 2.0)] if b.chance(40) else [])
    return b.one(name, ops, {"scale": 1 / math.sqrt(dh), "safe": b.choice([None, True])})


@maker("dynamic_quantize")
def dynamic_quantize(b: ModuleBuilder, name: str) -> Any:
    """dynamic_quantize -> dequantize: x through ui8 over its own range, and back."""
    x = b.pick(lambda v: v.type.dtype == "f32" and v.type.numel > 1, exact=True)
    if x is None:
        return None
    x = b.one("clip", [x], {"min": -2.0, "max": 2.0}, exact=True)
    got = b.op(name, [x]) if x is not None else None
    if not got:
        return None
    return b.one("dequantize", list(got), scale=3.0)


@maker("quantize", "dequantize")
def qdq(b: ModuleBuilder, name: str) -> Any:
    """quantize -> dequantize (round trips through i8/u8), now and then around a conv2d or matmul with
    quantized weights: the chains fold-qdq turns into integer ops."""
    x = b.pick(lambda v: v.type.dtype == "f32", exact=True)
    if x is None:
        return None
    x = b.one("clip", [x], {"min": -2.0, "max": 2.0}, exact=True)
    zt = b.choice([np.int8, np.uint8])
    scale = b.const(np.array(b.choice([0.02, 0.05]), np.float32))
    zp = b.const(np.array(0 if zt == np.int8 else 128, zt))
    qx = b.one("quantize", [x, scale, zp])
    if qx is None:
        return None
    dx = b.one("dequantize", [qx, scale, zp], scale=3.0)
    kind = b.choice(["plain", "conv2d", "matmul"])
    if kind == "conv2d" and dx.type.rank == 4:
        shape: tuple[int, ...] = (b.choice([2, 4]), dx.type.dims[1], 1, 1)
    elif kind == "matmul" and dx.type.rank >= 2:
        shape = (dx.type.dims[-1], b.choice([2, 4]))
    else:
        return dx
    wq = b.const(b.rng.integers(-50, 50, shape).astype(np.int8))
    ws, wz = b.const(np.array(0.01, np.float32)), b.const(np.array(0, np.int8))
    y = b.one(kind, [dx, b.one("dequantize", [wq, ws, wz])])
    if y is None:
        return dx
    s2 = b.const(np.array(QDQ_STEP, np.float32))
    qy = b.one("quantize", [y, s2, zp])
    if qy is None:
        return y
    # the float product rounds near a half step where the integer one fold-qdq makes is exact: the two
    # may differ by one step, so the chain's result is an output nothing else reads (module_check.py
    # allows one step there), and the quantized product itself neither (an integer result compares exactly)
    b.values.remove(qy)
    return b.pin(b.one("dequantize", [qy, s2, zp], scale=8.0))
