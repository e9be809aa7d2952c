"""Generators of int32, int64 and bool tensors for graphs.py, and of the ops that cross between them and
float32: comparisons, Where, ArgMax/ArgMin, Cast, integer arithmetic and boolean logic.

The oracle compares integer and boolean outputs exactly, so these generators make sure a result cannot
flip on a last-ulp difference between onnxruntime and tessel:
- an op that turns floats into ints or bools (Equal, Round, Floor, Ceil, Cast to int or bool) reads only
  *exact* values (`Val.exact`: inputs, constants, and what exact ops make of them), and Equal compares
  rounded values so both outcomes occur;
- Less/Greater on computed (inexact) floats compare against an independent constant or input, where a
  tie within float32 rounding is as likely as hitting one number out of millions;
- ArgMax/ArgMin read values with distinct entries (a permutation), values that a permutation spaced 1
  apart dominates (`P + 0.2 * tanh(x)`), or exact integer data whose ties `select_last_index` breaks.
Integer values carry a true bound on their magnitude (`Val.scale`), kept far below overflow, and every
denominator of Div and Mod is nonzero. Ops onnxruntime's CPU provider lacks (Where on bool branches,
Max/Min/Clip on ints before opset 12) are not generated.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

from .graph_ops import Gen, operand_like
from .graphs import BOOL, F32, I32, I64, MAX_ELEMENTS, NP_DTYPE, GraphBuilder, Val

INTS = (I32, I64)
INT_LIMIT = 2**20
"""Integer values stay below this bound (int32 overflows at 2**31; products of two such bounds are not
generated)."""
COMPARE = ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"]


def int_value(b: GraphBuilder, dtype: int | None = None) -> Val:
    """An int32/int64 operand: an existing one, a new input or a cast of an exact float."""
    dtypes = (dtype,) if dtype is not None else INTS
    x = b.pick(dtypes=dtypes)
    if x is not None and b.chance(70):
        return x
    dtype = dtype or b.choice(INTS)
    src = b.pick(lambda v: v.exact)
    if src is not None and b.chance(40):
        return to_int(b, src, dtype)
    if b.can_add_input():
        return b.add_input(b.dims(b.choice([1, 2, 3, 4, 0])), dtype)
    return b.constant(b.rng.integers(-4, 5, b.dims(2)).astype(NP_DTYPE[dtype]))


def to_int(b: GraphBuilder, x: Val, dtype: int) -> Val:
    """Cast an exact float to an int (truncating toward zero), rounding it first now and then."""
    if b.chance(50):
        op = b.choice(["Round", "Floor", "Ceil"])
        x = b.node(op, [x.name], x.shape, x.scale + 1, exact=True)
    return b.node("Cast", [x.name], x.shape, math.ceil(x.scale), dtype=dtype, exact=True, to=dtype)


def bool_value(b: GraphBuilder) -> Val:
    """A bool operand: an existing one, a comparison, or a new input."""
    x = b.pick(dtypes=(BOOL,))
    if x is not None and b.chance(60):
        return x
    if not b.can_add_input() or b.chance(60):
        got = compare(b)
        if got is not None:
            return got
    if b.can_add_input():
        return b.add_input(b.dims(b.choice([1, 2, 3, 4, 0])), BOOL)
    return b.constant(b.rng.random(b.dims(2)) < 0.5)


def same_type_partner(b: GraphBuilder, x: Val, exact: bool) -> Val:
    """A second operand of x's element type that broadcasts with it; `exact` asks for an exact one."""
    fits = [v for v in b.values + b.typed if v.dtype == x.dtype and (v.exact or not exact)
            and b.broadcast(v.shape, x.shape) is not None]
    if fits and b.chance(40):
        return b.choice(fits)
    shape = b.partner_shape(x.shape)
    if b.can_add_input() and b.chance(30):
        return b.add_input(shape, x.dtype)
    if x.dtype == BOOL:
        return b.constant(b.rng.random(shape) < 0.5)
    if x.dtype in INTS:
        return b.constant(b.rng.integers(-4, 5, shape).astype(NP_DTYPE[x.dtype]))
    if exact:  # a grid of halves: ties with rounded values happen
        return b.constant((b.rng.integers(-4, 5, shape) / 2).astype(np.float32))
    return b.weight(shape, b.choice([1.0, 2.0]))


# comparisons and Where ---------------------------------------------------------------------------------
def compare(b: GraphBuilder) -> Val | None:
    """Equal / Less / Greater / LessOrEqual / GreaterOrEqual on floats, ints or (Equal) bools."""
    ops = COMPARE if b.opset >= 12 else COMPARE[:3]
    op = b.choice(ops)
    kind = b.choice(["float", "float", "int", "bool"] if op == "Equal" else ["float", "float", "int"])
    if kind == "bool":
        x = b.pick(dtypes=(BOOL,)) or (b.add_input(b.dims(2), BOOL) if b.can_add_input() else None)
        if x is None:
            return None
        y = same_type_partner(b, x, True)
    elif kind == "int":
        x = int_value(b)
        y = same_type_partner(b, x, True)
    else:
        x = b.pick(lambda v: v.exact) if op == "Equal" or b.chance(50) else b.pick()
        if x is None:
            return None
        if op == "Equal" or x.exact and b.chance(50):  # rounded exact values: equal ones are common
            x = b.node("Round", [x.name], x.shape, x.scale + 1, exact=True)
            y = same_type_partner(b, x, True)
            if y.kind != "const" and b.chance(70):
                y = b.node("Round", [y.name], y.shape, y.scale + 1, exact=True)
        elif x.exact:
            y = same_type_partner(b, x, True)
        else:  # an inexact value against independent data
            shape = b.partner_shape(x.shape)
            y = b.add_input(shape) if b.can_add_input() and b.chance(30) else b.weight(shape, x.scale)
    shape = b.broadcast(x.shape, y.shape)
    if shape is None:
        return None
    names = [x.name, y.name] if b.chance(60) else [y.name, x.name]
    return b.node(op, names, shape, 1.0, dtype=BOOL, exact=True)


def where(b: GraphBuilder) -> Val | None:
    """Where(cond, x, y) on float or int branches (bool branches: onnxruntime has no kernel)."""
    cond = bool_value(b)
    if b.chance(60):
        x = b.pick() or operand_like(b, cond.shape)
    else:
        x = int_value(b)
    y = same_type_partner(b, x, False)
    shape = b.broadcast(cond.shape, x.shape, y.shape)
    if shape is None:
        return None
    names = [x.name, y.name] if b.chance(50) else [y.name, x.name]
    return b.node("Where", [cond.name, *names], shape, max(x.scale, y.scale), dtype=x.dtype,
                  exact=x.exact and y.exact)


# ArgMax / ArgMin -----------------------------------------------------------------------------------------
def argmax(b: GraphBuilder) -> Val | None:
    """ArgMax / ArgMin over a random axis (negative too), keepdims and (opset 12+) select_last_index."""
    kind = b.choice(["distinct", "dominated", "ties"])
    if kind == "distinct":  # every entry different: a permutation of a grid
        shape = b.dims(b.choice([1, 2, 3, 4]), 512)
        n = math.prod(shape)
        data = ((b.rng.permutation(n) - n / 2) / 4).astype(np.float32).reshape(shape)
        x = b.add_input(shape, F32, data) if b.can_add_input() and b.chance(60) else b.constant(data)
        if b.chance(30):
            x = b.node("Neg", [x.name], x.shape, x.scale, exact=True)
    elif kind == "dominated":  # P + 0.2 tanh(x): P's entries 1 apart decide, x moves them by < 0.2
        src = b.pick(lambda v: v.rank >= 1)
        if src is None:
            return None
        n = src.numel
        perm = (b.rng.permutation(n) - n // 2).astype(np.float32).reshape(src.shape)
        t = b.node("Tanh", [src.name], src.shape, 1.0)
        small = b.node("Mul", [t.name, b.constant(np.array(0.2, np.float32)).name], src.shape, 0.2)
        x = b.node("Add", [b.constant(perm).name, small.name], src.shape, n)
    else:  # exact data with ties: integers, or rounded exact floats
        x = int_value(b) if b.chance(50) else b.pick(lambda v: v.exact and v.rank >= 1)
        if x is None:
            return None
        if x.dtype == F32:
            x = b.node("Round", [x.name], x.shape, x.scale + 1, exact=True)
    if x.rank == 0:
        return None
    op = b.choice(["ArgMax", "ArgMin"])
    axis = b.integer(-x.rank, x.rank - 1)
    keepdims = b.choice([None, 0, 1])
    last = b.choice([None, 0, 1]) if b.opset >= 12 else None
    a = axis % x.rank
    shape = tuple(1 if i == a else d for i, d in enumerate(x.shape) if keepdims != 0 or i != a)
    return b.node(op, [x.name], shape, max(x.shape[a] - 1, 0), dtype=I64, exact=True,
                  axis=axis if axis != 0 or b.chance(50) else None, keepdims=keepdims, select_last_index=last)


# integers -----------------------------------------------------------------------------------------------
INT_BINARY = ["Add", "Sub", "Mul", "Max", "Min", "Div", "Mod"]
INT_UNARY = ["Abs", "Neg", "Clip", "Sign", "ReduceSum", "ReduceMax", "ReduceMin"]


def int_arith(b: GraphBuilder) -> Val | None:
    """Add/Sub/Mul/Max/Min/Div/Mod (both fmod) and Abs/Neg/Clip/Sign/reductions on int32 or int64."""
    x = int_value(b)
    ops = INT_BINARY + INT_UNARY
    if b.opset < 12:
        ops = [o for o in ops if o not in ("Max", "Min", "Clip")]
    op = b.choice(ops)
    dt = NP_DTYPE[x.dtype]
    if op in INT_UNARY:
        if op.startswith("Reduce"):
            from .graph_ops import reduce_node

            if x.rank == 0 or op == "ReduceSum" and x.scale * x.numel > INT_LIMIT:
                return None
            return reduce_node(b, op, x, b.subset(range(x.rank)), b.choice([None, 0, 1]))
        if op == "Clip":
            lo, hi = sorted(int(v) for v in b.rng.integers(-3, 4, 2))
            names = [x.name, b.constant(np.array(lo, dt)).name, b.constant(np.array(hi, dt)).name]
            return b.node("Clip", names, x.shape, max(abs(lo), abs(hi)), dtype=x.dtype, exact=True)
        return b.node(op, [x.name], x.shape, x.scale if op != "Sign" else 1, dtype=x.dtype, exact=True)
    y = same_type_partner(b, x, True)
    shape = b.broadcast(x.shape, y.shape)
    if shape is None:
        return None
    if op in ("Div", "Mod"):  # a nonzero denominator of either sign: +-(|y| + 1)
        a = b.node("Abs", [y.name], y.shape, y.scale, dtype=y.dtype, exact=True)
        y = b.node("Add", [a.name, b.constant(np.array(1, dt)).name], y.shape, y.scale + 1, dtype=y.dtype,
                   exact=True)
        if b.chance(50):
            y = b.node("Neg", [y.name], y.shape, y.scale, dtype=y.dtype, exact=True)
        fmod = b.choice([None, 0, 1]) if op == "Mod" else None
        scale = x.scale if op == "Div" else min(x.scale, y.scale)
        return b.node(op, [x.name, y.name], shape, scale, dtype=x.dtype, exact=True, fmod=fmod)
    scale = {"Mul": x.scale * y.scale, "Max": max(x.scale, y.scale), "Min": max(x.scale, y.scale)
             }.get(op, x.scale + y.scale)
    if scale > INT_LIMIT:
        op, scale = "Max" if b.opset >= 12 else "Sub", max(x.scale, y.scale) * 2
    names = [x.name, y.name] if b.chance(60) else [y.name, x.name]
    return b.node(op, names, shape, scale, dtype=x.dtype, exact=True)


def int_cast(b: GraphBuilder) -> Val | None:
    """Casts between float32, int32, int64 and bool: float to int or bool only from exact values; int and
    bool to float (exact: small integers)."""
    kind = b.choice(["float_to_int", "int_to_float", "int_to_int", "to_bool", "bool_to"])
    if kind == "float_to_int":
        x = b.pick(lambda v: v.exact and v.scale < INT_LIMIT)
        return to_int(b, x, b.choice(INTS)) if x is not None else None
    if kind in ("int_to_float", "int_to_int"):
        x = int_value(b)
        to = F32 if kind == "int_to_float" else (I64 if x.dtype == I32 else I32)
        return b.node("Cast", [x.name], x.shape, x.scale, dtype=to, exact=True, to=to)
    if kind == "to_bool":
        x = int_value(b) if b.chance(50) else b.pick(lambda v: v.exact)
        if x is None:
            return None
        return b.node("Cast", [x.name], x.shape, 1.0, dtype=BOOL, exact=True, to=BOOL)
    x = bool_value(b)
    to = b.choice([F32, F32, I32, I64])
    return b.node("Cast", [x.name], x.shape, 1.0, dtype=to, exact=True, to=to)


# booleans -----------------------------------------------------------------------------------------------
def bool_logic(b: GraphBuilder) -> Val | None:
    """And / Or / Xor / Not on bools (from comparisons, bool inputs, casts), then now and then a Cast back
    to float so the result feeds the float ops."""
    x = bool_value(b)
    op = b.choice(["And", "Or", "Xor", "Not"])
    if op == "Not":
        out = b.node("Not", [x.name], x.shape, 1.0, dtype=BOOL, exact=True)
    else:
        y = bool_value(b) if b.chance(50) else same_type_partner(b, x, True)
        shape = b.broadcast(x.shape, y.shape)
        if shape is None:
            return None
        out = b.node(op, [x.name, y.name], shape, 1.0, dtype=BOOL, exact=True)
    if b.chance(40):
        return b.node("Cast", [out.name], out.shape, 1.0, exact=True, to=F32)
    return out


# data movement of typed values ----------------------------------------------------------------------------
def typed_move(b: GraphBuilder) -> Val | None:
    """Transpose, Reshape, Expand, Concat, Unsqueeze, Flatten or Tile of an int or bool value."""
    x = b.pick(dtypes=(I32, I64, BOOL))
    if x is None or b.chance(20):
        x = int_value(b) if b.chance(50) else bool_value(b)
    op = b.choice(["Transpose", "Reshape", "Expand", "Concat", "Unsqueeze", "Flatten", "Tile"])
    kw = {"dtype": x.dtype, "exact": True}
    if op == "Transpose" and x.rank >= 2:
        perm = list(b.draw(st.permutations(range(x.rank))))
        return b.node(op, [x.name], [x.shape[p] for p in perm], x.scale, perm=perm, **kw)
    if op == "Reshape":
        return b.node(op, [x.name, b.ints([-1])], (x.numel,), x.scale, **kw)
    if op == "Expand":
        target = b.partner_shape(x.shape)
        shape = b.broadcast(x.shape, target)
        return b.node(op, [x.name, b.ints(target)], shape, x.scale, **kw) if shape is not None else None
    if op == "Concat" and x.rank >= 1:
        axis = b.integer(-x.rank, x.rank - 1)
        other = same_type_partner(b, x, True)
        if other.shape != x.shape:
            return None
        shape = list(x.shape)
        shape[axis % x.rank] *= 2
        if math.prod(shape) > MAX_ELEMENTS:
            return None
        return b.node(op, [x.name, other.name], shape, max(x.scale, other.scale), axis=axis, **kw)
    if op == "Unsqueeze":
        if b.opset >= 13:
            return b.node(op, [x.name, b.ints([0])], (1, *x.shape), x.scale, **kw)
        return b.node(op, [x.name], (1, *x.shape), x.scale, axes=[0], **kw)
    if op == "Flatten" and x.rank >= 1:
        return b.node(op, [x.name], (x.shape[0], x.numel // max(x.shape[0], 1)), x.scale, **kw)
    if op == "Tile" and x.rank >= 1:
        reps = [b.integer(1, 2) for _ in x.shape]
        shape = [d * r for d, r in zip(x.shape, reps, strict=True)]
        if math.prod(shape) > MAX_ELEMENTS:
            return None
        return b.node(op, [x.name, b.ints(reps)], shape, x.scale, **kw)
    return None


TYPED: list[tuple[str, Gen]] = [
    ("compare", compare), ("where", where), ("argmax", argmax), ("int_arith", int_arith),
    ("int_cast", int_cast), ("bool_logic", bool_logic), ("typed_move", typed_move),
]
"""The generators of int and bool values and of the ops between them and floats."""
