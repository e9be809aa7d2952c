"""The elementwise templates against the registry references, on the OpenCL device.

Every distinct kernel costs a PoCL build (~0.5 s cold), so op sweeps go through `check_batch`, which builds
many ops' kernels as one program; broadcasting and launch-shape cases use `testing.check_op` one by one.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pytest
from tessel.ir.ops.registry import REGISTRY, get_op
from tessel.ir.types import TensorType
from tessel.targets.opencl import device as dev
from tessel.targets.opencl.kernels.base import Ctx, Lowered, NotLowerable
from tessel.targets.opencl.kernels.elementwise import (
    ERF_MAX,
    ERF_P,
    ERF_Q,
    PHI_TAIL_MAX,
    PHI_TAIL_P,
    PHI_TAIL_Q,
    RULES,
    expr,
    vectorizable,
)
from tessel.targets.opencl.kernels.testing import build, check_op, lower_op, run_op

Case = tuple[str, list[np.ndarray], dict[str, Any]]
rng = np.random.default_rng(7)

SPECIALS = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, 2.5, -2.5, 1e-4, -30.0, 30.0])
UNARY_FLOAT = [
    "neg",
    "abs",
    "sign",
    "relu",
    "sqrt",
    "exp",
    "log",
    "tanh",
    "sin",
    "cos",
    "tan",
    "atan",
    "sinh",
    "cosh",
    "asinh",
    "floor",
    "ceil",
    "round",
    "erf",
    "reciprocal",
    "sigmoid",
    "softplus",
    "softsign",
    "hard_swish",
    "mish",
    "identity",
    "is_nan",
]
DOMAIN = {"asin": (-1, 1), "acos": (-1, 1), "atanh": (-0.99, 0.99), "acosh": (1, 10)}
WITH_ATTRS: list[tuple[str, dict[str, Any]]] = [
    ("leaky_relu", {"alpha": 0.1}),
    ("elu", {"alpha": 0.7}),
    ("selu", {}),
    ("hard_sigmoid", {}),
    ("gelu", {"approximate": "none"}),
    ("gelu", {"approximate": "tanh"}),
    ("clip", {"min": -1.5, "max": 2.0}),
    ("clip", {}),
    ("clip", {"max": 0.25}),
]
INTS = ["i8", "i16", "i32", "i64", "ui8", "ui16", "ui32", "ui64"]


def check_batch(cases: list[Case], rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """`check_op` for many ops at once: their kernels build as one program, then each runs and is compared
    with its reference."""
    cl = dev.cl()
    device = dev.pick_device()
    info, context = dev.device_info(device), dev.context_for(device)
    queue = cl.CommandQueue(context)
    lowered = [lower_op(op, [TensorType.of(x) for x in xs], attrs, info=info) for op, xs, attrs in cases]
    kernels = build(Lowered([k for _, low in lowered for k in low.kernels]), context, info)
    mf = cl.mem_flags
    for (op, xs, attrs), (ctx, low), kobj in zip(cases, lowered, kernels, strict=True):
        ins = [
            cl.Buffer(context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=np.ascontiguousarray(x))
            if x.nbytes
            else cl.Buffer(context, mf.READ_ONLY, 4)
            for x in xs
        ]
        got = np.empty(ctx.results[0].dims, ctx.results[0].np_dtype)
        out = cl.Buffer(context, mf.READ_WRITE, max(got.nbytes, 4))
        kobj.set_args(*ins, out)
        k = low.kernels[0]
        if all(k.global_size):
            cl.enqueue_nd_range_kernel(queue, kobj, k.global_size, k.local_size)
            cl.enqueue_copy(queue, got, out)
        queue.finish()
        want = np.asarray(get_op(op).reference(ctx.sig, *xs))
        msg = f"{op} {attrs} on {', '.join(str(TensorType.of(x)) for x in xs)}"
        assert got.shape == want.shape, msg
        if want.dtype.kind == "f":
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=msg)
        else:
            np.testing.assert_array_equal(got, want.astype(got.dtype), err_msg=msg)


def floats(n: int, dtype: str, lo: float = -4.0, hi: float = 4.0, specials: bool = True) -> np.ndarray:
    x = rng.uniform(lo, hi, n)
    if specials:
        x = np.concatenate([x, SPECIALS])
    return x.astype(np.dtype(TensorType((), dtype).np_dtype))


def ints(n: int, dtype: str, lo: int | None = None, hi: int | None = None) -> np.ndarray:
    info = np.iinfo(TensorType((), dtype).np_dtype)
    lo = info.min if lo is None else max(lo, info.min)
    hi = info.max if hi is None else min(hi, info.max)
    return rng.integers(lo, hi, n, endpoint=True, dtype=info.dtype)


# op sweeps, one program each --------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_unary_float_ops(dtype: str) -> None:
    n = 301  # vectors plus a scalar tail
    cases: list[Case] = [(op, [floats(n, dtype)], {}) for op in UNARY_FLOAT]
    cases += [(op, [floats(n, dtype, lo, hi, specials=False)], {}) for op, (lo, hi) in DOMAIN.items()]
    cases += [("sqrt", [np.abs(floats(n, dtype))], {}), ("log", [np.abs(floats(n, dtype))], {})]
    cases += [(op, [floats(n, dtype, -8, 8)], attrs) for op, attrs in WITH_ATTRS]
    cases += [("clip", [np.array([np.inf, -np.inf, np.nan, 1.0], dtype=floats(1, dtype).dtype)], {})]
    check_batch(cases)


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_binary_float_ops(dtype: str) -> None:
    n = 157
    a, b = floats(n, dtype), floats(n, dtype)[::-1].copy()
    nan_mix = (
        np.array([np.nan, 1, np.nan, -np.inf, 0.0, 3], a.dtype),
        np.array([1, np.nan, np.nan, 2, -0.0, 3], a.dtype),
    )
    cases: list[Case] = [
        (op, [a, b], {}) for op in ("add", "sub", "mul", "div", "mod", "max", "min", "prelu")
    ]
    cases += [
        (op, list(nan_mix), {})
        for op in ("max", "min", "equal", "less", "less_equal", "greater", "greater_equal")
    ]
    cases += [(op, [a, b], {}) for op in ("equal", "less", "less_equal", "greater", "greater_equal")]
    signed = np.array([-7.5, -7.5, 7.5, 7.5, -0.0, 5.0, -2.0, 3.0, 1.0], a.dtype)
    by = np.array([2.0, -2.0, 2.0, -2.0, 1.0, 0.0, 3.0, -1.5, np.inf], a.dtype)
    cases += [("mod", [signed, by], {}), ("div", [signed, by], {})]
    cases += [
        (
            "pow",
            [
                np.array([-2.0, -2.0, 2.0, 0.5, 0.0, -1.5, 3.0, np.nan], a.dtype),
                np.array([3.0, 2.0, 0.5, -2.0, 0.0, 0.5, 1.5, 1.0], a.dtype),
            ],
            {},
        )
    ]
    cases += [("where", [a > 0, a, b], {})]
    check_batch(cases)


@pytest.mark.parametrize("dtypes", [INTS[:4], INTS[4:]], ids=["signed", "unsigned"])
def test_integer_ops(dtypes: list[str]) -> None:
    cases: list[Case] = []
    for dtype in dtypes:
        a, b = ints(67, dtype), ints(67, dtype, -6, 6)  # small divisors, zero and -1 among them
        small = ints(67, dtype, -100, 100), ints(67, dtype, -100, 100)
        bits = 8 * a.dtype.itemsize
        cases += [
            (op, [a, b], {})
            for op in (
                "add",
                "sub",
                "div",
                "mod",
                "max",
                "min",
                "prelu",
                "bitwise_and",
                "bitwise_or",
                "bitwise_xor",
                "equal",
                "less",
                "greater_equal",
            )
        ]
        cases += [("mul", list(small), {}), ("div", [b, a], {}), ("mod", [small[0], b], {})]
        cases += [("pow", [ints(67, dtype, -3, 3), ints(67, dtype, 0, 3)], {})]
        cases += [
            ("bit_shift", [a, ints(67, dtype, -2, bits + 2)], {"direction": d}) for d in ("left", "right")
        ]
        cases += [(op, [a], {}) for op in ("neg", "abs", "sign", "relu", "bitwise_not", "identity")]
        low = -20.7 if dtype.startswith("i") else 3.2  # the reference refuses a bound the type cannot hold
        cases += [("clip", [a], {"min": low, "max": 50.2}), ("clip", [a], {"max": 3}), ("clip", [a], {})]
        cases += [("where", [b > 0, a, ints(1, dtype)[0].reshape(())], {})]
    check_batch(cases)


def test_integer_division_rules() -> None:
    """Division truncates toward zero; mod takes the sign of the dividend (C's %, numpy's fmod); b == 0
    and INT_MIN / -1 give the reference's answers instead of trapping."""
    a = np.array([7, -7, 7, -7, 5, -5, 0, -(2**31), -(2**31), 9], np.int32)
    b = np.array([2, 2, -2, -2, 0, 0, 0, -1, 1, -3], np.int32)
    check_batch(
        [
            ("div", [a, b], {}),
            ("mod", [a, b], {}),
            ("div", [a.astype(np.int8), b.astype(np.int8)], {}),
            ("mod", [a.astype(np.int64), b.astype(np.int64)], {}),
        ]
    )
    assert list(np.fmod(a[:4], b[:4])) == [1, -1, 1, -1]


def test_logical_ops() -> None:
    p, q = rng.random(45) < 0.5, rng.random(45) < 0.5
    cases: list[Case] = [(op, [p, q], {}) for op in ("and", "or", "xor", "equal", "less")]
    cases += [
        ("not", [p], {}),
        ("identity", [p], {}),
        ("where", [p, q, ~q], {}),
        ("and", [p.reshape(5, 9), q[:9]], {}),
        ("where", [p[:9], np.float32(1.5).reshape(()), np.arange(27, dtype=np.float32).reshape(3, 9)], {}),
    ]
    check_batch(cases)


CAST_TYPES = ["f32", "f64", "i8", "i16", "i32", "i64", "ui8", "ui32", "ui64", "i1"]


def test_cast_matrix() -> None:
    """Every pair of types, on values every type holds; float to int truncates."""
    values = np.array([0, 1, 2.7, 3.2, 99.9, 127, 0.49, 1e-3, 64.5])
    cases: list[Case] = []
    for src in CAST_TYPES:
        x = values.astype(TensorType((), src).np_dtype)
        cases += [("cast", [x], {"to": dst}) for dst in CAST_TYPES]
    check_batch(cases)


def test_cast_edges() -> None:
    """Negative floats truncate toward zero; -1.0 to an unsigned type wraps and 300.0 to i8 wraps as numpy
    does on x86 (through int); to i1 anything nonzero (NaN, -0.0 is zero) is true; integers wrap."""
    f = np.array([-2.7, -0.5, -1.0, 1.9, 300.0, -300.0, 2.5, -128.9], np.float32)
    cases: list[Case] = [("cast", [f], {"to": t}) for t in ("i8", "i16", "i32", "i64")]
    cases += [
        ("cast", [np.array([-1.0, -2.0, 255.0, 300.0], np.float32)], {"to": t}) for t in ("ui8", "ui32")
    ]
    cases += [("cast", [np.array([np.nan, -0.0, 0.0, 1e-30, -np.inf], np.float32)], {"to": "i1"})]
    cases += [
        ("cast", [np.array([300, -1, 2**40 + 5, -(2**40)], np.int64)], {"to": t})
        for t in ("i8", "ui16", "i32")
    ]
    cases += [("cast", [np.array([2**24 + 1, 2**31 - 1, 7], np.uint32)], {"to": "f32"})]
    cases += [("cast", [np.array([1e40, -1e-50, 3.3], np.float64)], {"to": "f32"})]
    check_batch(cases)


# erf and exact GELU in f32: rational approximations instead of PoCL's scalar erf/erfc -----------------------
BIG = [1e3, -1e3, 1e20, -1e20, 3e38, -3e38, 1e-30, -1e-30, 1e-40, -1e-40, 0.0, -0.0, np.inf, -np.inf, np.nan]
erf64 = np.vectorize(math.erf, otypes=[np.float64])
erfc64 = np.vectorize(math.erfc, otypes=[np.float64])


def test_erf_rationals_meet_their_bounds() -> None:
    """The coefficients, in f64, against math.erfc / math.erf: Phi(-t) = exp(-t^2/2) P(t)/Q(t) within 2e-7
    relative on [0, 9]; erf(z) = z P(z^2)/Q(z^2) within 3e-8 relative on (0, 4], and erf(4) is 1 in f32."""
    t = np.linspace(0.0, PHI_TAIL_MAX, 40_001)
    tail = np.exp(-t * t / 2) * np.polyval(PHI_TAIL_P[::-1], t) / np.polyval(PHI_TAIL_Q[::-1], t)
    assert np.max(np.abs(tail / (0.5 * erfc64(t / math.sqrt(2))) - 1)) < 2e-7
    z = np.linspace(1e-6, ERF_MAX, 40_001)
    w = z * z
    assert np.max(np.abs(z * np.polyval(ERF_P[::-1], w) / np.polyval(ERF_Q[::-1], w) / erf64(z) - 1)) < 3e-8
    assert np.float32(math.erf(ERF_MAX)) == 1.0


def test_gelu_f32_is_branch_free_without_erf_calls() -> None:
    """f32 gelu and erf are vector arithmetic plus exp; f64 keeps the accurate built-ins."""
    gelu32 = expr("gelu", _sig("gelu", "f32", approximate="none"), ["v"], width=16)
    erf32 = expr("erf", _sig("erf", "f32"), ["v"], width=16)
    assert "erf" not in gelu32 and "erf" not in erf32 and "if" not in gelu32
    assert "erfc(" in expr("gelu", _sig("gelu", "f64", approximate="none"), ["v"])
    assert expr("erf", _sig("erf", "f64"), ["v"]) == "erf(v)"


def test_gelu_f32_accuracy() -> None:
    """Exact gelu in f32 against 0.5 x erfc(-x / sqrt 2) in f64 over [-12, 12] (the float16 path and a
    scalar tail), huge and subnormal |x|, +-0, inf and NaN: within 3e-7 relative + 3e-8 absolute (the
    contract is 1e-5 / 1e-6), and x << 0 stays tiny instead of cancelling to a 1e-6 error."""
    x = np.concatenate([np.linspace(-12.0, 12.0, 200_003), BIG]).astype(np.float32)
    with np.errstate(all="ignore"):
        want = 0.5 * x.astype(np.float64) * erfc64(-x.astype(np.float64) / math.sqrt(2))
    (got,), _ = run_op("gelu", [x], {"approximate": "none"})
    np.testing.assert_allclose(got, want, rtol=3e-7, atol=3e-8)  # NaN where the reference has NaN (-inf)
    tail = (x > -7) & (x < -4)
    assert np.all(np.abs(got[tail] - want[tail]) <= 1e-6 * np.abs(want[tail]) + 1e-12)


def test_erf_f32_accuracy() -> None:
    """erf in f32 within 6 f32 ulps of math.erf, relative down to the smallest normal f32 (subnormal results
    keep fewer bits); erf(+-inf) = +-1 and NaN stays NaN."""
    z = np.concatenate([np.linspace(-6.0, 6.0, 200_003), BIG, [1e-5, -3e-7, 1e-20]]).astype(np.float32)
    want = erf64(z.astype(np.float64))
    (got,), _ = run_op("erf", [z], {})
    np.testing.assert_allclose(got, want, rtol=4e-7, atol=2e-38)
    check_op("erf", [z])


# broadcasting and launch shapes --------------------------------------------------------------------------
def f32(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize(
    "shapes",
    [
        [(), ()],  # rank 0
        [(1000,), ()],  # scalar operand, float16 vectors and a tail
        [(3, 1), (1, 4)],  # both operands broadcast
        [(2, 3, 4), (4,)],  # rows of 4: a scalar loop per row
        [(2, 8, 5, 5), (1, 8, 1, 1)],  # per-channel bias, rows of 25: a vector and a tail
        [(2, 16, 4, 8), (16, 1, 1)],  # per-channel bias, rows of 32
        [(2, 1, 3, 1, 2, 1, 5), (1, 4, 3, 2, 1, 6, 1)],  # rank 7, broadcast both ways
        [(0, 3), (3,)],  # zero-size result
    ],
    ids=lambda s: "x".join(str(list(t)) for t in s),
)
def test_broadcast_add(shapes: list[tuple[int, ...]]) -> None:
    check_op("add", [f32(*s) for s in shapes])


def test_broadcast_where_three_ways() -> None:
    check_op("where", [rng.random((4, 1, 6)) < 0.5, f32(3, 1), f32(5, 1, 1, 6)])


def test_broadcast_int_vector_path() -> None:
    """i8 vectors (char16) with a per-row broadcast operand: literals are typed for the vector."""
    check_op("max", [ints(2 * 3 * 40, "i8").reshape(2, 3, 40), ints(3, "i8").reshape(3, 1)])


# source and API ------------------------------------------------------------------------------------------
def test_unsupported_types_raise_not_lowerable() -> None:
    for dtype in ("f16", "bf16", "f8E4M3FN"):
        with pytest.raises(NotLowerable):
            lower_op("add", [TensorType((4,), dtype)] * 2, {})
    with pytest.raises(NotLowerable, match="cl_khr_fp64"):
        lower_op("exp", [TensorType((4,), "f64")], {}, info=dev.DeviceInfo(fp64=False))


def test_source_is_deterministic_and_commented() -> None:
    types = [TensorType((2, 8, 5, 5), "f32"), TensorType((1, 8, 1, 1), "f32")]
    (_, a), (_, b) = lower_op("prelu", types, {}), lower_op("prelu", types, {})
    src = a.kernels[0].source
    assert src == b.kernels[0].source
    assert src.startswith("// prelu: out0 = (in0 < 0.0f ? in0 * in1 : in0)")
    assert "vload16" in src and "vstore16" in src and "%" in src and "/ 8" not in src  # one mod per vector
    assert a.kernels[0].local_size and a.kernels[0].global_size[0] % a.kernels[0].local_size[0] == 0


def test_expr_for_fusion() -> None:
    sig = get_op("add").sig([TensorType((4,), "f32")] * 2, {})
    sig.results = get_op("add").infer(sig)
    assert expr("add", sig, ["x", "y"]) == "(x + y)"
    assert expr("neg", _sig("neg", "f32"), ["x + y"]) == "(-(x + y))"
    assert expr("relu", _sig("relu", "i8"), ["v"], width=16) == "(v < (char)0 ? (char)0 : v)"
    assert expr("leaky_relu", _sig("leaky_relu", "f32", alpha=0.5), ["v"]) == "(v >= 0.0f ? v : v * 0.5f)"
    assert vectorizable("add", sig) and not vectorizable("less", _sig("less", "f32", 2))
    assert all(get_op(name) is not None for name in RULES)
    chained = f"float t = {expr('exp', _sig('exp', 'f32'), ['x'])}; out = {expr('mul', sig, ['t', 'x'])};"
    assert chained == "float t = exp(x); out = (t * x);"


def _sig(op: str, dtype: str, arity: int = 1, **attrs: Any) -> Any:
    opdef = get_op(op)
    sig = opdef.sig([TensorType((4,), dtype)] * arity, attrs)
    sig.results = opdef.infer(sig)
    return sig


def test_every_registered_op_lowers() -> None:
    """Each op of the table lowers on a representative type (no build), and the table holds exactly the
    registry's elementwise ops."""
    get_op("identity")
    assert set(RULES) == {name for name, op in REGISTRY.items() if "elementwise" in op.traits}
    for op in RULES:
        opdef = get_op(op)
        n = len(opdef.operands)
        dtype = "i32" if op.startswith("bit") else "i1" if op in ("and", "or", "xor", "not") else "f32"
        types = [TensorType((3, 5), dtype)] * n
        if op == "where":
            types = [TensorType((3, 5), "i1"), *types[1:]]
        if op == "quantize":  # x, scale (f32), zero point (ui8)
            types = [*types[:2], TensorType((), "ui8")]
        if op == "dequantize":  # x (i8), scale (f32), zero point (i8)
            types = [TensorType((3, 5), "i8"), TensorType((), "f32"), TensorType((), "i8")]
        attrs = {"to": "i32"} if op == "cast" else {"direction": "left"} if op == "bit_shift" else {}
        if op in ("qadd", "qmul"):  # two ui8 tensors, their scales and zero points as attributes
            types = [TensorType((3, 5), "ui8")] * 2
            attrs = {"a_scale": 0.5, "a_zero_point": 3, "b_scale": 0.25, "b_zero_point": 7, "scale": 0.75,
                     "zero_point": 2}
        ctx, low = lower_op(op, types, attrs)
        assert isinstance(ctx, Ctx) and re.match(rf"// {op}: ", low.kernels[0].source)
