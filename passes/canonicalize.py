"""canonicalize: simplify ops to a canonical form with small patterns driven to a fixpoint.

Each pattern is one algebraic fact about one op, stated on its first line. Patterns never change what a
module computes (including NaN/inf propagation: `x * 0` is not folded) and never change a value's type;
a rewrite that would (e.g. `x + 0` where the zero broadcasts `x` to a larger shape) is refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..ir.attributes import DenseAttr
from ..ir.core import Module, Op, Value
from ..ir.diagnostics import Diagnostic, DiagnosticError
from ..ir.ops.registry import load_all
from ..ir.types import TensorType
from .common import const_array, const_attr, reshape_groups, splat_value
from .manager import Pass, PassContext
from .rewrite import NotConverged, Pattern, Rewriter, apply_patterns_greedily


def _same_type(op: Op, v: Value) -> bool:
    return op.result.type == v.type


def _is_splat(module: Module, v: Value, x: float) -> bool:
    s = splat_value(v, module)
    return s is not None and not isinstance(s, bool) and s == x


MAX_SPLIT_PIECES = 16
"""gathers_to_split makes splits of at most this many pieces (QKV's unbind has 3): a split that fuse writes
from a matmul's epilogue is one kernel with a buffer argument a piece; more gathers stay gathers."""


def unit_reshape_first(
    w: TensorType, p: list[int], y: TensorType
) -> tuple[tuple[int, ...], list[int]] | None:
    """For reshape(transpose(w, p)) of type y, where the reshape only adds or drops size-1 dims: (shape, q)
    with transpose(reshape(w, shape), q) the same tensor and q keeping y's size-1 dims in place; None when
    the shapes are not static or the reshape does more."""
    if not (w.is_static and y.is_static):
        return None
    t = [w.dims[i] for i in p]
    if [d for d in t if d != 1] != [d for d in y.dims if d != 1]:
        return None
    w_big = [i for i, d in enumerate(w.dims) if d != 1]
    y_big = [i for i, d in enumerate(y.dims) if d != 1]
    shape = list(y.dims)
    for pos, i in zip(y_big, w_big, strict=True):  # w's big dims, in w's order, at y's big positions
        shape[pos] = w.dims[i]
    q = list(range(y.rank))
    src = [p[j] for j, d in enumerate(t) if d != 1]  # w's dim behind each of y's big dims, in y's order
    for pos, i in zip(y_big, src, strict=True):
        q[pos] = y_big[w_big.index(i)]
    return tuple(shape), q


def scalar_index(g: Op) -> int | None:
    """A gather's index when it is one constant integer (rank 0), made non-negative; else None."""
    a = const_attr(g.operands[1])
    if not isinstance(a, DenseAttr) or g.operands[1].type.rank != 0 or a.data.dtype.kind not in "iu":
        return None
    x = g.operands[0].type
    axis = int(g.attrs.get("axis", 0)) % x.rank  # type: ignore[arg-type]
    d = x.shape[axis]
    i = int(a.data.reshape(()))
    if d is None or not -d <= i < d:
        return None
    return i % d


def split_axis(x: tuple[int, ...], z: tuple[int, ...], b: int) -> tuple[int, int] | None:
    """(j, inner) when a reshape of dims x to dims z splits x's dim j into z's dims b.. (b the first, size-1
    dims aside): index i along z's dim b is x's rows [i * inner, (i + 1) * inner) along j."""
    groups = reshape_groups(x, z)
    if groups is None:
        return None
    for gx, gz in groups:
        if b not in gz:
            continue
        big_x = [k for k in gx if x[k] != 1]
        big_z = [k for k in gz if z[k] != 1]
        if len(big_x) != 1 or not big_z or big_z[0] != b:
            return None
        return big_x[0], math.prod(z[k] for k in gz if k > b)
    return None


def make_patterns(module: Module) -> dict[str, list[Pattern]]:
    def neutral(right_value: float, commutative: bool):
        def pattern(op: Op, rw: Rewriter) -> bool:
            # op(x, e) -> x where e is the neutral element (and op(e, x) -> x when commutative)
            a, b = op.operands
            if _is_splat(module, b, right_value) and _same_type(op, a):
                rw.replace_op(op, [a])
                return True
            if commutative and _is_splat(module, a, right_value) and _same_type(op, b):
                rw.replace_op(op, [b])
                return True
            return False

        return pattern

    def constant_to_rhs(op: Op, rw: Rewriter) -> bool:
        # op(const, x) -> op(x, const) for commutative op: constants on the right
        a, b = op.operands
        if const_attr(a) is not None and const_attr(b) is None:
            op.set_operands([b, a])
            rw.changed(op)
            return True
        return False

    def fold_constant_if(op: Op, rw: Rewriter) -> bool:
        # if(const c, {A; yield a}, {B; yield b}) -> A; a (or B; b): the branch a constant picks, inlined
        c = const_array(op.operands[0], module)
        if c is None:
            return False
        block = op.regions[0 if bool(np.asarray(c).reshape(-1)[0]) else 1].block
        term = block.ops[-1]
        if [v.type for v in term.operands] != op.result_types:  # the branch yields other dims than the if
            return False
        anchor = op.parent
        assert anchor is not None
        for inner in list(block.ops[:-1]):
            block.remove(inner)
            anchor.insert_before(op, inner)
            rw.push(inner)
        values = list(term.operands)
        term.drop_operands()
        rw.replace_op(op, values)
        return True

    def drop_true_assert(op: Op, rw: Rewriter) -> bool:
        # assert(const true) -> nothing (a false one stays: the run fails there)
        if not op.operands:  # in a branch an `if` on a constant dropped
            return False
        c = const_array(op.operands[0], module)
        if c is None or not bool(np.asarray(c).reshape(-1)[0]):
            return False
        rw.erase_op(op)
        return True

    def forward_operand(op: Op, rw: Rewriter) -> bool:
        # identity(x) -> x
        rw.replace_op(op, [op.operands[0]])
        return True

    def compose_transposes(op: Op, rw: Rewriter) -> bool:
        # transpose(transpose(x, p), q) -> transpose(x, p[q]); transpose(x, iota) -> x
        perm = list(op.attrs["perm"])  # type: ignore[arg-type]
        if perm == list(range(len(perm))):
            rw.replace_op(op, [op.operands[0]])
            return True
        inner = op.operands[0].op
        if inner is None or inner.name != "transpose":
            return False
        p = list(inner.attrs["perm"])  # type: ignore[arg-type]
        composed = [p[i] for i in perm]
        new = rw.create(op, "transpose", [inner.operands[0]], [op.result.type], {"perm": composed})
        rw.replace_op(op, [new.result])
        return True

    def compose_reshapes(op: Op, rw: Rewriter) -> bool:
        # reshape(x) -> x when the shape is unchanged; reshape(reshape(x)) -> reshape(x)
        src = op.operands[0]
        if _same_type(op, src):
            rw.replace_op(op, [src])
            return True
        inner = src.op
        if inner is None or inner.name != "reshape":
            return False
        new = rw.create(op, "reshape", [inner.operands[0]], [op.result.type],
                        {"shape": list(op.result.type.shape)})
        rw.replace_op(op, [new.result])
        return True

    def noop_if_same_type(op: Op, rw: Rewriter) -> bool:
        # cast/expand/broadcast-like op(x) -> x when the result type equals the operand type
        if _same_type(op, op.operands[0]):
            rw.replace_op(op, [op.operands[0]])
            return True
        return False

    def noop_tile(op: Op, rw: Rewriter) -> bool:
        # tile(x, [1, ..., 1]) -> x
        return noop_if_same_type(op, rw)

    def noop_pad(op: Op, rw: Rewriter) -> bool:
        # pad(x, [0, ..., 0]) -> x
        if all(p == 0 for p in op.attrs["pads"]):  # type: ignore[union-attr]
            return noop_if_same_type(op, rw)
        return False

    def noop_slice(op: Op, rw: Rewriter) -> bool:
        # slice(x) -> x when it keeps every element in order (result type equals operand type, steps > 0)
        steps = op.attrs.get("steps") or []
        if all(isinstance(s, int) and s > 0 for s in steps):  # type: ignore[union-attr]
            return noop_if_same_type(op, rw)
        return False

    def single_concat(op: Op, rw: Rewriter) -> bool:
        # concat(x) -> x
        if len(op.operands) == 1:
            rw.replace_op(op, [op.operands[0]])
            return True
        return False

    def unary_before_reshape(op: Op, rw: Rewriter) -> bool:
        # f(reshape(x)) -> reshape(f(x)) for a one-operand elementwise f, when the reshape has no other use:
        # f then sits on x's producer, whose kernel can take it as an epilogue (GPT-2's gelu after a gemm)
        r = op.operands[0].op
        if r is None or r.name != "reshape" or len(op.results) != 1 or len(r.result.uses) != 1:
            return False
        x = r.operands[0]
        moved = rw.create(op, op.name, [x], [op.result.type.with_shape(x.type.shape)], dict(op.attrs))
        back = rw.create(op, "reshape", [moved.result], [op.result.type], dict(r.attrs), r.loc)
        back.result.name = op.result.name
        rw.replace_op(op, [back.result])
        return True

    def reshape_before_transpose(op: Op, rw: Rewriter) -> bool:
        # reshape(transpose(w, p)) -> transpose(reshape(w), q) when the reshape only adds or drops size-1
        # dims and the transpose has no other use: the transpose comes last, keeping the size-1 dims in place,
        # where the op reading it can absorb it (attention's q, k, v after torch's [H, S, D] -> [1, H, S, D])
        t = op.operands[0].op
        if t is None or t.name != "transpose" or len(t.result.uses) != 1:
            return False
        w = t.operands[0]
        moved = unit_reshape_first(w.type, [int(i) for i in t.attrs["perm"]], op.result.type)  # type: ignore[union-attr]
        if moved is None:
            return False
        shape, q = moved
        x = w if shape == w.type.dims else rw.create(op, "reshape", [w], [w.type.with_shape(shape)],
                                                     {"shape": list(shape)}, t.loc).result
        out = x
        if q != sorted(q):
            out = rw.create(op, "transpose", [x], [op.result.type], {"perm": q}, t.loc).result
        if out is not w:
            out.name = op.result.name
        rw.replace_op(op, [out])
        return True

    def gather_before_transpose(op: Op, rw: Rewriter) -> bool:
        # gather(transpose(z, p), i, axis a) -> gather(z, i, axis p[a]) for a scalar constant i, when the
        # other dims keep their order (size-1 dims aside): the transpose only moved the gathered axis
        t = op.operands[0].op
        i = scalar_index(op)
        if t is None or t.name != "transpose" or i is None:
            return False
        p = [int(d) for d in t.attrs["perm"]]  # type: ignore[union-attr]
        z = t.operands[0]
        a = int(op.attrs.get("axis", 0)) % len(p)  # type: ignore[arg-type]
        b = p[a]
        rest = [d for d in p if d != b]
        if not z.type.is_static or [d for d in rest if z.type.dims[d] != 1] != sorted(
            d for d in rest if z.type.dims[d] != 1
        ):
            return False
        dims = tuple(z.type.dims[d] for d in range(z.type.rank) if d != b)
        g = rw.create(op, "gather", [z, op.operands[1]], [op.result.type.with_shape(dims)], {"axis": b})
        out = g.result
        if dims != op.result.type.dims:
            shape = list(op.result.type.dims)
            out = rw.create(op, "reshape", [out], [op.result.type], {"shape": shape}).result
        out.name = op.result.name
        rw.replace_op(op, [out])
        return True

    def gathers_to_split(op: Op, rw: Rewriter) -> bool:
        # gather(reshape(x), i, axis b) for i = 0..n-1 -> the pieces of split(x) along x's dim j, when the
        # reshape splits j into [n, ...] with b its first part: torch's unbind of a fused QKV projection
        r = op.operands[0].op
        if r is None or r.name != "reshape" or scalar_index(op) is None:
            return False
        x, z = r.operands[0], r.result
        if not (x.type.is_static and z.type.is_static):
            return False
        b = int(op.attrs.get("axis", 0)) % z.type.rank  # type: ignore[arg-type]
        users = [u for u, _ in z.uses]
        if any(
            u.name != "gather" or u.operands[0] is not z or scalar_index(u) is None
            or int(u.attrs.get("axis", 0)) % z.type.rank != b  # type: ignore[arg-type]
            for u in users
        ):
            return False
        n = z.type.dims[b]
        if n > MAX_SPLIT_PIECES or {scalar_index(u) for u in users} != set(range(n)):
            return False
        piece = split_axis(x.type.dims, z.type.dims, b)
        if piece is None:
            return False
        j, inner = piece
        pt = x.type.with_shape(tuple(inner if k == j else d for k, d in enumerate(x.type.dims)))
        sp = rw.create(op, "split", [x], [pt] * n, {"axis": j, "sizes": [inner] * n}, r.loc)
        for u in users:
            out = sp.results[scalar_index(u)]  # type: ignore[index]
            if out.type != u.result.type:
                out = rw.create(u, "reshape", [out], [u.result.type], {"shape": list(u.result.type.dims)},
                                u.loc).result
            rw.replace_op(u, [out])
        return True

    def square(op: Op, rw: Rewriter) -> bool:
        # pow(x, 2) -> x * x for float x: the correctly rounded square either way (NaN, inf, -0 too), and a
        # multiply instead of OpenCL's pow (RMSNorm's x.pow(2): ~75 ns an element on PoCL)
        x, e = op.operands
        if not x.type.is_float or not _same_type(op, x) or not _is_splat(module, e, 2.0):
            return False
        mul = rw.create(op, "mul", [x, x], [op.result.type])
        mul.result.name = op.result.name
        rw.replace_op(op, [mul.result])
        return True

    def integer_conv_on_rows(op: Op, rw: Rewriter) -> bool:
        # qconv2d / conv2d_integer over one column, x [N, C, H, 1] * w [O, C, KH, 1], unpadded along W ->
        # the same conv over one row, x [N, C, 1, H] * w [O, C, 1, KH] (the same bytes: only the view
        # changes): an importer's conv1d; the integer kernels put a row's output columns in their lanes
        x, w = op.operands[:2]
        y = op.result.type
        if not (x.type.is_static and w.type.is_static and y.is_static and x.type.rank == 4):
            return False
        pads, strides, dil = (list(op.attrs.get(k, d))  # type: ignore[arg-type]
                              for k, d in (("pads", [0] * 4), ("strides", [1, 1]), ("dilations", [1, 1])))
        if x.type.dims[3] != 1 or w.type.dims[3] != 1 or y.dims[3] != 1 or pads[1] or pads[3] \
                or x.type.dims[2] == 1:
            return False
        n, c, h, _ = x.type.dims
        attrs = dict(op.attrs, strides=[1, strides[0]], pads=[0, pads[0], 0, pads[2]],
                     dilations=[1, dil[0]])
        rows = [rw.create(op, "reshape", [v], [t], {"shape": list(t.dims)}, op.loc).result
                for v, t in ((x, TensorType((n, c, 1, h), x.type.dtype)),
                             (w, TensorType((*w.type.dims[:2], 1, w.type.dims[2]), w.type.dtype)))]
        t = TensorType((*y.dims[:2], 1, y.dims[2]), y.dtype)
        conv = rw.create(op, op.name, [*rows, *op.operands[2:]], [t], attrs, op.loc)
        back = rw.create(op, "reshape", [conv.result], [y], {"shape": list(y.dims)}, op.loc)
        back.result.name = op.result.name
        rw.replace_op(op, [back.result])
        return True

    patterns: dict[str, list[Pattern]] = {
        "add": [neutral(0.0, True)],
        "sub": [neutral(0.0, False)],
        "mul": [neutral(1.0, True)],
        "div": [neutral(1.0, False)],
        "pow": [neutral(1.0, False), square],
        "identity": [forward_operand],
        "if": [fold_constant_if],
        "assert": [drop_true_assert],
        "transpose": [compose_transposes],
        "reshape": [compose_reshapes, reshape_before_transpose],
        "gather": [gather_before_transpose, gathers_to_split],
        "cast": [noop_if_same_type],
        "expand": [noop_if_same_type],
        "tile": [noop_tile],
        "pad": [noop_pad],
        "slice": [noop_slice],
        "concat": [single_concat],
        "qconv2d": [integer_conv_on_rows],
        "conv2d_integer": [integer_conv_on_rows],
    }
    for name, opdef in load_all().items():
        if opdef.has("commutative") and len(opdef.operands) == 2:
            patterns.setdefault(name, []).append(constant_to_rhs)
        if opdef.has("elementwise") and len(opdef.operands) == 1 and not opdef.regions:
            patterns.setdefault(name, []).append(unary_before_reshape)
    return patterns


@dataclass
class Canonicalize(Pass):
    """Simplify ops to canonical form: neutral elements, pow(x, 2) as x * x, transpose/reshape composition,
    no-op removal, unary elementwise ops before reshapes, an `if` on a constant as the branch it picks."""

    NAME = "canonicalize"
    STATISTICS = {"num-rewrites": "Number of rewrites applied (patterns and dead ops erased)"}
    max_iterations: int = field(default=1_000_000, metadata={"min": 1})  # op visits; 0 could never converge
    test_convergence: bool = False  # running out of visits with work left is an error, not a stop

    def run(self, module: Module, ctx: PassContext) -> None:
        try:
            n = apply_patterns_greedily(module, make_patterns(module), self.max_iterations)
        except NotConverged as e:
            if self.test_convergence:
                raise DiagnosticError(Diagnostic(
                    "error", f"canonicalize did not converge within max-iterations={e.visits} op visits "
                    f"({e.rewrites} rewrites made); this '{e.op.name}' op was still to visit",
                    e.op.pos, e.op.loc)) from None
            if self.max_iterations == Canonicalize.max_iterations:
                raise  # the default limit runs out only when patterns undo each other: a compiler bug
            n = e.rewrites  # a limit asked for: stop there, the module valid as the last rewrite left it
        self.stat("num-rewrites", n)


PASS = Canonicalize
