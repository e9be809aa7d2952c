"""Property tests over random valid modules: print -> parse -> print is byte-identical, and the -O1
passes (canonicalize, fold-constants, cse, dce) preserve what the numpy reference computes. A few ops
only, fast; tests/fuzz/modules.py builds modules from the whole op registry and module_check.py runs
every pass and pipeline over them under validation (tests/fuzz/test_fuzz_modules.py, `make fuzz`)."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tessel.ir.attributes import DenseAttr
from tessel.ir.core import Func, Module, Op, Value
from tessel.ir.interpreter import random_inputs, run_func
from tessel.ir.ops.registry import get_op
from tessel.ir.parser import parse_module
from tessel.ir.printer import to_text
from tessel.ir.types import TensorType
from tessel.ir.verifier import verify
from tessel.passes.manager import PassManager
from tessel.passes.pipeline import O_LEVELS, parse_pipeline

SHAPES = [(), (4,), (3, 4), (2, 3, 4), (1, 4), (3, 1)]
UNARY = ["relu", "neg", "abs", "tanh", "sigmoid", "identity", "exp"]
BINARY = ["add", "sub", "mul", "max", "min"]


class Builder:
    def __init__(self, draw, n_args: int):
        self.draw = draw
        arg_types = [TensorType(draw(st.sampled_from(SHAPES)), "f32") for _ in range(n_args)]
        self.func = Func.new("main", arg_types, [f"arg{i}" for i in range(n_args)], [])
        self.values: list[Value] = list(self.func.args)

    def add(self, name: str, operands: list[Value], attrs: dict | None = None) -> Value:
        opdef = get_op(name)
        assert opdef is not None
        types = opdef.infer(opdef.sig([v.type for v in operands], attrs or {}))
        op = Op(name, operands, types, attrs, loc=(f"test:{name}_{len(self.func.block.ops)}",))
        self.func.block.append(op)
        self.values.append(op.result)
        return op.result

    def const(self, shape: tuple[int, ...]) -> Value:
        kind = self.draw(st.sampled_from(["splat", "zero", "zero", "one", "one", "literal"]))
        t = TensorType(shape, "f32")
        if kind == "literal":
            data = np.array(
                self.draw(st.lists(st.floats(-2, 2, width=32), min_size=t.numel, max_size=t.numel)),
                dtype=np.float32,
            ).reshape(shape)
            attr = DenseAttr(t, data)
        else:
            fixed = {"zero": 0.0, "one": 1.0}
            v = fixed[kind] if kind in fixed else self.draw(st.floats(-2, 2, width=32))
            attr = DenseAttr.splat(v, t)
        return self.add("const", [], {"value": attr})

    def pick(self) -> Value:
        return self.draw(st.sampled_from(self.values))

    def step(self) -> None:
        kind = self.draw(st.sampled_from(["unary", "binary", "binary_const", "binary_const", "binary_const",
                                          "transpose", "reshape", "reduce", "duplicate"]))
        x = self.pick()
        if kind == "unary":
            name = self.draw(st.sampled_from(UNARY))
            if name == "exp":
                x = self.add("tanh", [x])
            self.add(name, [x])
        elif kind in ("binary", "binary_const"):
            name = self.draw(st.sampled_from(BINARY))
            y = self.const(x.type.shape[self.draw(st.integers(0, len(x.type.shape))):]) \
                if kind == "binary_const" else self.pick()
            try:
                get_op(name).infer(get_op(name).sig([x.type, y.type], {}))  # type: ignore[union-attr]
            except Exception:
                return  # shapes that don't broadcast: skip
            order = [x, y] if self.draw(st.booleans()) else [y, x]
            self.add(name, order)
        elif kind == "transpose" and x.type.rank >= 2:
            perm = self.draw(st.permutations(range(x.type.rank)))
            t = self.add("transpose", [x], {"perm": list(perm)})
            if self.draw(st.booleans()):
                self.add("transpose", [t], {"perm": [list(perm).index(i) for i in range(len(perm))]})
        elif kind == "reshape":
            n = x.type.numel
            shape = self.draw(st.sampled_from([[n], [1, n], [n, 1], [-1]]))
            r = self.add("reshape", [x], {"shape": shape})
            if self.draw(st.booleans()):
                self.add("reshape", [r], {"shape": list(x.type.shape)})
        elif kind == "reduce" and x.type.rank >= 1:
            axis = self.draw(st.integers(0, x.type.rank - 1))
            self.add("reduce_sum", [x], {"axes": [axis], "keepdims": self.draw(st.booleans())})
        elif kind == "duplicate" and x.op is not None and x.op.name != "const":
            op = x.op
            self.add(op.name, list(op.operands), dict(op.attrs))

    def finish(self) -> Module:
        outs = [self.values[-1]] + self.draw(st.lists(st.sampled_from(self.values), max_size=2))
        self.func.block.append(Op("return", outs))
        self.func.result_types = [v.type for v in outs]
        self.func.result_attrs = [{} for _ in outs]
        return Module(name="random", funcs=[self.func])


@st.composite
def modules(draw) -> Module:
    b = Builder(draw, draw(st.integers(1, 3)))
    for _ in range(draw(st.integers(1, 12))):
        b.step()
    return b.finish()


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(modules())
def test_print_parse_print_is_identical(m: Module) -> None:
    assert verify(m) == []
    first = to_text(m)
    second = to_text(parse_module(first, "<first>"))
    assert first == second


@SETTINGS
@given(modules(), st.integers(0, 3))
def test_o1_passes_preserve_numpy_results(m: Module, level: int) -> None:
    text = to_text(m)
    before = parse_module(text)
    after = parse_module(text)
    PassManager(parse_pipeline(O_LEVELS[level])).run(after)
    assert verify(after) == []
    inputs = random_inputs(before.funcs[0], seed=3)
    args = [inputs[k] for k in inputs]
    want = run_func(before, before.funcs[0], args)
    got = run_func(after, after.funcs[0], args)
    for w, g in zip(want, got, strict=True):
        assert w.shape == g.shape and w.dtype == g.dtype
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    # and the optimized module itself round-trips
    assert to_text(parse_module(to_text(after))) == to_text(after)
