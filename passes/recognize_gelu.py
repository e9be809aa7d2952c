"""recognize-gelu: turn the expanded GELU forms exporters emit into one `gelu` op.

    x * 0.5 * (1 + erf(x / sqrt(2)))                              -> gelu(x)
    0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))        -> gelu(x) {approximate = "tanh"}

The product is matched as a tree of `mul`s in any order and association (`x * (..) * 0.5`, `0.5 * (x *
(..))`, ...); `x / sqrt(2)` may also be `x * 0.70710678`, `x^3` may be `pow(x, 3)` or `x * x * x`. Every
constant is a splat checked within 1e-4 of its exact value, and all occurrences of `x` must be the same
value. It refuses, with a `pattern` remark,
- `multi-use`: an intermediate value (the erf, the sum, a partial product) has users outside the pattern,
  so replacing the chain would still compute it;
- `shape-mismatch`: a constant broadcasts the result to a larger shape than `x`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..ir.core import Module, Op, Value, fuse_locs
from .common import splat_value
from .manager import Pass, PassContext
from .rewrite import Pattern, Rewriter, apply_patterns_greedily

TOL = 1e-4
SQRT2 = 1.4142135623730951
SQRT_2_OVER_PI = 0.7978845608028654
CUBIC = 0.044715


@dataclass
class _Match:
    x: Value
    approximate: str
    ops: list[Op]  # every op of the pattern; the root last
    inner: list[Op] = field(default_factory=list)  # ops whose results must have no users outside


class _Matcher:
    def __init__(self, module: Module) -> None:
        self.module = module

    def const(self, v: Value, want: float) -> bool:
        s = splat_value(v, self.module)
        return s is not None and not isinstance(s, bool) and abs(float(s) - want) <= TOL

    def is_const(self, v: Value) -> bool:
        return splat_value(v, self.module) is not None

    def factors(self, v: Value, ops: list[Op], depth: int = 0) -> list[Value]:
        """The leaves of the `mul` tree rooted at v (ops of the tree appended to `ops`): below the root it
        goes only through muls used once, so a multi-use product (x itself may be one) is a leaf."""
        op = v.op
        if op is None or op.name != "mul" or depth > 3 or (depth and len(v.uses) != 1):
            return [v]
        ops.append(op)
        return [f for a in op.operands for f in self.factors(a, ops, depth + 1)]

    def gelu(self, root: Op) -> _Match | None:
        # mul tree with leaves {x, 0.5, add(1, erf(x / sqrt2)) | add(1, tanh(...))}
        tree: list[Op] = []
        leaves = self.factors(root.result, tree)
        if len(leaves) != 3:
            return None
        halves = [f for f in leaves if self.const(f, 0.5)]
        sums = [f for f in leaves if f.op is not None and f.op.name == "add"]
        if not halves or not sums:
            return None
        for s in sums:
            rest = [f for f in leaves if f is not s]
            rest.remove(next(f for f in rest if self.const(f, 0.5)))
            x = rest[0]
            m = self.one_plus(s, x)
            if m is not None:
                m.ops = [*m.ops, *tree[::-1]]
                m.inner = [op for op in m.ops if op is not root]
                return m
        return None

    def one_plus(self, s: Value, x: Value) -> _Match | None:
        # add(1, erf(z)) or add(1, tanh(z)), either order
        add = s.op
        assert add is not None
        a, b = add.operands
        f = b if self.const(a, 1.0) else a if self.const(b, 1.0) else None
        if f is None or f.op is None:
            return None
        if f.op.name == "erf" and self.erf_arg(f.op.operands[0], x):
            arg = f.op.operands[0].op
            assert arg is not None
            return _Match(x, "none", [arg, f.op, add])
        if f.op.name == "tanh":
            inner = self.tanh_arg(f.op.operands[0], x)
            if inner is not None:
                return _Match(x, "tanh", [*inner, f.op, add])
        return None

    def erf_arg(self, z: Value, x: Value) -> bool:
        # x / sqrt(2) or x * (1 / sqrt(2))
        op = z.op
        if op is None:
            return False
        if op.name == "div":
            return op.operands[0] is x and self.const(op.operands[1], SQRT2)
        if op.name == "mul":
            a, b = op.operands
            return (a is x and self.const(b, 1 / SQRT2)) or (b is x and self.const(a, 1 / SQRT2))
        return False

    def tanh_arg(self, z: Value, x: Value) -> list[Op] | None:
        # sqrt(2/pi) * (x + 0.044715 * x^3), the sum and the cube in any order
        tree: list[Op] = []
        leaves = self.factors(z, tree)
        if len(leaves) != 2:
            return None
        c, s = leaves if self.is_const(leaves[0]) else leaves[::-1]
        if not self.const(c, SQRT_2_OVER_PI) or s.op is None or s.op.name != "add":
            return None
        add = s.op
        a, b = add.operands
        term = b if a is x else a if b is x else None
        if term is None:
            return None
        cube = self.cubic_term(term, x)
        return None if cube is None else [*cube, add, *tree[::-1]]

    def cubic_term(self, t: Value, x: Value) -> list[Op] | None:
        # 0.044715 * x^3 as a mul tree whose leaves are the constant and x, x, x or pow(x, 3)
        tree: list[Op] = []
        leaves = self.factors(t, tree)
        consts = [f for f in leaves if self.const(f, CUBIC)]
        if len(consts) != 1:
            return None
        rest = [f for f in leaves if f is not consts[0]]
        if len(rest) == 3 and all(f is x for f in rest):
            return tree[::-1]
        if len(rest) == 1 and rest[0].op is not None and rest[0].op.name == "pow":
            p = rest[0].op
            if p.operands[0] is x and self.const(p.operands[1], 3.0):
                return [p, *tree[::-1]]
        return None


@dataclass
class RecognizeGelu(Pass):
    """Replace the erf and tanh expansions of GELU by one `gelu` op (the tanh form sets approximate)."""

    NAME = "recognize-gelu"
    STATISTICS = {
        "num-recognized": "Number of GELU expansions replaced by one gelu op",
        "num-refused": "Number of GELU expansions left alone (multi-use intermediates, broadcasting)",
    }

    def run(self, module: Module, ctx: PassContext) -> None:
        matcher = _Matcher(module)
        refused: set[int] = set()

        def gelu(op: Op, rw: Rewriter) -> bool:
            # x * 0.5 * (1 + erf(x / sqrt(2))) -> gelu(x); the tanh form -> gelu(x) {approximate = "tanh"}
            m = matcher.gelu(op)
            if m is None:
                return False
            m.ops = _in_order(m.ops)
            why = _refusal(op, m)
            if why is not None:
                if id(op) not in refused:
                    refused.add(id(op))
                    self.stat("num-refused")
                    ctx.remark_missed("pattern", why[0], m.ops, why[1])
                return False
            new = rw.create(
                op,
                "gelu",
                [m.x],
                [op.result.type],
                {"approximate": m.approximate},
                loc=fuse_locs(*(o.loc for o in m.ops)),
            )
            rw.replace_op(op, [new.result])
            self.stat("num-recognized")
            form = "tanh" if m.approximate == "tanh" else "erf"
            ctx.remark_passed(
                "pattern", "recognized", m.ops, f"{len(m.ops)} ops of the {form} form -> 'gelu'"
            )
            return True

        patterns: dict[str, list[Pattern]] = {"mul": [gelu]}
        apply_patterns_greedily(module, patterns)


def _in_order(ops: list[Op]) -> list[Op]:
    """`ops` in program order (remarks and fused locations list them as the source does)."""
    return sorted(ops, key=lambda o: o.parent.ops.index(o) if o.parent is not None else -1)


def _refusal(root: Op, m: _Match) -> tuple[str, str] | None:
    if m.x.type != root.result.type:
        return ("shape-mismatch", f"the result {root.result.type} is not the type of x {m.x.type}")
    inside = {id(o) for o in m.ops}
    for op in m.inner:
        outside = [u for u in op.result.users if id(u) not in inside]
        if outside:
            return (
                "multi-use",
                f"'{op.name}' inside the GELU pattern has {len(outside)} other "
                f"user{'s' if len(outside) > 1 else ''}",
            )
    return None


PASS = RecognizeGelu
