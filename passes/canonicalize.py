"""canonicalize: simplify ops to a canonical form with small patterns driven to a fixpoint.

Each pattern is one algebraic fact about one op, stated on its first line. Patterns never change what a
module computes (including NaN/inf propagation: `x * 0` is not folded) and never change a value's type;
a rewrite that would (e.g. `x + 0` where the zero broadcasts `x` to a larger shape) is refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..ir.core import Module, Op, Value
from ..ir.ops.registry import load_all
from .common import const_attr, splat_value
from .manager import Pass, PassContext
from .rewrite import Pattern, Rewriter, apply_patterns_greedily


def _same_type(op: Op, v: Value) -> bool:
    return op.result.type == v.type


def _is_splat(module: Module, v: Value, x: float) -> bool:
    s = splat_value(v, module)
    return s is not None and not isinstance(s, bool) and s == x


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

    patterns: dict[str, list[Pattern]] = {
        "add": [neutral(0.0, True)],
        "sub": [neutral(0.0, False)],
        "mul": [neutral(1.0, True)],
        "div": [neutral(1.0, False)],
        "pow": [neutral(1.0, False), square],
        "identity": [forward_operand],
        "transpose": [compose_transposes],
        "reshape": [compose_reshapes],
        "cast": [noop_if_same_type],
        "expand": [noop_if_same_type],
        "tile": [noop_tile],
        "pad": [noop_pad],
        "slice": [noop_slice],
        "concat": [single_concat],
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
    no-op removal, unary elementwise ops before reshapes."""

    NAME = "canonicalize"
    STATISTICS = {"num-rewrites": "Number of rewrites applied (patterns and dead ops erased)"}
    max_iterations: int = field(default=1_000_000, metadata={"min": 1})  # 0 could never converge

    def run(self, module: Module, ctx: PassContext) -> None:
        n = apply_patterns_greedily(module, make_patterns(module), self.max_iterations)
        self.stat("num-rewrites", n)


PASS = Canonicalize
