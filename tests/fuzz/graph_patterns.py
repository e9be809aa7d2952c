"""Multi-node generators for graphs.py: the subgraphs -O2's passes look for, written the way exporters
write them, with random variations the passes must either handle or refuse (multi-use intermediates,
operand orders, shapes that do not fit).

- cnn_block: conv (16/32 channels, for NCHW16c layout propagation) -> [batch-norm | per-channel scale and
  shift] -> activation -> [residual add] -> [pool], with a padding `Pad` in front now and then (fold-pad);
- squeeze_excite: global mean -> 1x1 conv -> activation -> 1x1 conv -> (hard) sigmoid -> channel scale,
  mostly read by a conv (fuse's channel scale folded into the conv's weights, and its refusals);
- inverted_residual: 1x1 expand (16/32 channels) -> activation -> depthwise 3x3 or 5x5 -> activation ->
  1x1 project [-> residual add] (fuse's expansion in the depthwise conv's kernel, and its refusals);
- layernorm: the expanded LayerNorm (recognize-layernorm) or the LayerNormalization op;
- gelu: the erf or tanh expansion (recognize-gelu) or the Gelu op;
- softmax_parts: exp(x - max) / sum (recognize-softmax);
- attention: matmul(q, k^T) * scale [+ mask] -> softmax -> matmul(v), single or multi-head with the
  exporters' reshape/transpose, or as torch's SDPA writes it (the scale's root on q and on k^T, the safe
  softmax's where(isnan(p), 0, p)) (recognize-attention);
- mlp: matmul + bias + activation layers (fold-batchnorm's matmul case, fusion epilogues);
- transposes: a transpose, elementwise ops, and its inverse or another transpose (cancel-transposes);
- broadcasts: an Expand or a constant that repeats a smaller tensor, into elementwise ops
  (simplify-broadcasts).
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

from .graph_ops import Gen, reduce_node
from .graphs import BOOL, MAX_ELEMENTS, GraphBuilder, Val, infer_shape

ACTIVATIONS = ["Relu", "Sigmoid", "Tanh", "Clip6", "LeakyRelu", "Swish", "None"]


def activation(b: GraphBuilder, x: Val) -> Val:
    act = b.choice(ACTIVATIONS)
    if act == "None":
        return x
    if act == "Clip6":
        if b.opset >= 11:
            lo, hi = b.constant(np.array(0.0, np.float32)), b.constant(np.array(6.0, np.float32))
            return b.node("Clip", [x.name, lo.name, hi.name], x.shape, min(x.scale, 6.0))
        return b.node("Clip", [x.name], x.shape, min(x.scale, 6.0), min=0.0, max=6.0)
    if act == "Swish":
        s = b.node("Sigmoid", [x.name], x.shape, 1.0)
        return b.node("Mul", [x.name, s.name] if b.chance(50) else [s.name, x.name], x.shape, x.scale)
    return b.node(act, [x.name], x.shape, 1.0 if act in ("Sigmoid", "Tanh") else x.scale)


def image(b: GraphBuilder) -> Val | None:
    """A 4-D value to start a CNN block from: an existing one or a new input."""
    x = b.pick(lambda v: v.rank == 4 and v.numel <= 2048)
    if x is not None and b.chance(60):
        return x
    if not b.can_add_input():
        return x
    c = b.choice([3, 4, 8, 16, 32])
    h, w = b.integer(3, 8), b.integer(3, 8)
    n = 1 if c * h * w > 1024 else b.integer(1, 2)
    return b.add_input((n, c, h, w))


def cnn_block(b: GraphBuilder) -> Val | None:
    x = image(b)
    if x is None:
        return None
    x = b.tame(x, 100.0)
    if b.chance(30) and b.room():  # an explicit zero pad of the spatial dims, for fold-pad
        p = [0, 0, b.integer(0, 1), b.integer(0, 1), 0, 0, b.integer(0, 1), b.integer(0, 1)]
        padded = (x.shape[0], x.shape[1], x.shape[2] + p[2] + p[6], x.shape[3] + p[3] + p[7])
        names = [x.name, b.ints(p)]
        if b.chance(30):
            names.append(b.constant(np.array(0.0, np.float32)).name)
        x = b.node("Pad", names, padded, x.scale)
    c = x.shape[1]
    m = b.choice([16, 32, 8, c])
    k = b.choice([1, 3, 3])
    groups = c if m == c and b.chance(25) else 1  # depthwise
    pad = k // 2 if b.chance(70) else 0
    stride = b.choice([1, 1, 2])
    attrs = {"kernel_shape": [k, k], "pads": [pad] * 4, "strides": [stride, stride] if stride > 1 else None,
             "group": groups if groups > 1 else None}
    fan = c // groups * k * k
    wshape = (m, c // groups, k, k)
    try:
        shape = infer_shape("Conv", [(x.name, x.shape, None), ("w", wshape, None)], b.opset, **attrs)
    except Exception:
        return None
    if math.prod(shape) > MAX_ELEMENTS or min(shape) < 1:
        return None
    w = b.weight(wshape, 1 / math.sqrt(fan))
    names = [x.name, w.name] + ([b.weight((m,), 0.5).name] if b.chance(60) else [])
    y = b.node("Conv", names, shape, x.scale * math.sqrt(fan) + 0.5, **attrs)
    post = b.choice(["bn", "scale", "none"])
    if post == "bn":
        parts = [b.weight((m,), 1.5, low=0.5), b.weight((m,)), b.weight((m,)), b.weight((m,), 2.0, low=0.5)]
        y = b.node("BatchNormalization", [y.name, *[p.name for p in parts]], shape, y.scale * 2.2 + 1)
    elif post == "scale":
        cshape = b.choice([(1, m, 1, 1), (m, 1, 1)])
        s = b.weight(cshape, 1.5, low=0.5)
        y = b.node("Mul", [y.name, s.name], shape, y.scale * 1.5)
        t = b.weight(cshape)
        y = b.node("Add" if b.chance(70) else "Sub", [y.name, t.name], shape, y.scale + 1)
    y = activation(b, y)
    if y.shape == x.shape and b.chance(40):
        y = b.node("Add", [y.name, x.name] if b.chance(50) else [x.name, y.name], shape, x.scale + y.scale)
    end = b.choice(["none", "none", "maxpool", "avgpool", "global", "padpool"])
    if end == "global":
        y = b.node(b.choice(["GlobalAveragePool", "GlobalMaxPool"]), [y.name], (*shape[:2], 1, 1), y.scale)
    elif end in ("maxpool", "avgpool", "padpool") and min(shape[2:]) >= 2:
        op = "MaxPool" if end != "avgpool" else "AveragePool"
        attrs = {"kernel_shape": [2, 2], "strides": [2, 2] if b.chance(50) else None}
        if end == "padpool":  # an explicit -inf pad into a max pool (fold-pad's max-pool case)
            names = [y.name, b.ints([0, 0, 1, 1, 0, 0, 0, 0]), b.constant(np.array(-np.inf, np.float32)).name]
            y = b.node("Pad", names, (shape[0], shape[1], shape[2] + 1, shape[3] + 1), y.scale)
            b.values.remove(y)  # -inf borders: only the max pool may read this
        elif op == "AveragePool" and b.chance(50):
            attrs["pads"], attrs["count_include_pad"] = [0, 0, 1, 1], b.choice([0, 1])
        out = infer_shape(op, [(y.name, y.shape, None)], b.opset, **attrs)
        y = b.node(op, [y.name], out, y.scale, **attrs)
    return y


def squeeze_excite(b: GraphBuilder) -> Val | None:
    """x * gate(x): a global mean (or max: fuse's gate kernel), a 1x1 conv down, an activation (SiLU now
    and then), a 1x1 conv up, a sigmoid or hard sigmoid, and the channel scale, often read by a conv
    (dense, depthwise or grouped), sometimes by a second reader too (fuse's channel scale and its
    refusals)."""
    x = image(b)
    if x is None or x.rank != 4:
        return None
    x = b.tame(x, 100.0)
    n, c = x.shape[:2]
    r = max(1, c // b.choice([2, 4]))
    if b.chance(15):  # fuse's gate takes a max pool too
        g = b.node("GlobalMaxPool", [x.name], (n, c, 1, 1), x.scale)
    elif b.chance(50):
        g = b.node("GlobalAveragePool", [x.name], (n, c, 1, 1), x.scale)
    else:
        g = reduce_node(b, "ReduceMean", x, [2, 3], 1, noop_ok=False)
    down = b.node("Conv", [g.name, b.weight((r, c, 1, 1), 1 / math.sqrt(c)).name, b.weight((r,), 0.5).name],
                  (n, r, 1, 1), g.scale + 0.5)
    down = activation(b, down)
    up = b.node("Conv", [down.name, b.weight((c, r, 1, 1), 1 / math.sqrt(r)).name], (n, c, 1, 1),
                down.scale + 0.5)
    gate = b.node("Sigmoid" if b.chance(60) else "HardSigmoid", [up.name], (n, c, 1, 1), 1.0)
    y = b.node("Mul", [x.name, gate.name] if b.chance(70) else [gate.name, x.name], x.shape, x.scale)
    if b.chance(70):  # the block's projection reads the scaled value
        k, groups = b.choice([(1, 1), (3, 1), (3, c)] + ([(1, 2)] if c % 2 == 0 else []))
        m = c if groups == c else b.choice([8, 16, c])
        if m % groups:
            m = c
        w = b.weight((m, c // groups, k, k), 1 / math.sqrt(c // groups * k * k))
        out = b.node("Conv", [y.name, w.name], (n, m, *x.shape[2:]), x.scale * math.sqrt(c) + 0.5,
                     pads=[k // 2] * 4, group=groups if groups > 1 else None)
        if b.chance(20):  # a second reader of the scaled value: the scale stays a kernel of its own
            return b.node("Add", [y.name, y.name], x.shape, 2 * x.scale)
        return out
    return y


def inverted_residual(b: GraphBuilder) -> Val | None:
    """MobileNetV2's block: a 1x1 conv expanding to 16 or 32 channels, an activation, a depthwise 3x3
    (sometimes 5x5, stride 2 now and then) and its activation, a 1x1 projection, the residual add when the
    shapes allow (fuse's expansion computed in the depthwise conv's kernel, and its refusals)."""
    x = image(b)
    if x is None or x.rank != 4:
        return None
    x = b.tame(x, 100.0)
    n, c, h, w = x.shape
    e = b.choice([16, 32])
    k, stride = b.choice([3, 3, 5]), b.choice([1, 1, 2])
    ho, wo = (h - 1) // stride + 1, (w - 1) // stride + 1
    if n * e * h * w > MAX_ELEMENTS:
        return None
    names = [x.name, b.weight((e, c, 1, 1), 1 / math.sqrt(c)).name] + ([b.weight((e,), 0.5).name]
                                                                      if b.chance(70) else [])
    y = activation(b, b.node("Conv", names, (n, e, h, w), x.scale * math.sqrt(c) + 0.5))
    if b.chance(15):  # a second reader of the expanded value keeps the expansion apart
        b.node("Relu", [y.name], y.shape, y.scale)
    dw = [y.name, b.weight((e, 1, k, k), 1 / k).name, b.weight((e,), 0.5).name]
    d = b.node("Conv", dw, (n, e, ho, wo), y.scale * k + 0.5, group=e, pads=[k // 2] * 4,
               strides=[stride, stride] if stride > 1 else None)
    d = activation(b, d)
    out = b.node("Conv", [d.name, b.weight((c, e, 1, 1), 1 / math.sqrt(e)).name], (n, c, ho, wo),
                 d.scale * math.sqrt(e) + 0.5)
    if out.shape == x.shape and b.chance(60):
        out = b.node("Add", [out.name, x.name], x.shape, out.scale + x.scale)
    return out


def layernorm(b: GraphBuilder) -> Val | None:
    x = b.pick(lambda v: v.rank >= 2 and v.shape[-1] > 1)
    if x is None:
        return None
    x = b.tame(x, 100.0)
    r = x.rank
    axis = b.choice([r - 1, r - 1, r - 2])
    axes = list(range(axis, r))
    norm_shape = x.shape[axis:]
    op = b.opset >= 17 and b.chance(25)  # the LayerNormalization op wants scale and bias of that shape
    gamma = b.weight(norm_shape if op or b.chance(70) else norm_shape[-1:], 1.5, low=0.5)
    beta = b.weight(norm_shape, 1.0) if b.chance(70) else None
    eps = b.choice([1e-5, 1e-6, 1e-3])
    if op:
        names = [x.name, gamma.name] + ([beta.name] if beta else [])
        return b.node("LayerNormalization", names, x.shape, 8.0, axis=axis - r if b.chance(50) else axis,
                      epsilon=eps)
    mean = reduce_node(b, "ReduceMean", x, axes, 1, noop_ok=False)
    d = b.node("Sub", [x.name, mean.name], x.shape, 2 * x.scale)
    if b.chance(50):
        sq = b.node("Mul", [d.name, d.name], x.shape, d.scale**2)
    else:
        sq = b.node("Pow", [d.name, b.constant(np.array(2.0, np.float32)).name], x.shape, d.scale**2)
    var = reduce_node(b, "ReduceMean", sq, axes, 1, noop_ok=False)
    ve = b.node("Add", [var.name, b.constant(np.array(eps, np.float32)).name], var.shape, var.scale + eps)
    std = b.node("Sqrt", [ve.name], var.shape, math.sqrt(ve.scale))
    if b.chance(70):
        y = b.node("Div", [d.name, std.name], x.shape, 8.0)
    else:
        inv = b.node("Reciprocal", [std.name], var.shape, 1 / math.sqrt(eps))
        y = b.node("Mul", [d.name, inv.name], x.shape, 8.0)
    y = b.node("Mul", [y.name, gamma.name] if b.chance(50) else [gamma.name, y.name], x.shape, 12.0)
    if beta is not None:
        y = b.node("Add", [y.name, beta.name], x.shape, 13.0)
    return y


def gelu(b: GraphBuilder) -> Val | None:
    x = b.pick()
    if x is None:
        return None
    x = b.tame(x, 20.0)
    if b.opset >= 20 and b.chance(25):
        return b.node("Gelu", [x.name], x.shape, x.scale, approximate=b.choice([None, "tanh"]))
    half = b.constant(np.array(0.5, np.float32))
    one = b.constant(np.array(1.0, np.float32))
    if b.chance(60):  # x * 0.5 * (1 + erf(x / sqrt(2)))
        if b.chance(50):
            s = b.node("Div", [x.name, b.constant(np.array(math.sqrt(2), np.float32)).name], x.shape, x.scale)
        else:
            r2 = b.constant(np.array(1 / math.sqrt(2), np.float32))
            s = b.node("Mul", [x.name, r2.name], x.shape, x.scale)
        inner = b.node("Erf", [s.name], x.shape, 1.0)
    else:  # 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
        if b.chance(50):
            cube = b.node("Pow", [x.name, b.constant(np.array(3.0, np.float32)).name], x.shape, x.scale**3)
        else:
            sq = b.node("Mul", [x.name, x.name], x.shape, x.scale**2)
            cube = b.node("Mul", [sq.name, x.name], x.shape, x.scale**3)
        c = b.node("Mul", [cube.name, b.constant(np.array(0.044715, np.float32)).name], x.shape, cube.scale)
        s = b.node("Add", [x.name, c.name], x.shape, x.scale + c.scale)
        s = b.node("Mul", [s.name, b.constant(np.array(math.sqrt(2 / math.pi), np.float32)).name], x.shape,
                   s.scale)
        inner = b.node("Tanh", [s.name], x.shape, 1.0)
    p = b.node("Add", [one.name, inner.name] if b.chance(50) else [inner.name, one.name], x.shape, 2.0)
    order = b.choice(["x_half_p", "half_x_p", "x_p_half"])
    if order == "x_half_p":
        t = b.node("Mul", [x.name, half.name], x.shape, x.scale)
        return b.node("Mul", [t.name, p.name], x.shape, 2 * x.scale)
    if order == "half_x_p":
        t = b.node("Mul", [half.name, x.name], x.shape, x.scale)
        return b.node("Mul", [t.name, p.name], x.shape, 2 * x.scale)
    t = b.node("Mul", [x.name, p.name], x.shape, 2 * x.scale)
    return b.node("Mul", [t.name, half.name], x.shape, x.scale)


def softmax_parts(b: GraphBuilder) -> Val | None:
    x = b.pick(lambda v: v.rank >= 1)
    if x is None:
        return None
    x = b.tame(x, 20.0)
    axis = b.integer(0, x.rank - 1)
    if b.chance(70):
        m = reduce_node(b, "ReduceMax", x, [axis], 1, noop_ok=False)
        x = b.node("Sub", [x.name, m.name], x.shape, 2 * x.scale)
    e = b.node("Exp", [x.name], x.shape, math.exp(min(x.scale, 80.0)))
    s = reduce_node(b, "ReduceSum", e, [axis], 1, noop_ok=False)
    return b.node("Div", [e.name, s.name], x.shape, 1.0)


def attention(b: GraphBuilder) -> Val | None:
    x = b.pick(lambda v: v.rank == 3 and v.numel <= 512)
    if x is None:
        if not b.can_add_input():
            return None
        x = b.add_input((b.integer(1, 2), b.integer(2, 6), b.choice([4, 8])))
    bsz, seq, dim = x.shape
    heads = b.choice([h for h in (1, 2, 4) if dim % h == 0])
    dh = dim // heads

    def proj() -> Val:
        w = b.weight((dim, dim), 1 / math.sqrt(dim))
        return b.node("MatMul", [x.name, w.name], x.shape, x.scale)

    q, k, v = proj(), proj(), proj()
    if heads > 1:
        def split(t: Val, perm: list[int]) -> Val:
            r = b.node("Reshape", [t.name, b.ints([bsz, seq, heads, dh])], (bsz, seq, heads, dh), t.scale)
            shape = tuple((bsz, seq, heads, dh)[p] for p in perm)
            return b.node("Transpose", [r.name], shape, t.scale, perm=perm)
        q = split(q, [0, 2, 1, 3])
        v = split(v, [0, 2, 1, 3])
        kt = split(k, [0, 2, 3, 1])
    else:
        kt = b.node("Transpose", [k.name], (bsz, dim, seq), k.scale, perm=[0, 2, 1])
    s_shape = (*q.shape[:-1], seq)
    c = 1 / math.sqrt(dh)
    rooted = b.chance(25)  # torch's SDPA: c**0.5 on q and on k^T before the product
    if rooted:
        r = b.constant(np.array(math.sqrt(c), np.float32))
        q = b.node("Mul", [q.name, r.name], q.shape, q.scale * math.sqrt(c))
        kt = b.node("Mul", [r.name, kt.name], kt.shape, k.scale * math.sqrt(c))
    s = b.node("MatMul", [q.name, kt.name], s_shape, q.scale * k.scale * dh)
    if not rooted and b.chance(50):
        s = b.node("Mul", [s.name, b.constant(np.array(c, np.float32)).name], s_shape, s.scale * c)
    elif not rooted and b.chance(60):
        s = b.node("Div", [s.name, b.constant(np.array(1 / c, np.float32)).name], s_shape, s.scale * c)
    if b.chance(30):
        mask = np.where(np.tril(np.ones((seq, seq))) > 0, 0.0, -1e4).astype(np.float32)
        mval = b.constant(mask)
        s = b.node("Add", [s.name, mval.name], s_shape, s.scale + 1e4)
    p = b.node("Softmax", [s.name], s_shape, 1.0, axis=-1 if b.opset >= 13 else s.rank - 1)
    if b.chance(30):  # torch's safe softmax: where(isnan(p), 0, p)
        nan = b.node("IsNaN", [p.name], s_shape, 1.0, dtype=BOOL)  # a bool: not an operand of float ops
        p = b.node("Where", [nan.name, b.constant(np.array(0.0, np.float32)).name, p.name], s_shape, 1.0)
    y = b.node("MatMul", [p.name, v.name], q.shape, v.scale)
    if heads > 1:
        y = b.node("Transpose", [y.name], (bsz, seq, heads, dh), y.scale, perm=[0, 2, 1, 3])
        y = b.node("Reshape", [y.name, b.ints([bsz, seq, dim])], (bsz, seq, dim), y.scale)
    return y


def mlp(b: GraphBuilder) -> Val | None:
    x = b.pick(lambda v: v.rank >= 2 and v.shape[-1] <= 64)
    if x is None:
        return None
    for _ in range(b.integer(1, 2)):
        x = b.tame(x, 100.0)
        k = x.shape[-1]
        n = b.choice([4, 8, 16, k])
        out = (*x.shape[:-1], n)
        if math.prod(out) > MAX_ELEMENTS:
            return x if x.kind == "node" else None
        w = b.weight((k, n), 1 / math.sqrt(k))
        y = b.node("MatMul", [x.name, w.name], out, x.scale * math.sqrt(k))
        if b.chance(70):
            bias = b.weight((n,), 0.5)
            names = [y.name, bias.name] if b.chance(70) else [bias.name, y.name]
            y = b.node("Add", names, out, y.scale + 0.5)
        x = activation(b, y)
    return x


def transposes(b: GraphBuilder) -> Val | None:
    x = b.pick(lambda v: v.rank >= 2)
    if x is None:
        return None
    perm = list(b.draw(st.permutations(range(x.rank))))
    shape = tuple(x.shape[p] for p in perm)
    y = b.node("Transpose", [x.name], shape, x.scale, perm=perm)
    for _ in range(b.integer(0, 2)):
        op = b.choice(["Relu", "Neg", "Add", "Mul"])
        if op in ("Add", "Mul"):
            cshape = b.choice([shape, (), shape[-1:], tuple(1 if b.chance(50) else d for d in shape)])
            cst = b.weight(cshape)
            y = b.node(op, [y.name, cst.name], shape, y.scale * 2 + 1)
        else:
            y = b.node(op, [y.name], shape, y.scale)
    back = [perm.index(i) for i in range(x.rank)] if b.chance(70) else list(
        b.draw(st.permutations(range(x.rank))))
    return b.node("Transpose", [y.name], tuple(shape[p] for p in back), y.scale, perm=back)


def broadcasts(b: GraphBuilder) -> Val | None:
    x = b.pick(lambda v: v.rank >= 1)
    if x is None:
        return None
    small = tuple(1 if b.chance(50) else d for d in x.shape)
    if b.chance(50):  # an Expand feeding elementwise ops
        y = b.pick(lambda v: v.rank <= x.rank and v.numel <= x.numel and _fits(v.shape, x.shape))
        if y is None or y is x:
            y = b.weight(small)
        e = b.node("Expand", [y.name, b.ints(list(x.shape))], x.shape, y.scale)
    else:  # a constant that is a broadcast of a smaller one
        base = b.rng.uniform(-1, 1, size=small).astype(np.float32)
        e = b.constant(np.ascontiguousarray(np.broadcast_to(base, x.shape)))
    op = b.choice(["Add", "Mul", "Sub", "Max"])
    z = b.node(op, [x.name, e.name] if b.chance(50) else [e.name, x.name], x.shape, x.scale * 2 + 1)
    if b.chance(40):
        z = b.node("Add", [z.name, e.name], x.shape, z.scale + 1)
    return z


def _fits(small: tuple[int, ...], big: tuple[int, ...]) -> bool:
    try:
        return tuple(np.broadcast_shapes(small, big)) == tuple(big)
    except ValueError:
        return False


PATTERNS: list[tuple[str, Gen]] = [
    ("cnn_block", cnn_block), ("squeeze_excite", squeeze_excite), ("inverted_residual", inverted_residual),
    ("layernorm", layernorm), ("gelu", gelu),
    ("softmax_parts", softmax_parts),
    ("attention", attention), ("mlp", mlp), ("transposes", transposes), ("broadcasts", broadcasts),
]
