"""A hypothesis strategy for random valid `.tsl` modules built straight from the op registry, for the
pass-level fuzzer (module_check.py).

`modules()` draws a `ModuleCase`: one func `@main` of 1-3 arguments (f32, now and then f16 so that
emulate-f16 has work; ranks 0-4) and up to `max_steps` ops, each made by the op's maker in module_ops.py
with attributes valid for its operands. Every op goes through the registry: its `infer` gives the result
types (and an `OpError` makes the maker's attempt a no-op), so a module is valid by construction; the
verifier re-checks it in `finish`. The builder keeps the values' magnitudes tame (Tanh in front of Exp,
Pow, products) and domains right (Abs + 1 under Log, Sqrt, Div), and it tracks *exact* values
(arguments, constants and what Neg, Abs, Max, Round, casts to int, data movement... make of them): the
ops whose result jumps with a last-ulp change of their operand (comparisons, Round/Floor/Ceil/Sign, casts
to int or bool, ArgMax, TopK's indices) read only exact values, because a pass that reassociates
floating-point sums (fold-batchnorm, recognize-layernorm, propagate-layout, merge-sibling-matmuls) may
move an inexact value by an ulp, and validation would then report a flip that is no miscompile.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import strategies as st

from .draws import Draws

MAX_ELEMENTS = 2048
FLOATS = ("f32", "f16")


@dataclass
class ModuleCase:
    """One generated module (as text: what a reproducer holds) and the ops its makers built."""

    text: str
    ops: list[str] = field(default_factory=list)  # registry op names in program order, consts left out

    def __repr__(self) -> str:  # what hypothesis prints for a falsifying example
        return f"ModuleCase(ops={self.ops})\n{self.text}"


class ModuleBuilder(Draws):
    """Builds one func from hypothesis draws; module_ops.py's makers call `op`, `const`, `pick` and the
    draw helpers."""

    max_elements = MAX_ELEMENTS

    def __init__(self, draw: Callable[[st.SearchStrategy[Any]], Any], seed: int, n_args: int, dtype: str):
        from tessel.ir.core import Func
        from tessel.ir.types import TensorType

        self.draw = draw
        self.rng = np.random.default_rng(seed)
        self.dtype = dtype  # the float type of the arguments and of most constants
        shapes = [self.dims(self.choice([4, 2, 3, 1, 0, 4])) for _ in range(n_args)]
        self.func = Func.new("main", [TensorType(s, dtype) for s in shapes], [f"x{i}" for i in range(n_args)],
                             [])
        self.values = list(self.func.args)
        self.exact: set[int] = {id(v) for v in self.values}
        self.scale: dict[int, float] = {id(v): 1.0 for v in self.values}  # a rough bound on |x|
        self.pinned: list[Any] = []  # results of the func that no op may read (`pin`)

    # drawing --------------------------------------------------------------------------------------------
    def dims(self, rank: int, budget: int = 512) -> tuple[int, ...]:
        shape: list[int] = []
        for _ in range(rank):
            left = max(budget // max(math.prod(shape), 1), 1)
            shape.append(min(self.choice([1, 2, 3, 4, 5, 8, 16, 17]), left))
        return tuple(shape)

    # values ---------------------------------------------------------------------------------------------
    def pick(self, pred: Callable[[Any], bool] = lambda v: True, dtypes: Sequence[str] = FLOATS,
             exact: bool = False) -> Any:
        """A value (recent ones likelier) of one of `dtypes` satisfying `pred`; `exact` asks for one
        computed without rounding. None when there is none."""
        cands = [v for v in self.values if v.type.dtype in dtypes and pred(v)
                 and (not exact or id(v) in self.exact)]
        if not cands:
            return None
        return cands[len(cands) - 1 - self.integer(0, len(cands) - 1)]

    def op(self, name: str, operands: Sequence[Any], attrs: dict[str, Any] | None = None, *,
           exact: bool = False, scale: float | None = None) -> list[Any] | None:
        """Append `name` if its infer (and verify) accept the operands and attributes: its results, or
        None (also when an operand is None: a chain of makers stops at its first misfit). `exact`: the
        results are computed without rounding; `scale`: a bound on their magnitude (default: the largest
        operand's)."""
        from tessel.ir.core import Op
        from tessel.ir.ops.registry import OpError, get_op

        opdef = get_op(name)
        assert opdef is not None, name
        if any(v is None for v in operands):  # an earlier step of a chain did not fit
            return None
        attrs = {k: v for k, v in (attrs or {}).items() if v is not None}
        try:
            sig = opdef.sig([v.type for v in operands], attrs)
            types = opdef.infer(sig)
            if opdef.verify is not None:
                sig.results = types
                opdef.verify(sig)
        except OpError:
            return None
        if name != "const" and any(t.numel > MAX_ELEMENTS or 0 in t.dims for t in types):
            return None
        op = Op(name, list(operands), types, attrs, loc=(f"fuzz:{name}_{len(self.func.block.ops)}",))
        self.func.block.append(op)
        bound = scale if scale is not None else max((self.scale.get(id(v), 1.0) for v in operands),
                                                     default=1.0)
        for r in op.results:
            self.values.append(r)
            self.scale[id(r)] = min(bound, 1e6)
            if exact or not r.type.is_float:
                self.exact.add(id(r))
        return op.results

    def one(self, name: str, operands: Sequence[Any], attrs: dict[str, Any] | None = None, **kw: Any) -> Any:
        """`op`'s first result, or None."""
        got = self.op(name, operands, attrs, **kw)
        return got[0] if got else None

    def pin(self, v: Any) -> Any:
        """Make `v` a result of the func that no later op reads (None passes through)."""
        if v is not None:
            self.values.remove(v)
            self.pinned.append(v)
        return v

    def const(self, arr: np.ndarray) -> Any:
        from tessel.ir.attributes import DenseAttr

        arr = np.asarray(arr)
        v = self.one("const", [], {"value": DenseAttr.of(arr)}, exact=True,
                     scale=float(np.max(np.abs(arr.astype(np.float64)), initial=0.0)))
        assert v is not None
        return v

    def weight(self, shape: Sequence[int], scale: float = 1.0, dtype: str | None = None) -> Any:
        """A float constant uniform in [-scale, scale] (a splat now and then)."""
        from tessel.ir.types import ELEMENT_TYPES

        np_dtype = ELEMENT_TYPES[dtype or self.dtype]
        if self.chance(15):
            return self.const(np.full(tuple(shape), self.rng.uniform(-scale, scale), np_dtype))
        return self.const(self.rng.uniform(-scale, scale, tuple(shape)).astype(np_dtype))

    def scalar(self, value: float, like: Any) -> Any:
        """A rank-0 constant of `like`'s element type (None when `like` is: a chain that stopped)."""
        from tessel.ir.types import ELEMENT_TYPES

        return None if like is None else self.const(np.array(value, ELEMENT_TYPES[like.type.dtype]))

    def tame(self, x: Any, limit: float = 4.0) -> Any:
        """`x`, or tanh(x) when its magnitude bound exceeds `limit`."""
        if self.scale.get(id(x), 1.0) <= limit:
            return x
        return self.one("tanh", [x], scale=1.0)

    def positive(self, x: Any) -> Any:
        """|x| + 1: an operand for log, sqrt, reciprocal and a denominator."""
        if x is None:
            return None
        a = self.one("abs", [x], exact=id(x) in self.exact)
        return self.one("add", [a, self.scalar(1.0, x)], scale=self.scale.get(id(x), 1.0) + 1)

    def partner_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """A shape that broadcasts with `shape`: the same, a suffix, size-1 dims or a scalar."""
        kind = self.choice(["same", "same", "suffix", "ones", "scalar"])
        if kind == "scalar" or not shape:
            return ()
        if kind == "suffix":
            return shape[self.integer(0, len(shape)):]
        if kind == "ones":
            return tuple(1 if self.chance(50) else d for d in shape)
        return shape

    def finish(self) -> ModuleCase:
        from tessel.ir.core import Module, Op
        from tessel.ir.printer import to_text
        from tessel.ir.verifier import verify

        made = [v for v in self.values if v.op is not None and v.op.name != "const"]
        if not made and not self.pinned:
            made = [self.one("neg", [self.func.args[0]], exact=True)]
        outs = [*self.pinned, *made[-1:]]
        unused = [v for v in made[:-1] if not v.uses and v.op is not made[-1].op]
        for v in unused[-3:]:
            if self.chance(70):
                outs.insert(0, v)
        self.func.block.append(Op("return", outs))
        for op in reversed(list(self.func.block.ops)):  # no dead ops: a pass that erases them "changes"
            if op.name != "return" and all(not r.uses for r in op.results):
                op.erase()
        self.func.result_types = [v.type for v in outs]
        self.func.result_attrs = [{} for _ in outs]
        module = Module(name="fuzz", funcs=[self.func])
        errors = verify(module)
        assert not errors, f"generator bug: {errors[0]}"
        ops = [op.name for op in self.func.block.ops if op.name not in ("const", "return")]
        return ModuleCase(to_text(module), ops)


@st.composite
def modules(draw: Callable[[st.SearchStrategy[Any]], Any], max_steps: int = 10,
            ops: Sequence[str] | None = None) -> ModuleCase:
    """A random valid module; `ops` restricts the makers to some names (module_ops.MAKERS: registry op
    names, and module_patterns.py's pattern names)."""
    from .module_ops import all_makers

    makers = all_makers()

    seed = draw(st.integers(0, 2**32 - 1))
    dtype = draw(st.sampled_from(["f32"] * 5 + ["f16"]))
    b = ModuleBuilder(draw, seed, draw(st.integers(1, 3)), dtype)
    names = sorted(n for n in makers if ops is None or n in ops)
    for _ in range(draw(st.integers(1, max_steps))):
        makers[b.choice(names)](b)
    return b.finish()
