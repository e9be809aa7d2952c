"""Elementwise, comparison and logical ops (ir/ops/elementwise.py, ir/ops/compare.py) against onnxruntime.

Every op those two files register is checked here (`test_every_op_is_covered` keeps it so): random values in
several shapes, broadcasting (rank 0, (3,1) vs (1,4), rank growth, empty dims), edge values (zeros,
negatives, large magnitudes, inf and nan) and the element types onnxruntime has kernels for. A dtype
onnxruntime's CPU provider has no kernel for is skipped, not failed. The second half checks that `infer`
rejects bad operands with `OpError`.
"""

from __future__ import annotations

import ast
import math
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto
from onnxruntime.capi.onnxruntime_pybind11_state import NotImplemented as OrtNotImplemented
from tessel.ir.ops.registry import OpError, get_op
from tessel.ir.types import TensorType
from tessel.tests.numeric.ort_util import check_op

F32, F16, F64, I8, U8, I32, I64, B = (np.dtype(t) for t in
                                      (np.float32, np.float16, np.float64, np.int8, np.uint8, np.int32,
                                       np.int64, np.bool_))
FLOATS = (F32, F16, F64)
INTS = (I32, I64)
NUMERIC = FLOATS + INTS
INF, NAN = math.inf, math.nan

# tolerances by dtype: f16 results may differ by an ulp or two where one side computes in f32 and rounds
TOL = {F32: (1e-5, 1e-6), F16: (4e-3, 1e-3), F64: (1e-10, 1e-12)}


def ort_check(*args: Any, dtype: np.dtype | None = None, rtol: float | None = None, atol: float | None = None,
              **kwargs: Any) -> None:
    """`check_op`, with the dtype's tolerance, skipping where onnxruntime has no kernel for the dtype."""
    if dtype is not None and dtype in TOL:
        dr, da = TOL[dtype]
        kwargs["rtol"] = max(rtol or 0.0, dr)
        kwargs["atol"] = max(atol or 0.0, da)
    else:
        if rtol is not None:
            kwargs["rtol"] = rtol
        if atol is not None:
            kwargs["atol"] = atol
    try:
        check_op(*args, **kwargs)
    except OrtNotImplemented as e:
        pytest.skip(f"onnxruntime has no CPU kernel: {str(e).splitlines()[0][:160]}")


def rng(*key: Any) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(repr(key).encode()))  # not hash(): it changes per process


def values(dtype: np.dtype, shape: tuple[int, ...], low: float, high: float, *key: Any) -> np.ndarray:
    g = rng(dtype.str, shape, low, high, *key)
    if dtype == B:
        return g.integers(0, 2, shape).astype(B)
    if dtype.kind in "iu":
        return g.integers(int(low), int(high) + 1, shape).astype(dtype)
    return g.uniform(low, high, shape).astype(dtype)


def ids(x: Any) -> str:
    if isinstance(x, np.dtype):
        return x.name
    if isinstance(x, tuple):
        return "x".join(map(str, x)) or "scalar"
    return str(x)


# ------------------------------------------------------------------------------------------------- unary
@dataclass(frozen=True)
class Unary:
    name: str
    onnx: str
    dtypes: tuple[np.dtype, ...] = FLOATS
    attrs: dict = field(default_factory=dict)  # tessel's attributes
    onnx_attrs: dict = field(default_factory=dict)
    opset: int = 18
    low: float = -4.0
    high: float = 4.0
    edges: tuple[float, ...] | None = None  # None: the common FLOAT_EDGES
    rtol: float = 0.0
    atol: float = 0.0
    f64_tol: float = 0.0  # looser f64 rtol and atol where onnxruntime's double kernel uses f32 constants
    drop_edges: Any = None  # (dtype, value) -> True to leave an edge value out
    tag: str = ""

    @property
    def id(self) -> str:
        return self.name + (f"[{self.tag}]" if self.tag else "")


FLOAT_EDGES = (0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 1e-3, -1e-3, 3.0, -3.0, 6.0, -6.0,
               20.0, -20.0, 100.0, -100.0, 1e4, -1e4, 6e4, -6e4, INF, -INF, NAN)
TRIG_EDGES = (0.0, -0.0, 1.0, -1.0, 3.0, -3.0, 20.0, -20.0, INF, -INF, NAN)
INT_EDGES = (0, 1, -1, 2, -2, 7, -7, 100, -100, 12345, -12345)

UNARY = [
    Unary("neg", "Neg", NUMERIC + (I8,)),
    Unary("abs", "Abs", NUMERIC + (I8, U8)),
    # onnxruntime's f16 Sign gives 0 for nan (its f32 and f64 kernels give nan)
    Unary("sign", "Sign", NUMERIC + (I8, U8), drop_edges=lambda dt, v: dt == F16 and math.isnan(v)),
    Unary("sqrt", "Sqrt", low=0.0, high=100.0),
    Unary("reciprocal", "Reciprocal", low=0.1, high=10.0),
    Unary("exp", "Exp", low=-10.0, high=10.0),
    Unary("log", "Log", low=1e-3, high=100.0),
    Unary("tanh", "Tanh"),
    # large arguments are left out of sin/cos: how far each library reduces the range is its own choice
    Unary("sin", "Sin", low=-10.0, high=10.0, edges=TRIG_EDGES),
    Unary("cos", "Cos", low=-10.0, high=10.0, edges=TRIG_EDGES),
    Unary("floor", "Floor", low=-10.0, high=10.0),
    Unary("ceil", "Ceil", low=-10.0, high=10.0),
    Unary("round", "Round", low=-10.0, high=10.0,
          edges=FLOAT_EDGES + (0.49999997, -0.49999997, 3.5, -3.5, 4.5, -4.5, 1e7 + 0.5)),
    Unary("erf", "Erf", atol=1e-6),
    Unary("sigmoid", "Sigmoid", low=-10.0, high=10.0),
    Unary("relu", "Relu", FLOATS + (I8, I32, I64)),
    # ONNX float attributes are f32; onnxruntime's double kernels compute with the f32 value (0.01f ...),
    # tessel with the f64 one: they differ by ~1e-8 relative in f64
    Unary("leaky_relu", "LeakyRelu", f64_tol=1e-7),
    Unary("leaky_relu", "LeakyRelu", attrs={"alpha": 0.2}, onnx_attrs={"alpha": 0.2}, tag="alpha=0.2",
          f64_tol=1e-7),
    Unary("elu", "Elu"),
    Unary("elu", "Elu", attrs={"alpha": 0.5}, onnx_attrs={"alpha": 0.5}, tag="alpha=0.5"),
    Unary("selu", "Selu", f64_tol=1e-7),
    Unary("selu", "Selu", attrs={"alpha": 2.0, "gamma": 0.5}, onnx_attrs={"alpha": 2.0, "gamma": 0.5},
          tag="alpha=2,gamma=0.5"),
    # onnxruntime's f16 and f64 Softplus compute log(1 + e^x) directly, which overflows to inf for large x
    # (softplus(1e4) is 1e4; its f32 kernel and tessel get that right)
    Unary("softplus", "Softplus", low=-20.0, high=20.0,
          drop_edges=lambda dt, v: dt != F32 and math.isfinite(v) and v >= 100),
    Unary("softsign", "Softsign"),
    Unary("hard_sigmoid", "HardSigmoid", f64_tol=1e-7),
    Unary("hard_sigmoid", "HardSigmoid", attrs={"alpha": 0.3, "beta": 0.4},
          onnx_attrs={"alpha": 0.3, "beta": 0.4}, tag="alpha=0.3,beta=0.4", f64_tol=1e-7),
    Unary("hard_swish", "HardSwish", low=-8.0, high=8.0, f64_tol=3e-7),  # alpha = 1/6 in f32
    Unary("mish", "Mish", low=-10.0, high=10.0),
    Unary("gelu", "Gelu", opset=20),
    Unary("gelu", "Gelu", opset=20, attrs={"approximate": "tanh"}, onnx_attrs={"approximate": "tanh"},
          tag="tanh", atol=1e-6),
]

UNARY_CASES = [pytest.param(u, dt, id=f"{u.id}-{dt.name}") for u in UNARY for dt in u.dtypes]
SHAPES = [(), (7,), (2, 3, 4), (0, 3)]


def _unary_input(u: Unary, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    if dtype.kind in "iu":
        lo = 0 if dtype.kind == "u" else -50
        return values(dtype, shape, lo, 50, u.name)
    return values(dtype, shape, u.low, u.high, u.name)


def _unary_check(u: Unary, x: np.ndarray) -> None:
    f64_tol = u.f64_tol if x.dtype == F64 else 0.0
    rtol, atol = max(u.rtol, f64_tol), max(u.atol, f64_tol)
    ort_check(u.onnx, u.name, [x], onnx_attrs=u.onnx_attrs, attrs=u.attrs, opset=u.opset, dtype=x.dtype,
              rtol=rtol or None, atol=atol or None)


@pytest.mark.parametrize("shape", SHAPES, ids=ids)
@pytest.mark.parametrize(("u", "dtype"), UNARY_CASES)
def test_unary(u: Unary, dtype: np.dtype, shape: tuple[int, ...]) -> None:
    _unary_check(u, _unary_input(u, dtype, shape))


@pytest.mark.parametrize(("u", "dtype"), UNARY_CASES)
def test_unary_edges(u: Unary, dtype: np.dtype) -> None:
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        edges = [v for v in INT_EDGES if info.min <= v <= info.max]
        # the extremes, but not -min (it overflows, and neg/abs of it is left to the two's complement)
        edges += [info.max, info.min + 1] + ([info.min] if u.name in ("sign", "relu") else [])
    else:
        edges = list(u.edges if u.edges is not None else FLOAT_EDGES)
        if dtype == F16:
            edges = [v for v in edges if not (math.isfinite(v) and abs(v) > 6e4)]
        if u.drop_edges is not None:
            edges = [v for v in edges if not u.drop_edges(dtype, v)]
    x = np.array(edges).astype(dtype).reshape(-1, 1)
    _unary_check(u, x)


# ----------------------------------------------------------------------------------------------- clip
CLIP_BOUNDS = [(-1.0, 1.0), (0.0, INF), (-INF, 2.5), (-2.0, -2.0), (0.5, 6.0)]


CLIP_CASES = [pytest.param(dt, bounds, id=f"{dt.name}-{ids(bounds)}") for dt in FLOATS + (I8, U8, I32, I64)
              for bounds in CLIP_BOUNDS if not (dt == U8 and bounds[0] < 0)]


@pytest.mark.parametrize("shape", [(), (3, 5)], ids=ids)
@pytest.mark.parametrize(("dtype", "bounds"), CLIP_CASES)
def test_clip(dtype: np.dtype, bounds: tuple[float, float], shape: tuple[int, ...]) -> None:
    lo, hi = bounds
    if dtype.kind in "iu":
        x = values(dtype, shape, 0 if dtype.kind == "u" else -10, 10, "clip")
        lo_a = None if math.isinf(lo) else np.array(int(lo), dtype)
        hi_a = None if math.isinf(hi) else np.array(int(hi), dtype)
    else:
        x = values(dtype, shape, -8.0, 8.0, "clip")
        if shape:
            x.flat[:3] = [INF, -INF, NAN]
        lo_a = None if math.isinf(lo) else np.array(lo, dtype)
        hi_a = None if math.isinf(hi) else np.array(hi, dtype)
    attrs = {k: v for k, v in (("min", lo), ("max", hi)) if not math.isinf(v)}
    ort_check("Clip", "clip", [x, lo_a, hi_a], attrs=attrs, tessel_inputs=[x], dtype=dtype)


# ------------------------------------------------------------------------------------------------ cast
ONNX_DTYPE = {F32: TensorProto.FLOAT, F16: TensorProto.FLOAT16, F64: TensorProto.DOUBLE, I8: TensorProto.INT8,
              U8: TensorProto.UINT8, I32: TensorProto.INT32, I64: TensorProto.INT64, B: TensorProto.BOOL}
TESSEL_DTYPE = {F32: "f32", F16: "f16", F64: "f64", I8: "i8", U8: "ui8", I32: "i32", I64: "i64", B: "i1"}
ALL_DTYPES = tuple(ONNX_DTYPE)


def _cast_input(src: np.dtype, dst: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """Values whose conversion ONNX defines: float to int only in the target's range (it truncates)."""
    if src == B:
        return values(B, shape, 0, 1, "cast")
    if src.kind == "f":
        if dst.kind in "iu":
            lo, hi = (0.0, 250.0) if dst == U8 else (-120.0, 120.0)
            x = values(src, shape, lo, hi, "cast", dst.str)
            if shape:  # fractions truncate toward zero
                x.flat[:4] = [0.0, 0.5, 0.999, 2.5] if dst == U8 else [-0.5, -1.7, 1.7, -0.0]
            return x
        x = values(src, shape, -100.0, 100.0, "cast", dst.str)
        if shape and x.size >= 8:  # 1e5 overflows f16 to inf; nan to bool is left open
            big = 6e4 if src == F16 else 1e5
            nan = NAN if dst != B else 2.0
            x.flat[:8] = np.array([0.0, -0.0, 1e-3, INF, -INF, nan, big, 1e-8]).astype(src)
        return x
    # integers: values every target holds
    lo = 0 if dst == U8 or src == U8 else -100
    return values(src, shape, lo, 100, "cast", dst.str)


CAST_CASES = [pytest.param(s, d, id=f"{s.name}->{d.name}") for s in ALL_DTYPES for d in ALL_DTYPES]


@pytest.mark.parametrize("shape", [(), (3, 4)], ids=ids)
@pytest.mark.parametrize(("src", "dst"), CAST_CASES)
def test_cast(src: np.dtype, dst: np.dtype, shape: tuple[int, ...]) -> None:
    x = _cast_input(src, dst, shape)
    ort_check("Cast", "cast", [x], onnx_attrs={"to": ONNX_DTYPE[dst]}, attrs={"to": TESSEL_DTYPE[dst]},
              dtype=dst, opset=19)


# ---------------------------------------------------------------------------------------------- binary
@dataclass(frozen=True)
class Binary:
    name: str
    onnx: str
    dtypes: tuple[np.dtype, ...] = NUMERIC
    onnx_attrs: dict = field(default_factory=dict)
    opset: int = 18
    low: float = -4.0
    high: float = 4.0
    rhs_low: float | None = None  # None: same as low/high
    rhs_high: float | None = None
    int_rhs_nonzero: bool = False  # integer division by zero is undefined (onnxruntime traps)
    int_edges_small: bool = False  # keep integer edges small where the op would overflow


BINARY = [
    Binary("add", "Add"),
    Binary("sub", "Sub"),
    Binary("mul", "Mul", int_edges_small=True),
    Binary("div", "Div", rhs_low=0.5, rhs_high=4.0, int_rhs_nonzero=True),
    Binary("pow", "Pow", low=0.1, high=4.0, rhs_low=-3.0, rhs_high=3.0, int_edges_small=True),
    Binary("max", "Max"),
    Binary("min", "Min"),
    Binary("prelu", "PRelu", low=-4.0, high=4.0, rhs_low=0.0, rhs_high=1.0),
    Binary("mod", "Mod", onnx_attrs={"fmod": 1}, rhs_low=0.5, rhs_high=4.0, int_rhs_nonzero=True),
]

# pairs of operand shapes: equal, rank 0 each side, (3,1) vs (1,4), rank growth both ways, empty
BINARY_SHAPES = [
    ((2, 3, 4), (2, 3, 4)),
    ((), ()),
    ((3, 4), ()),
    ((), (3, 4)),
    ((3, 1), (1, 4)),
    ((4,), (2, 3, 4)),
    ((2, 3, 4), (3, 1)),
    ((2, 1, 4), (5, 1)),
    ((0, 3), (3,)),
]
# PRelu's slope broadcasts to X's shape only (unidirectional)
PRELU_SHAPES = [((2, 3, 4), (2, 3, 4)), ((3, 4), ()), ((2, 3, 4), (3, 1)), ((2, 3, 4), (4,)), ((), ()),
                ((0, 3), (3,))]

BINARY_CASES = [pytest.param(b, dt, id=f"{b.name}-{dt.name}") for b in BINARY for dt in b.dtypes]
BINARY_SHAPE_CASES = [pytest.param(b, dt, shapes, id=f"{b.name}-{dt.name}-{ids(shapes[0])}-{ids(shapes[1])}")
                      for b in BINARY for dt in b.dtypes
                      for shapes in (PRELU_SHAPES if b.name == "prelu" else BINARY_SHAPES)]


def _binary_inputs(b: Binary, dtype: np.dtype, sa: tuple[int, ...], sb: tuple[int, ...]) -> list[np.ndarray]:
    if dtype.kind in "iu":
        lo, hi = (-3, 3) if b.name == "pow" else (-50, 50)
        a = values(dtype, sa, lo, hi, b.name, "a")
        if b.name == "pow":
            r = values(dtype, sb, 0, 4, b.name, "b")  # negative integer exponents: ONNX leaves them open
        else:
            r = values(dtype, sb, -9, 9, b.name, "b")
        if b.int_rhs_nonzero:
            r = np.where(r == 0, np.array(3, dtype), r).astype(dtype)
        return [a, r]
    rl = b.low if b.rhs_low is None else b.rhs_low
    rh = b.high if b.rhs_high is None else b.rhs_high
    a = values(dtype, sa, b.low, b.high, b.name, "a")
    r = values(dtype, sb, rl, rh, b.name, "b")
    if b.name in ("div", "mod") and r.size:  # negative divisors too
        r = np.asarray(r * np.where(values(B, sb, 0, 1, b.name, "s"), 1, -1).astype(dtype))
    return [a, r]


@pytest.mark.parametrize(("b", "dtype", "shapes"), BINARY_SHAPE_CASES)
def test_binary(b: Binary, dtype: np.dtype, shapes: tuple[tuple[int, ...], tuple[int, ...]]) -> None:
    sa, sb = shapes
    a, r = _binary_inputs(b, dtype, sa, sb)
    ort_check(b.onnx, b.name, [a, r], onnx_attrs=b.onnx_attrs, opset=b.opset, dtype=dtype,
              rtol=1e-5 if b.name == "pow" else None)


@pytest.mark.parametrize("shapes", PRELU_SHAPES[2:4], ids=lambda s: f"{ids(s[0])}-{ids(s[1])}")
def test_prelu_negative_slope(shapes: tuple[tuple[int, ...], tuple[int, ...]]) -> None:
    x = values(F32, shapes[0], -4, 4, "prelu-x")
    slope = values(F32, shapes[1], -2, 2, "prelu-s")
    ort_check("PRelu", "prelu", [x, slope], dtype=F32)


BINARY_FLOAT_EDGES = (0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, -3.0, 1e4, -1e4, INF, -INF, NAN)


@pytest.mark.parametrize(("b", "dtype"), BINARY_CASES)
def test_binary_edges(b: Binary, dtype: np.dtype) -> None:
    """Every pair of edge values, as a (n,1) x (1,n) broadcast."""
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        if b.name == "pow":
            a_vals, b_vals = [0, 1, -1, 2, -2, 3, -3, 10, -10], [0, 1, 2, 3, 5]
        else:
            a_vals = list(INT_EDGES)
            if not b.int_edges_small:
                a_vals += [info.max // 4, info.min // 4]
            b_vals = list(a_vals)
            if b.int_rhs_nonzero:
                b_vals = [v for v in b_vals if v != 0]
                a_vals += [info.max, info.min + 1]
        a = np.array(a_vals, dtype).reshape(-1, 1)
        r = np.array(b_vals, dtype).reshape(1, -1)
    else:
        a_vals = list(BINARY_FLOAT_EDGES)
        if dtype == F16 and b.name in ("mul", "pow"):
            a_vals = [v for v in a_vals if not (math.isfinite(v) and abs(v) > 100)]
        a = np.array(a_vals).astype(dtype).reshape(-1, 1)
        r = a.reshape(1, -1)
    ort_check(b.onnx, b.name, [a, r], onnx_attrs=b.onnx_attrs, opset=b.opset, dtype=dtype)


@pytest.mark.parametrize("dtype", FLOATS, ids=ids)
def test_pow_float_edges(dtype: np.dtype) -> None:
    """Negative bases with integral exponents, 0 to negative powers, 1 to nan, nan to 0."""
    a = np.array([-2.0, -2.0, -2.0, -0.5, 0.0, 0.0, -0.0, 1.0, NAN, -1.0, -8.0, 2.0, 10.0]).astype(dtype)
    r = np.array([2.0, 3.0, -1.0, 0.5, -1.0, 0.0, -3.0, NAN, 0.0, INF, 1 / 3, 0.5, -2.0]).astype(dtype)
    ort_check("Pow", "pow", [a, r], dtype=dtype)


# ------------------------------------------------------------------------------------------ comparisons
COMPARISONS = [("equal", "Equal"), ("less", "Less"), ("less_equal", "LessOrEqual"), ("greater", "Greater"),
               ("greater_equal", "GreaterOrEqual")]
COMPARE_CASES = [pytest.param(n, o, dt, id=f"{n}-{dt.name}") for n, o in COMPARISONS
                 for dt in NUMERIC + (I8, U8) + ((B,) if n == "equal" else ())]


@pytest.mark.parametrize("shapes", BINARY_SHAPES, ids=lambda s: f"{ids(s[0])}-{ids(s[1])}")
@pytest.mark.parametrize(("name", "onnx_op", "dtype"), COMPARE_CASES)
def test_compare(name: str, onnx_op: str, dtype: np.dtype,
                 shapes: tuple[tuple[int, ...], tuple[int, ...]]) -> None:
    sa, sb = shapes
    # few distinct values, so that ties (where < and <= differ) are common
    if dtype.kind == "f":
        a = np.asarray(np.round(values(dtype, sa, -3, 3, name, "a")))
        r = np.asarray(np.round(values(dtype, sb, -3, 3, name, "b")))
    else:
        lo = 0 if dtype.kind in "ub" else -3
        a, r = values(dtype, sa, lo, 3, name, "a"), values(dtype, sb, lo, 3, name, "b")
    ort_check(onnx_op, name, [a, r])


@pytest.mark.parametrize(("name", "onnx_op", "dtype"), COMPARE_CASES)
def test_compare_edges(name: str, onnx_op: str, dtype: np.dtype) -> None:
    if dtype == B:
        vals: list[Any] = [False, True]
    elif dtype.kind in "iu":
        info = np.iinfo(dtype)
        vals = [info.min, info.min + 1, -1, 0, 1, info.max - 1, info.max]
        vals = [v for v in vals if info.min <= v <= info.max]
    else:
        vals = [-INF, -1e4, -1.0, -0.0, 0.0, 1e-3, 1.0, 1e4, INF, NAN]
    a = np.array(vals).astype(dtype).reshape(-1, 1)
    ort_check(onnx_op, name, [a, a.reshape(1, -1)])


# ------------------------------------------------------------------------------------------ logical ops
LOGICAL = [("and", "And"), ("or", "Or"), ("xor", "Xor")]


@pytest.mark.parametrize("shapes", BINARY_SHAPES, ids=lambda s: f"{ids(s[0])}-{ids(s[1])}")
@pytest.mark.parametrize(("name", "onnx_op"), LOGICAL, ids=[n for n, _ in LOGICAL])
def test_logical(name: str, onnx_op: str, shapes: tuple[tuple[int, ...], tuple[int, ...]]) -> None:
    a = values(B, shapes[0], 0, 1, name, "a")
    r = values(B, shapes[1], 0, 1, name, "b")
    ort_check(onnx_op, name, [a, r])


@pytest.mark.parametrize(("name", "onnx_op"), LOGICAL, ids=[n for n, _ in LOGICAL])
def test_logical_truth_table(name: str, onnx_op: str) -> None:
    a = np.array([[False], [True]])
    ort_check(onnx_op, name, [a, a.reshape(1, 2)])


@pytest.mark.parametrize("shape", SHAPES, ids=ids)
def test_not(shape: tuple[int, ...]) -> None:
    ort_check("Not", "not", [values(B, shape, 0, 1, "not")])


# ---------------------------------------------------------------------------------------------- where
WHERE_SHAPES = [
    ((2, 3, 4), (2, 3, 4), (2, 3, 4)),
    ((), (), ()),
    ((3, 4), (), ()),
    ((), (3, 4), (3, 4)),
    ((3, 1), (1, 4), ()),
    ((4,), (3, 1), (2, 1, 1)),
    ((2, 1, 4), (3, 1), (4,)),
    ((0, 3), (3,), (1, 3)),
]


@pytest.mark.parametrize("shapes", WHERE_SHAPES, ids=lambda s: "-".join(ids(x) for x in s))
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=ids)
def test_where(dtype: np.dtype, shapes: tuple[tuple[int, ...], ...]) -> None:
    sc, sx, sy = shapes
    c = values(B, sc, 0, 1, "where-c")
    lo = 0 if dtype.kind in "ub" else -9
    x, y = values(dtype, sx, lo, 9, "where-x"), values(dtype, sy, lo, 9, "where-y")
    if dtype.kind == "f" and x.size >= 2:
        x.flat[:2] = [NAN, INF]
    ort_check("Where", "where", [c, x, y])


# ------------------------------------------------------------------------------------------- coverage
def _registered_names(path: Path) -> set[str]:
    """The op names a family file registers: the first argument of each factory or `OpDef(...)` call."""
    factories = {"unary", "binary", "comparison", "logical", "OpDef"}
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args):
            continue
        first = node.args[0]
        if node.func.id in factories and isinstance(first, ast.Constant) and isinstance(first.value, str):
            names.add(first.value)
    return names


def test_every_op_is_covered() -> None:
    ops_dir = Path(__file__).resolve().parents[2] / "ir" / "ops"
    registered = _registered_names(ops_dir / "elementwise.py") | _registered_names(ops_dir / "compare.py")
    covered = ({u.name for u in UNARY} | {b.name for b in BINARY} | {n for n, _ in COMPARISONS}
               | {n for n, _ in LOGICAL} | {"clip", "cast", "not", "where"})
    assert registered, "found no registrations"
    assert registered - covered == set(), "ops without an onnxruntime check"
    assert covered - registered == set(), "checks for ops that are not registered"
    for name in registered:
        assert get_op(name) is not None, name


# ------------------------------------------------------------------------------------- infer rejects
def _infer(name: str, types: list[TensorType], attrs: dict | None = None) -> list[TensorType]:
    opdef = get_op(name)
    assert opdef is not None, name
    return opdef.infer(opdef.sig(types, attrs or {}))


def T(shape: tuple[int | None, ...], dtype: str = "f32") -> TensorType:  # noqa: N802
    return TensorType(shape, dtype)


BINARY_OPS = [b.name for b in BINARY] + [n for n, _ in COMPARISONS]


@pytest.mark.parametrize("name", BINARY_OPS)
def test_reject_mixed_element_types(name: str) -> None:
    with pytest.raises(OpError, match="element types differ"):
        _infer(name, [T((3,)), T((3,), "i32")])
    with pytest.raises(OpError, match="element types differ"):
        _infer(name, [T((3,), "f16"), T((3,), "f32")])


@pytest.mark.parametrize("name", BINARY_OPS + [n for n, _ in LOGICAL])
@pytest.mark.parametrize("shapes", [((3,), (4,)), ((2, 3), (3, 2)), ((5, 1, 4), (2, 3))], ids=str)
def test_reject_non_broadcastable(name: str, shapes: tuple[tuple[int, ...], tuple[int, ...]]) -> None:
    dtype = "i1" if name in ("and", "or", "xor") else "f32"
    with pytest.raises(OpError, match="do not broadcast"):
        _infer(name, [T(shapes[0], dtype), T(shapes[1], dtype)])


def test_where_rejects_non_broadcastable() -> None:
    with pytest.raises(OpError, match="do not broadcast"):
        _infer("where", [T((3,), "i1"), T((4,)), T((4,))])
    with pytest.raises(OpError, match="do not broadcast"):
        _infer("where", [T((2, 1), "i1"), T((3,)), T((4,))])


def test_broadcast_infer_shapes() -> None:
    assert _infer("add", [T(()), T((3, 4))]) == [T((3, 4))]
    assert _infer("mul", [T((3, 1)), T((1, 4))]) == [T((3, 4))]
    assert _infer("sub", [T((4,)), T((2, 3, 1))]) == [T((2, 3, 4))]
    assert _infer("add", [T((None, 1)), T((1, 4))]) == [T((None, 4))]
    assert _infer("less", [T((3, 1)), T((4,))]) == [T((3, 4), "i1")]
    assert _infer("where", [T((3, 1), "i1"), T((4,), "i32"), T((), "i32")]) == [T((3, 4), "i32")]


FLOAT_ONLY = [u.name for u in UNARY if all(d.kind == "f" for d in u.dtypes)]


@pytest.mark.parametrize("name", sorted(set(FLOAT_ONLY)))
@pytest.mark.parametrize("dtype", ["i32", "i64", "i1"])
def test_reject_float_only_on_ints(name: str, dtype: str) -> None:
    with pytest.raises(OpError, match="float"):
        _infer(name, [T((2, 3), dtype)])


@pytest.mark.parametrize("name", ["neg", "abs", "sign", "relu", "clip"])
def test_reject_numeric_unary_on_i1(name: str) -> None:
    with pytest.raises(OpError, match="numeric"):
        _infer(name, [T((2,), "i1")])


@pytest.mark.parametrize("name", [b.name for b in BINARY])
def test_reject_arithmetic_on_i1(name: str) -> None:
    with pytest.raises(OpError, match="numeric"):
        _infer(name, [T((2,), "i1"), T((2,), "i1")])


@pytest.mark.parametrize("to", ["f8", "float32", "int", "", "bool"])
def test_reject_cast_to_unknown_type(to: str) -> None:
    with pytest.raises(OpError, match="element type"):
        _infer("cast", [T((2,))], {"to": to})


@pytest.mark.parametrize("cond", ["f32", "i32", "i64", "ui8"])
def test_reject_where_non_i1_condition(cond: str) -> None:
    with pytest.raises(OpError, match="condition must be an i1"):
        _infer("where", [T((3,), cond), T((3,)), T((3,))])


def test_reject_where_mixed_branches() -> None:
    with pytest.raises(OpError, match="element types differ"):
        _infer("where", [T((3,), "i1"), T((3,)), T((3,), "f64")])


@pytest.mark.parametrize("name", [n for n, _ in LOGICAL])
@pytest.mark.parametrize("dtype", ["f32", "i32"])
def test_reject_logical_non_i1(name: str, dtype: str) -> None:
    with pytest.raises(OpError, match="i1"):
        _infer(name, [T((3,), dtype), T((3,), dtype)])
    with pytest.raises(OpError, match="i1"):
        _infer(name, [T((3,), "i1"), T((3,), dtype)])


@pytest.mark.parametrize("dtype", ["f32", "i32"])
def test_reject_not_non_i1(dtype: str) -> None:
    with pytest.raises(OpError, match="i1"):
        _infer("not", [T((3,), dtype)])
