"""The element types beyond onnxruntime's reach (float8, float4, e8m0, 4- and 2-bit integers) and the
wider integers (i16, ui16, ui32, ui64), checked against onnx's reference implementation
(onnx.reference.ReferenceEvaluator), which is the spec-level truth for Cast's saturate and round_mode.

Cast is checked op by op through the registry (every conversion to and from the new types, with saturate
and round_mode); the ONNX ops that reach the new types through converters (QuantizeLinear,
DequantizeLinear, arithmetic, comparisons, Mod, BitShift, the bitwise ops) through one-node models
imported and run on the numpy target.
"""

from __future__ import annotations

import itertools
import warnings
import zlib
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from tessel.frontends.onnx.backend import TesselBackend
from tessel.frontends.onnx.types import ELEMENT_TO_ONNX
from tessel.ir.types import ELEMENT_TYPES, SUB_BYTE_BITS, int_range, widen
from tessel.tests.numeric.ort_util import run_tessel

OPSET = 25
F8 = ("f8E4M3FN", "f8E4M3FNUZ", "f8E5M2", "f8E5M2FNUZ")
NEW_FLOATS = F8 + ("f8E8M0FNU", "f4E2M1FN")
WIDE_FLOATS = ("f32", "f16", "f64", "bf16")
SUB_BYTE_INTS = ("i4", "ui4", "i2", "ui2")
NEW_INTS = ("i16", "ui16", "ui32", "ui64")


def _np(name: str) -> np.dtype:
    return ELEMENT_TYPES[name]


def _rng(*key: Any) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def run_reference(op_type: str, inputs: list[np.ndarray | None], attrs: dict[str, Any] | None = None,
                  n_outputs: int = 1) -> list[np.ndarray]:
    """One ONNX node through onnx's reference implementation."""
    model = _model(op_type, inputs, attrs, n_outputs)
    feeds = {f"in{i}": a for i, a in enumerate(inputs) if a is not None}
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return [np.asarray(o) for o in ReferenceEvaluator(model).run(None, feeds)]


def _model(op_type: str, inputs: list[np.ndarray | None], attrs: dict[str, Any] | None,
           n_outputs: int) -> onnx.ModelProto:
    names = [f"in{i}" if a is not None else "" for i, a in enumerate(inputs)]
    graph_inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
                    for n, a in zip(names, inputs, strict=True) if a is not None]
    outs = [f"out{i}" for i in range(n_outputs)]
    node = helper.make_node(op_type, names, outs, **(attrs or {}))
    graph = helper.make_graph([node], "g", graph_inputs,
                              [helper.make_empty_tensor_value_info(o) for o in outs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


def check_node(op_type: str, inputs: list[np.ndarray], attrs: dict[str, Any] | None = None) -> None:
    """One ONNX node imported by tessel's frontend and run on the numpy target, against onnx's reference."""
    want = run_reference(op_type, inputs, attrs)
    model = _model(op_type, inputs, attrs, len(want))
    del model.graph.output[:]  # typed outputs, from the reference's
    model.graph.output.extend(
        helper.make_tensor_value_info(f"out{i}", helper.np_dtype_to_tensor_dtype(w.dtype), list(w.shape))
        for i, w in enumerate(want))
    with np.errstate(all="ignore"):
        got = TesselBackend.prepare(model, "CPU").run(inputs)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert_same(np.asarray(g), w)


def assert_same(got: np.ndarray, want: np.ndarray) -> None:
    """Same dtype and shape, and the same bits, except that any NaN matches any NaN."""
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    g, w = widen(got), widen(want)
    if g.dtype.kind == "f":
        nan = np.isnan(w)
        assert (np.isnan(g) == nan).all(), f"NaN where not expected:\n{got}\nvs\n{want}"
        same = (got.view(np.uint8) == want.view(np.uint8)) if got.dtype.itemsize == 1 else (g == w)
        same = same | nan
    else:
        same = g == w
    assert same.all(), f"{int((~same).sum())} values differ:\n{got[~same]}\nvs\n{want[~same]}"


# ------------------------------------------------------------------------------------------------ cast
def _float_values(key: Any) -> np.ndarray:
    """What float casts must get right: the boundaries of every float8 type (largest finite values and
    the midpoints past them), exact halves, tiny and subnormal values, infinities, NaN, and random
    values over the ranges that matter."""
    g = _rng("cast", key)
    edges = [0.0, -0.0, 0.5, 0.47892547, 1e-7, -1e-7, 1e-3, 0.015625, 0.0009765625, 1.5, 2.75, -3.25, 5.0,
             6.0, 7.0, -8.0, 9.0, 240.0, 248.0, 256.0, 448.0, 464.0, 480.0, 500.0, 57344.0, 61440.0, 65504.0,
             1e6, -1e6, 3e38, 2.0**-127, 2.0**-126, 1.1, 0.124, 2.0**127, np.inf, -np.inf, np.nan]
    rand = np.concatenate([g.uniform(-8, 8, 40), g.uniform(-600, 600, 40), 2.0 ** g.uniform(-30, 30, 40)])
    return np.array(edges + list(rand), np.float64)


def _all_values(name: str) -> np.ndarray:
    """Every value of an 8-bit or narrower type, from its bit patterns."""
    bits = SUB_BYTE_BITS.get(name, 8)
    return np.arange(2**bits, dtype=np.uint8).view(_np(name))


def _check_cast(x: np.ndarray, to: str, **attrs: Any) -> None:
    onnx_attrs = {"to": ELEMENT_TO_ONNX[to]} | {k: int(v) if k == "saturate" else v for k, v in attrs.items()}
    want = run_reference("Cast", [x], onnx_attrs)[0]
    with np.errstate(all="ignore"):
        got = run_tessel("cast", [x], {"to": to, **attrs})[0]
    assert_same(got, want)


TO_FLOAT8 = [pytest.param(src, dst, sat, id=f"{src}->{dst}-sat{int(sat)}")
             for src, dst, sat in itertools.product(WIDE_FLOATS, F8, (True, False))]


@pytest.mark.parametrize(("src", "dst", "saturate"), TO_FLOAT8)
def test_cast_to_float8(src: str, dst: str, saturate: bool) -> None:
    """Out of range, infinities included, clamp to the largest finite value with saturate; without it they
    become NaN (inf for f8E5M2); FNUZ types have one NaN and no -0."""
    with np.errstate(all="ignore"):
        x = _float_values(src).astype(_np(src))
    _check_cast(x, dst, saturate=saturate)


TO_E8M0 = [pytest.param(src, mode, sat, id=f"{src}-{mode}-sat{int(sat)}")
           for src, mode, sat in itertools.product(WIDE_FLOATS, ("up", "down", "nearest"), (True, False))]


@pytest.mark.parametrize(("src", "round_mode", "saturate"), TO_E8M0)
def test_cast_to_e8m0(src: str, round_mode: str, saturate: bool) -> None:
    """A bare exponent: the sign is dropped, the mantissa rounds the exponent per round_mode, and
    rounding past 2^127 gives NaN unless saturate."""
    with np.errstate(all="ignore"):
        x = np.concatenate([_float_values(src), [1.5 * 2.0**127, -(2.0**127) * 1.9, 3.0 * 2.0**-128]])
        x = x.astype(_np(src))
    _check_cast(x, "f8E8M0FNU", saturate=saturate, round_mode=round_mode)


@pytest.mark.parametrize("src", WIDE_FLOATS)
def test_cast_to_float4(src: str) -> None:
    """f4E2M1FN has no inf or NaN: ml_dtypes' conversion (onnx's reference) saturates."""
    x = _float_values(src)
    with np.errstate(all="ignore"):
        x = x[~np.isnan(x)].astype(_np(src))  # NaN to float4 is left open by the spec
    _check_cast(x, "f4E2M1FN")


FROM_NARROW = [pytest.param(src, dst, id=f"{src}->{dst}")
               for src in NEW_FLOATS for dst in WIDE_FLOATS + NEW_FLOATS if src != dst]


@pytest.mark.parametrize(("src", "dst"), FROM_NARROW)
def test_cast_from_narrow_float(src: str, dst: str) -> None:
    """Every value of each float8/float4 type to every float type (saturating where that applies)."""
    x = _all_values(src)
    if dst == "f4E2M1FN":
        x = x[~np.isnan(x.astype(np.float32))]  # NaN to float4 is left open by the spec
    _check_cast(x, dst)


INT_CASTS = [pytest.param(src, dst, id=f"{src}->{dst}")
             for src in SUB_BYTE_INTS + NEW_INTS
             for dst in ("f32", "f16", "i8", "ui8", "i32", "i64") + SUB_BYTE_INTS + NEW_INTS if src != dst]


@pytest.mark.parametrize(("src", "dst"), INT_CASTS)
def test_cast_integers(src: str, dst: str) -> None:
    """Integers to integers wrap (two's complement), as numpy and ml_dtypes do; to floats round."""
    lo, hi = int_range(src)
    edges = [lo, hi, 0, 1, lo + 1, hi - 1] + [v for v in (-1, -2, 2, 3, 7, 8, 255, 1000) if lo <= v <= hi]
    rand = _rng("int", src).integers(lo, hi, 40, dtype=np.int64, endpoint=True) if hi < 2**63 else \
        _rng("int", src).integers(0, 2**63, 40, dtype=np.uint64)
    x = np.array(edges + list(rand)).astype(object).astype(_np(src)) if src in SUB_BYTE_INTS else \
        np.array(edges + [int(v) for v in rand], _np(src))
    _check_cast(x, dst)


@pytest.mark.parametrize("dst", SUB_BYTE_INTS)
@pytest.mark.parametrize("src", ("f32", "f16"))
def test_cast_float_to_sub_byte_int(src: str, dst: str) -> None:
    """Floats in the target's range truncate toward zero (out-of-range conversions are undefined)."""
    lo, hi = int_range(dst)
    x = np.concatenate([np.arange(lo, hi + 1), _rng("f2i", src, dst).uniform(lo - 0.99, hi + 0.99, 30)])
    _check_cast(x.astype(_np(src)), dst)


# ------------------------------------------------------------------------------------ quantization
QUANT_TYPES = ("i16", "ui16", "i4", "ui4", "i2", "ui2") + F8 + ("f4E2M1FN",)


def _zero_point(name: str, shape: tuple[int, ...]) -> np.ndarray:
    if name in NEW_FLOATS:
        return np.zeros(shape, _np(name))
    lo, hi = int_range(name)
    return np.array(_rng("zp", name).integers(lo, hi + 1, shape)).astype(object).astype(_np(name))


QUANT_CASES = [pytest.param(out, axis, sat, id=f"{out}-axis{axis}-sat{sat}")
               for out, axis, sat in itertools.product(QUANT_TYPES, (None, 1), (1, 0)) if sat or out in F8]


@pytest.mark.parametrize(("out", "axis", "saturate"), QUANT_CASES)
def test_quantize_linear(out: str, axis: int | None, saturate: int) -> None:
    """Integers round half to even and clip; float8 saturates unless saturate=0 (the zero point is 0)."""
    x = _rng("q", out).uniform(-600, 600, (2, 3, 4)).astype(np.float32)
    x.flat[:4] = [np.inf, -np.inf, 0.5, -0.5]
    shape = (3,) if axis is not None else ()
    scale = _rng("s", out).uniform(0.5, 4, shape).astype(np.float32)
    attrs = {"saturate": saturate} | ({"axis": axis} if axis is not None else {})
    inputs = [x, scale, _zero_point(out, shape)]
    check_node("QuantizeLinear", inputs, attrs)


@pytest.mark.parametrize("scale_type", ["f32", "f16"])
@pytest.mark.parametrize("src", QUANT_TYPES)
def test_dequantize_linear(src: str, scale_type: str) -> None:
    x = _all_values(src) if src in NEW_FLOATS or src in SUB_BYTE_INTS else \
        np.array(_rng("dq", src).integers(*int_range(src), 24), _np(src))
    if src in NEW_FLOATS:
        x = x[~np.isnan(x.astype(np.float32))]
    scale = np.array(0.125, _np(scale_type))
    inputs = [x, scale, _zero_point(src, ())]
    check_node("DequantizeLinear", inputs)


# ------------------------------------------------------------------------- integer arithmetic and tests
def _ints(name: str, shape: tuple[int, ...], key: Any, nonzero: bool = False) -> np.ndarray:
    lo, hi = int_range(name)
    lo, hi = max(lo, -1000), min(hi, 1000)
    x = _rng(name, shape, key).integers(lo, hi + 1, shape)
    if nonzero:
        x[x == 0] = 1
    return x.astype(_np(name))


BINARY_OPS = [("Add", {}), ("Sub", {}), ("Mul", {}), ("Div", {}), ("Mod", {}), ("Mod", {"fmod": 1}),
              ("Max", {}), ("Min", {}), ("Equal", {}), ("Less", {}), ("LessOrEqual", {}), ("Greater", {}),
              ("GreaterOrEqual", {}), ("BitwiseAnd", {}), ("BitwiseOr", {}), ("BitwiseXor", {})]


@pytest.mark.parametrize("dtype", NEW_INTS + ("i8", "ui8"))
@pytest.mark.parametrize(("op_type", "attrs"), BINARY_OPS, ids=[f"{o}{a or ''}" for o, a in BINARY_OPS])
def test_integer_binary(op_type: str, attrs: dict[str, Any], dtype: str) -> None:
    """Unsigned types never go negative: Sub wraps, Div and Mod are plain unsigned division."""
    a = _ints(dtype, (3, 4), "a")
    b = _ints(dtype, (4,), "b", nonzero=op_type in ("Div", "Mod"))
    check_node(op_type, [a, b], attrs)


@pytest.mark.parametrize("dtype", ("ui8", "ui16", "ui32", "ui64"))
@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bit_shift_unsigned(direction: str, dtype: str) -> None:
    bits = 8 * _np(dtype).itemsize
    x = np.array([0, 1, 3, 255, int_range(dtype)[1], 12345 % int_range(dtype)[1]], _np(dtype))
    n = np.array([0, 1, 7, bits - 1, 2, 5], _np(dtype))
    attrs = {"direction": direction}
    check_node("BitShift", [x, n], attrs)


@pytest.mark.parametrize("dtype", NEW_INTS + ("i8",))
def test_integer_unary(dtype: str) -> None:
    x = _ints(dtype, (12,), "unary")
    for op_type in ("Abs", "BitwiseNot", "Identity") + (("Neg", "Sign") if not dtype.startswith("u") else ()):
        check_node(op_type, [x])


def test_new_types_are_mapped() -> None:
    for onnx_type in (TensorProto.INT16, TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64,
                      TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2,
                      TensorProto.FLOAT8E5M2FNUZ, TensorProto.FLOAT8E8M0, TensorProto.FLOAT4E2M1,
                      TensorProto.INT4, TensorProto.UINT4, TensorProto.INT2, TensorProto.UINT2):
        name = next(k for k, v in ELEMENT_TO_ONNX.items() if v == onnx_type)
        assert _np(name) == helper.tensor_dtype_to_np_dtype(onnx_type)
