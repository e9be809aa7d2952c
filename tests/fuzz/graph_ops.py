"""Op generators for graphs.py: each adds one ONNX op (and the helper nodes it needs) to a GraphBuilder
and returns its result, or None when no value of the graph fits the op (the caller then adds a unary op).

Each generator states the shapes it produces; onnx's strict shape inference re-checks them in
`GraphBuilder.finish`. Attribute combinations tessel documents as unsupported are not generated.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import helper

from .graphs import F32, MAX_ELEMENTS, GraphBuilder, Val, infer_shape

Gen = Callable[[GraphBuilder], "Val | None"]

# elementwise ------------------------------------------------------------------------------------------
UNARY = ["Relu", "Abs", "Neg", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Reciprocal", "LeakyRelu", "Elu",
         "Softplus", "HardSigmoid", "Erf", "Sin", "Cos", "Identity", "Softsign", "Selu", "HardSwish"]
BOUNDED = {"Sigmoid": 1.0, "Tanh": 1.0, "Erf": 1.0, "Sin": 1.0, "Cos": 1.0, "HardSigmoid": 1.0,
           "Softsign": 1.0, "Reciprocal": 1.0}


def unary(b: GraphBuilder, op: str | None = None) -> Val | None:
    x = b.pick()
    if x is None:
        return None
    op = op or b.choice(UNARY)
    if op == "HardSwish" and b.opset < 14:
        op = "HardSigmoid"
    attrs: dict = {}
    if op in ("Exp", "Softplus"):
        x = b.tame(x, 4.0)
    elif op in ("Sin", "Cos"):
        x = b.tame(x, 50.0)
    elif op in ("Log", "Sqrt", "Reciprocal"):
        x = b.positive(x)
    if op == "LeakyRelu" and b.chance(50):
        attrs["alpha"] = b.choice([0.1, 0.2, 0.5])
    if op == "Elu" and b.chance(50):
        attrs["alpha"] = b.choice([0.5, 2.0])
    if op == "HardSigmoid" and b.chance(50):
        attrs["alpha"], attrs["beta"] = b.choice([(0.1, 0.4), (0.5, 0.5)])
    scale = {"Exp": math.exp(min(x.scale, 80.0)), "Log": math.log(x.scale + 1),
             "Sqrt": math.sqrt(x.scale + 1), "Softplus": x.scale + 1, "Selu": 1.76 * x.scale,
             "Elu": 2 * x.scale}.get(op, x.scale)
    return b.node(op, [x.name], x.shape, BOUNDED.get(op, scale), **attrs)


def fallback(b: GraphBuilder) -> Val | None:
    return unary(b, b.choice(["Relu", "Tanh", "Neg", "Sigmoid"]))


BINARY = ["Add", "Sub", "Mul", "Div", "Max", "Min", "Pow", "Sum", "Mean"]


def operand_like(b: GraphBuilder, shape: tuple[int, ...]) -> Val:
    """A second operand that broadcasts with `shape`: an existing value, a new input or a weight."""
    fits = [v for v in b.values if b.broadcast(v.shape, shape) is not None]
    if fits and b.chance(40):
        v = b.pick(lambda v: v in fits)
        assert v is not None
        return v
    partner = b.partner_shape(shape)
    if b.can_add_input() and b.chance(30):
        return b.add_input(partner)
    return b.weight(partner, b.choice([1.0, 0.5, 2.0]))


def binary(b: GraphBuilder) -> Val | None:
    x = b.pick()
    if x is None:
        return None
    op = b.choice(BINARY)
    if op == "Pow":
        x = b.tame(x, 10.0)
        e = b.constant(np.array(b.choice([2.0, 3.0, 1.0]), np.float32).reshape(b.choice([(), (1,)])))
        shape = np.broadcast_shapes(x.shape, e.shape)
        return b.node("Pow", [x.name, e.name], shape, x.scale ** 3)
    if op == "Mul":
        x = b.tame(x, 100.0)
    y = operand_like(b, x.shape)
    if op == "Mul":
        y = b.tame(y, 100.0)
    shape = np.broadcast_shapes(x.shape, y.shape)
    if op == "Div":
        den = b.positive(y)
        return b.node("Div", [x.name, den.name], shape, x.scale)
    names = [x.name, y.name] if b.chance(60) else [y.name, x.name]
    if op in ("Sum", "Mean") and b.chance(40):
        z = operand_like(b, tuple(shape))
        names.append(z.name)
        shape = np.broadcast_shapes(shape, z.shape)
        return b.node(op, names, shape, x.scale + y.scale + z.scale)
    scale = {"Mul": x.scale * y.scale, "Max": max(x.scale, y.scale), "Min": max(x.scale, y.scale),
             "Mean": max(x.scale, y.scale)}.get(op, x.scale + y.scale)
    return b.node(op, names, shape, scale)


def clip(b: GraphBuilder) -> Val | None:
    x = b.pick()
    if x is None:
        return None
    lo, hi = sorted(float(v) for v in b.rng.uniform(-1.5, 1.5, size=2))
    if b.opset < 11:
        return b.node("Clip", [x.name], x.shape, max(abs(lo), abs(hi)), min=lo, max=hi)
    which = b.choice(["both", "min", "max", "none"])
    names = [x.name, "", ""]
    if which in ("both", "min"):
        names[1] = b.constant(np.array(lo, np.float32)).name
    if which in ("both", "max"):
        names[2] = b.constant(np.array(hi, np.float32)).name
    while names[-1] == "":
        names.pop()
    scale = x.scale if which == "none" else max(abs(lo), abs(hi), x.scale if which != "both" else 0.0)
    return b.node("Clip", names, x.shape, scale)


def cast(b: GraphBuilder) -> Val | None:
    """f32 -> f64 -> f32 anywhere; f32 -> int -> f32 only on graph inputs, where both sides truncate the
    same bits (on computed values a rounding difference of one ulp could flip the integer)."""
    x = b.pick()
    if x is None:
        return None
    to = 11 if x.kind != "input" or b.chance(50) else b.choice([6, 7])  # DOUBLE, INT32, INT64
    mid = b.fresh("t")
    b.nodes.append(_node("Cast", [x.name], [mid], to=to))
    return b.node("Cast", [mid], x.shape, x.scale, to=1)


def _node(op: str, inputs: list[str], outputs: list[str], **attrs: Any) -> onnx.NodeProto:
    return helper.make_node(op, inputs, outputs, name=f"{op}_{outputs[0]}", **attrs)


# linear algebra ---------------------------------------------------------------------------------------
def matmul(b: GraphBuilder) -> Val | None:
    x = b.pick(lambda v: v.rank >= 1)
    if x is None:
        return None
    x = b.tame(x, 100.0)
    n = b.size()
    if x.rank >= 2 and b.chance(25):  # weight on the left: W[P, K] @ x[..., K, N]
        k = x.shape[-2]
        p = b.size()
        out = (*x.shape[:-2], p, x.shape[-1])
        if math.prod(out) > MAX_ELEMENTS:
            return None
        w = b.weight((p, k), 1 / math.sqrt(k))
        return b.node("MatMul", [w.name, x.name], out, x.scale * math.sqrt(k))
    k = x.shape[-1]
    kind = b.choice(["2d", "vector", "batched"])
    if kind == "vector":
        wshape: tuple[int, ...] = (k,)
        out = x.shape[:-1]
    elif kind == "batched" and x.rank >= 3:
        batch = tuple(1 if b.chance(40) else d for d in x.shape[-3:-2])
        wshape = (*batch, k, n)
        out = (*x.shape[:-1], n)
    else:
        wshape = (k, n)
        out = (*x.shape[:-1], n) if x.rank >= 2 else (n,)
    if x.rank == 1 and len(wshape) == 1:
        out = ()
    if math.prod(out) > MAX_ELEMENTS:
        return None
    other = [v for v in b.values if v.shape == wshape and v is not x]
    w = other[0] if other and b.chance(50) else b.weight(wshape, 1 / math.sqrt(k))
    return b.node("MatMul", [x.name, w.name], out, x.scale * w.scale * k)


def gemm(b: GraphBuilder) -> Val | None:
    x = b.pick(lambda v: v.rank == 2)
    if x is None:
        return None
    x = b.tame(x, 100.0)
    trans_a, trans_b = int(b.chance(30)), int(b.chance(40))
    m, k = (x.shape[1], x.shape[0]) if trans_a else x.shape
    n = b.size()
    w = b.weight((n, k) if trans_b else (k, n), 1 / math.sqrt(k))
    names = [x.name, w.name]
    alpha = b.choice([None, 1.0, 0.5, 2.0])
    beta = b.choice([None, 1.0, 0.5])
    scale = x.scale * math.sqrt(k) * (alpha or 1.0)
    if b.chance(70):
        c = b.weight(b.choice([(n,), (1, n), (m, n), (m, 1), (), (1,)]))
        names.append(c.name)
        scale += c.scale * (1.0 if beta is None else beta)
    return b.node("Gemm", names, (m, n), scale, alpha=alpha, beta=beta,
                  transA=trans_a or None, transB=trans_b or None)


# convolution and pooling ------------------------------------------------------------------------------
def _window(b: GraphBuilder, spatial: tuple[int, ...], max_kernel: int, pool: bool) -> dict:
    """kernel_shape, strides, dilations and pads (or auto_pad) that give every output dim >= 1."""
    kernel, strides, dil, begins, ends = [], [], [], [], []
    for d in spatial:
        k = b.integer(1, min(max_kernel, d + 2))
        di = 2 if not pool and b.chance(20) else 1
        s = b.integer(1, 2 if not pool else 3)
        pb = b.integer(0, k - 1)
        pe = b.integer(0, k - 1)
        while di * (k - 1) + 1 > d + pb + pe:
            if di > 1:
                di = 1
            else:
                k -= 1
                pb, pe = min(pb, k - 1), min(pe, k - 1)
        kernel.append(k)
        strides.append(s)
        dil.append(di)
        begins.append(pb)
        ends.append(pe)
    attrs: dict = {"kernel_shape": kernel}
    if any(s != 1 for s in strides) or b.chance(30):
        attrs["strides"] = strides
    if any(x != 1 for x in dil):
        attrs["dilations"] = dil
    auto = b.choice(["NOTSET", "NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"])
    if auto == "VALID" and all(di * (k - 1) + 1 <= d for di, k, d in zip(dil, kernel, spatial, strict=True)):
        attrs["auto_pad"] = "VALID"
    elif auto.startswith("SAME") and all(x == 1 for x in dil) and all(
            s <= k for s, k in zip(strides, kernel, strict=True)):  # onnxruntime's limits
        attrs["auto_pad"] = auto
    elif any(begins + ends) or b.chance(30):
        attrs["pads"] = begins + ends
    return attrs


def conv(b: GraphBuilder) -> Val | None:
    x = b.pick(lambda v: v.rank in (3, 4))
    if x is None:
        return None
    x = b.tame(x, 100.0)
    c = x.shape[1]
    groups = b.choice([g for g in range(1, c + 1) if c % g == 0]) if b.chance(30) else 1
    m = groups * b.integer(1, max(1, 8 // groups))
    if 16 % groups == 0 and b.chance(30):  # NCHW16c blocking needs multiples of 16 channels
        m = b.choice([16, 32])
    attrs = _window(b, x.shape[2:], 3, pool=False)
    kernel = attrs["kernel_shape"]
    if b.chance(50):
        del attrs["kernel_shape"]
    fan_in = c // groups * math.prod(kernel)
    w = b.weight((m, c // groups, *kernel), 1 / math.sqrt(fan_in))
    names = [x.name, w.name]
    if b.chance(60):
        names.append(b.weight((m,), 0.5).name)
    if groups > 1:
        attrs["group"] = groups
    shape = infer_shape("Conv", [(x.name, x.shape, None), ("w", (m, c // groups, *kernel), None)],
                        b.opset, **attrs)
    if math.prod(shape) > MAX_ELEMENTS or min(shape) < 1:
        return None
    return b.node("Conv", names, shape, x.scale * math.sqrt(fan_in) + 0.5, **attrs)


def pool(b: GraphBuilder) -> Val | None:
    x = b.pick(lambda v: v.rank in (3, 4))
    if x is None:
        return None
    op = b.choice(["MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"])
    if op.startswith("Global"):
        return b.node(op, [x.name], (*x.shape[:2], *(1 for _ in x.shape[2:])), x.scale)
    attrs = _window(b, x.shape[2:], 3, pool=True)
    if b.chance(20):
        attrs["ceil_mode"] = 1
    if op == "AveragePool" and b.chance(40):
        attrs["count_include_pad"] = 1
    if op == "MaxPool" and b.chance(15) and "auto_pad" not in attrs:
        kernel = attrs["kernel_shape"]
        dil = [2 if 2 * (k - 1) + 1 <= d else 1 for k, d in zip(kernel, x.shape[2:], strict=True)]
        if any(d != 1 for d in dil):
            attrs["dilations"] = dil
    shape = infer_shape(op, [(x.name, x.shape, None)], b.opset, **attrs)
    if math.prod(shape) > MAX_ELEMENTS or min(shape) < 1:
        return None
    return b.node(op, [x.name], shape, x.scale, **attrs)


def batchnorm(b: GraphBuilder) -> Val | None:
    x = b.pick(lambda v: v.rank >= 2)
    if x is None:
        return None
    c = x.shape[1]
    scale = b.weight((c,), 1.5, low=0.5)
    bias = b.weight((c,))
    mean = b.weight((c,))
    var = b.weight((c,), 2.0, low=0.5)
    eps = b.choice([None, 1e-3])
    return b.node("BatchNormalization", [x.name, scale.name, bias.name, mean.name, var.name], x.shape,
                  (x.scale + 1) * 1.5 / math.sqrt(0.5) + 1, epsilon=eps)


# reductions and softmax -------------------------------------------------------------------------------
REDUCE = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceL2", "ReduceL1", "ReduceSumSquare",
          "ReduceLogSumExp", "ReduceProd", "ReduceLogSum"]


def reduce(b: GraphBuilder) -> Val | None:
    x = b.pick(lambda v: v.rank >= 1)
    if x is None:
        return None
    op = b.choice(REDUCE)
    r = x.rank
    axes = b.subset(range(r))
    keepdims = b.choice([None, 0, 1])
    if op == "ReduceProd" and math.prod(x.shape[a] for a in axes or range(r)) > 8:
        op = "ReduceMax"
    if op in ("ReduceLogSumExp", "ReduceProd"):
        x = b.tame(x, 2.0)
    elif op == "ReduceSumSquare":
        x = b.tame(x, 30.0)
    elif op == "ReduceLogSum":
        x = b.positive(x)
    return reduce_node(b, op, x, axes, keepdims)


def reduce_node(b: GraphBuilder, op: str, x: Val, axes: list[int], keepdims: int | None,
                noop_ok: bool = True) -> Val:
    """`op` over `axes` of `x` (empty: every axis), with axes as an attribute or (opset 13 for ReduceSum,
    18 for the others) an input, negative now and then; keepdims None is the default (1)."""
    r = x.rank
    kept = keepdims is None or keepdims == 1
    given = [a - r if b.chance(30) else a for a in axes]
    input_axes = b.opset >= (13 if op == "ReduceSum" else 18)
    names, attrs = [x.name], dict[str, Any](keepdims=keepdims)
    noop = False
    if given or b.chance(50):  # an absent axes reduces every axis
        if input_axes:
            names.append(b.ints(given))
            if not given and noop_ok and b.chance(50):
                attrs["noop_with_empty_axes"] = 1
                noop = True
        elif given:
            attrs["axes"] = given
    reduced = set(axes) if axes else (set() if noop else set(range(r)))
    shape = tuple(1 if i in reduced else d for i, d in enumerate(x.shape) if kept or i not in reduced)
    n = math.prod(x.shape[a] for a in reduced)
    scale = {"ReduceSum": x.scale * n, "ReduceL1": x.scale * n, "ReduceSumSquare": x.scale**2 * n,
             "ReduceL2": x.scale * math.sqrt(n), "ReduceLogSumExp": x.scale + math.log(n + 1),
             "ReduceProd": min(x.scale, 1e3) ** min(n, 8), "ReduceLogSum": math.log(x.scale * n + 1)
             }.get(op, x.scale)
    exact = x.dtype != F32 or x.exact and op in ("ReduceMax", "ReduceMin")  # integer sums are exact too
    return b.node(op, names, shape, scale, dtype=x.dtype, exact=exact, **attrs)


def softmax(b: GraphBuilder) -> Val | None:
    x = b.pick(lambda v: v.rank >= 1)
    if x is None:
        return None
    op = b.choice(["Softmax", "LogSoftmax"])
    default_ok = b.opset >= 13 or x.rank >= 2  # the default axis is 1 before opset 13
    axis = b.choice([None] * default_ok + list(range(-x.rank, x.rank)))
    return b.node(op, [x.name], x.shape, 1.0 if op == "Softmax" else x.scale * 2 + math.log(x.numel + 1),
                  axis=axis)


# shapes and data movement -----------------------------------------------------------------------------
def reshape(b: GraphBuilder) -> Val | None:
    x = b.pick()
    if x is None:
        return None
    n = x.numel
    dims: list[int] = []
    for _ in range(b.integer(0, 4)):
        left = n // max(math.prod(dims), 1)
        divisors = [d for d in range(1, left + 1) if left % d == 0 and d <= 64]
        dims.append(b.choice(divisors))
    if math.prod(dims) != n:
        dims.append(n // max(math.prod(dims), 1))
    spec = list(dims)
    if spec and b.chance(40):
        spec[b.integer(0, len(spec) - 1)] = -1
    for i, d in enumerate(spec):
        if i < x.rank and d == x.shape[i] and b.chance(30):
            spec[i] = 0
    return b.node("Reshape", [x.name, b.ints(spec)], dims, x.scale)


def transpose(b: GraphBuilder) -> Val | None:
    x = b.pick(lambda v: v.rank >= 2)
    if x is None:
        return None
    if b.chance(20):
        return b.node("Transpose", [x.name], x.shape[::-1], x.scale)
    perm = list(b.draw(st.permutations(range(x.rank))))
    return b.node("Transpose", [x.name], [x.shape[p] for p in perm], x.scale, perm=perm)


def flatten(b: GraphBuilder) -> Val | None:
    x = b.pick(lambda v: v.rank >= 1)
    if x is None:
        return None
    axis = b.choice([None, *range(-x.rank, x.rank + 1)])
    a = 1 if axis is None else (axis + x.rank if axis < 0 else axis)
    return b.node("Flatten", [x.name], (math.prod(x.shape[:a]), math.prod(x.shape[a:])), x.scale, axis=axis)


def concat(b: GraphBuilder) -> Val | None:
    x = b.pick(lambda v: v.rank >= 1)
    if x is None:
        return None
    axis = b.integer(0, x.rank - 1)
    parts = [x]
    for _ in range(b.integer(1, 2)):
        same = [v for v in b.values if v.rank == x.rank
                and all(d == e for i, (d, e) in enumerate(zip(v.shape, x.shape, strict=True)) if i != axis)]
        if same and b.chance(50):
            parts.append(b.choice(same))
        else:
            shape = list(x.shape)
            shape[axis] = b.integer(1, 4)
            parts.append(b.add_input(shape) if b.can_add_input() and b.chance(30) else b.weight(shape))
    out = list(x.shape)
    out[axis] = sum(p.shape[axis] for p in parts)
    if math.prod(out) > MAX_ELEMENTS:
        return None
    given = axis - x.rank if b.chance(30) else axis
    return b.node("Concat", [p.name for p in parts], out, max(p.scale for p in parts), axis=given)


def slice_(b: GraphBuilder) -> Val | None:
    x = b.pick(lambda v: v.rank >= 1 and v.numel > 1)
    if x is None:
        return None
    axes = b.subset(range(x.rank), min_size=1)
    starts, ends, steps = [], [], []
    view = np.empty(x.shape, dtype=np.int8)
    index: list[slice] = [slice(None)] * x.rank
    for a in axes:
        d = x.shape[a]
        step = b.choice([1, 1, 2, -1, -2, 3])
        for _ in range(10):
            s = b.integer(-d - 1, d + 1)
            e = b.choice([b.integer(-d - 1, d + 1), 2**31 - 1, -(2**31)])
            if len(range(*slice(s, e, step).indices(d))) > 0:
                break
        else:
            s, e = (0, d) if step > 0 else (d - 1, -(2**31))
        starts.append(s)
        ends.append(e)
        steps.append(step)
        index[a] = slice(s, e, step)
    shape = view[tuple(index)].shape
    names = [x.name, b.ints(starts), b.ints(ends)]
    if axes != list(range(x.rank)) or b.chance(50) or any(st != 1 for st in steps):
        names.append(b.ints([a - x.rank if b.chance(30) else a for a in axes]))
        if any(st != 1 for st in steps) or b.chance(50):
            names.append(b.ints(steps))
    return b.node("Slice", names, shape, x.scale)


def squeeze(b: GraphBuilder) -> Val | None:
    x = b.pick(lambda v: 1 in v.shape)
    if x is None:
        return None
    ones = [i for i, d in enumerate(x.shape) if d == 1]
    axes = b.subset(ones, min_size=0 if b.chance(30) else 1)
    drop = set(axes) if axes else set(ones)
    shape = [d for i, d in enumerate(x.shape) if i not in drop]
    given = [a - x.rank if b.chance(30) else a for a in axes]
    if not given:
        return b.node("Squeeze", [x.name], shape, x.scale)
    if b.opset >= 13:
        return b.node("Squeeze", [x.name, b.ints(given)], shape, x.scale)
    return b.node("Squeeze", [x.name], shape, x.scale, axes=given)


def unsqueeze(b: GraphBuilder) -> Val | None:
    x = b.pick(lambda v: v.rank <= 4)
    if x is None:
        return None
    rank = x.rank + b.integer(1, 2)
    new = b.draw(st.lists(st.integers(0, rank - 1), min_size=rank - x.rank, max_size=rank - x.rank,
                          unique=True))
    dims = iter(x.shape)
    shape = [1 if i in new else next(dims) for i in range(rank)]
    given = [a - rank if b.chance(30) else a for a in new]
    if b.opset >= 13:
        return b.node("Unsqueeze", [x.name, b.ints(given)], shape, x.scale)
    return b.node("Unsqueeze", [x.name], shape, x.scale, axes=given)


def pad(b: GraphBuilder) -> Val | None:
    x = b.pick(lambda v: v.rank >= 1)
    if x is None:
        return None
    modes = ["constant", "reflect", "edge"] + (["wrap"] if b.opset >= 19 else [])
    mode = b.choice(modes)
    axes = list(range(x.rank))
    if b.opset >= 18 and b.chance(40):
        axes = b.subset(range(x.rank), min_size=1)
    begins, ends = [], []
    for a in axes:
        most = x.shape[a] - 1 if mode == "reflect" else (x.shape[a] if mode == "wrap" else 2)
        begins.append(b.integer(0, min(2, most)))
        ends.append(b.integer(0, min(2, most)))
    shape = list(x.shape)
    for a, p, q in zip(axes, begins, ends, strict=True):
        shape[a] += p + q
    if math.prod(shape) > MAX_ELEMENTS:
        return None
    names = [x.name, b.ints(begins + ends)]
    value = 0.0
    if mode == "constant" and b.chance(50):
        value = float(b.rng.uniform(-1, 1))
        names.append(b.constant(np.array(value, np.float32)).name)
    if axes != list(range(x.rank)):
        if len(names) == 2:
            names.append("")
        names.append(b.ints([a - x.rank if b.chance(30) else a for a in axes]))
    return b.node("Pad", names, shape, max(x.scale, abs(value)),
                  mode=None if mode == "constant" and b.chance(50) else mode)


def expand(b: GraphBuilder) -> Val | None:
    x = b.pick()
    if x is None:
        return None
    target = b.partner_shape(x.shape)
    shape = np.broadcast_shapes(x.shape, target)
    if math.prod(shape) > MAX_ELEMENTS:
        return None
    return b.node("Expand", [x.name, b.ints(target)], shape, x.scale)


GENERATORS: list[tuple[str, Gen]] = [
    ("unary", unary), ("binary", binary), ("binary2", binary), ("matmul", matmul), ("gemm", gemm),
    ("conv", conv), ("pool", pool), ("reduce", reduce), ("softmax", softmax), ("reshape", reshape),
    ("transpose", transpose), ("flatten", flatten), ("concat", concat), ("slice", slice_),
    ("squeeze", squeeze), ("unsqueeze", unsqueeze), ("batchnorm", batchnorm), ("pad", pad),
    ("clip", clip), ("cast", cast), ("expand", expand),
]
"""Name -> generator; `graphs(ops=[...])` restricts to some names. binary appears twice: most graphs
should exercise broadcasting."""
