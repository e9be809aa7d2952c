"""The quantized ops on OpenCL against the registry's numpy references: the integer contractions
(`conv2d_integer`, `qconv2d`, `matmul_integer`, `qmatmul`: targets/opencl/kernels/qlinear.py) and
`quantize` / `dequantize` (elementwise RULES), bit-exact for integer results, one PoCL build per case.

The requantizing scales are calibrated on the case's own accumulators (as a quantizer would set them:
about 40 output steps per accumulator standard deviation, which lands them around 1e-3..5e-3 for these
layer sizes), so the outputs spread over the 8-bit range instead of all saturating; each requantized case
asserts so. Power-of-two scales on small accumulators make acc * scale + y_zero_point hit exact .5 ties,
which must round to even (the `*_rounds_ties_to_even` tests).

The cases whose per-channel weight zero point and scale have shape [1] (which the ops' checks accept:
`dims[0] in (1, channels)`) are expected failures: the templates index any rank-1 zero point or scale
by the output channel, reading past the one element.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from tessel.ir.ops.registry import get_op
from tessel.ir.types import TensorType, int_range
from tessel.targets.opencl.kernels.base import NotLowerable
from tessel.targets.opencl.kernels.testing import check_op, lower_op

NP = {"i8": np.int8, "ui8": np.uint8}


def rng_for(*key: Any) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def ints(rng: np.random.Generator, shape: tuple[int, ...], dtype: str, lo: int | None = None,
         hi: int | None = None) -> np.ndarray:
    tlo, thi = int_range(dtype)
    return rng.integers(tlo if lo is None else lo, (thi if hi is None else hi) + 1, shape).astype(NP[dtype])


def reference(op: str, inputs: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    opdef = get_op(op)
    assert opdef is not None
    sig = opdef.sig([TensorType.of(a) for a in inputs], dict(attrs))
    sig.results = opdef.infer(sig)
    return np.asarray(opdef.reference(sig, *inputs))


def assert_spread(y: np.ndarray, attrs: dict[str, Any], dtype: str) -> None:
    """Most requantized outputs lie strictly inside the clamp range: the case tests the arithmetic, not
    only the saturation."""
    tlo, thi = int_range(dtype)
    lo, hi = max(attrs.get("min", tlo), tlo), min(attrs.get("max", thi), thi)
    inside = np.mean((y > lo) & (y < hi))
    assert inside > 0.25, f"only {inside:.0%} of the outputs are inside ({lo}, {hi})"
    assert len(np.unique(y)) > 8, f"only {len(np.unique(y))} distinct outputs"


def calibrate(rng: np.random.Generator, acc: np.ndarray, axis: int, channels: int, per_channel: bool,
              pow2: bool) -> np.ndarray:
    """A requantizing scale putting about 40 output steps in one accumulator standard deviation, per
    tensor or one per output channel (on `axis` of `acc`); a power of two when `pow2`."""
    moved = np.moveaxis(acc.astype(np.float64), axis, 0).reshape(channels, -1)
    std = moved.std(axis=1) if per_channel else np.full(channels, moved.std())
    s = 40.0 / np.maximum(std, 1.0) * rng.uniform(0.7, 1.4, channels)
    if pow2:
        s = 2.0 ** np.round(np.log2(s))
    s = s.astype(np.float32)
    return s if per_channel else np.array(s[0], np.float32)


# the convolutions ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Conv:
    x: str  # element types
    w: str
    n: int  # batch
    c: int  # input channels
    hw: tuple[int, int]
    m: int  # output channels
    k: int  # kernel size
    stride: int = 1
    pad: tuple[int, int, int, int] = (0, 0, 0, 0)
    dilation: int = 1
    groups: int = 1
    wz_per_channel: bool = False
    scale_per_channel: bool = False
    bias: bool = False
    bounds: str = ""  # "": the type's range; "relu": min = y_zero_point; "clip": [yz - 30, yz + 70]
    pow2: bool = False  # a power-of-two scale
    y: str = "ui8"  # the output type of qconv2d
    single_zp: bool = False  # the per-channel zero point and scale shaped [1] instead of [M] or []

    def attrs(self) -> dict[str, Any]:
        return {"strides": [self.stride] * 2, "pads": list(self.pad), "dilations": [self.dilation] * 2,
                "groups": self.groups}

    def __str__(self) -> str:
        parts = [f"{self.x}x{self.w}", f"n{self.n}c{self.c}h{self.hw[0]}w{self.hw[1]}", f"m{self.m}k{self.k}"]
        parts += [f"s{self.stride}"] * (self.stride != 1)
        parts += [f"p{''.join(map(str, self.pad))}"] * any(self.pad)
        parts += [f"d{self.dilation}"] * (self.dilation != 1) + [f"g{self.groups}"] * (self.groups != 1)
        parts += ["wzc"] * self.wz_per_channel + ["sc"] * self.scale_per_channel + ["bias"] * self.bias
        parts += [self.bounds] * bool(self.bounds) + ["pow2"] * self.pow2 + [f"y{self.y}"]
        return "-".join(parts + ["zp1"] * self.single_zp)


CONVS = [
    # 3x3 pad 1, ui8 x ui8, output width 13 (not a multiple of 16), batch 2, per-channel zero point
    Conv("ui8", "ui8", 2, 4, (9, 13), 8, 3, pad=(1, 1, 1, 1), wz_per_channel=True, bias=True),
    # i8 x i8 (symmetric weights: zero point 0 per channel), stride 2, per-channel scale, fused ReLU
    Conv("i8", "i8", 1, 6, (11, 19), 16, 3, stride=2, pad=(1, 1, 1, 1), scale_per_channel=True,
         bias=True, bounds="relu", y="i8"),
    # ui8 activations, i8 weights (the usual quantize_static mix), 1x1, width 21, batch 2
    Conv("ui8", "i8", 2, 16, (5, 21), 12, 1, scale_per_channel=True, wz_per_channel=True),
    # i8 activations, ui8 weights, 5x5 asymmetric pads, a Clip's bounds
    Conv("i8", "ui8", 1, 3, (12, 17), 4, 5, pad=(2, 1, 2, 3), bias=True, bounds="clip"),
    # dilation 2, groups 2
    Conv("ui8", "i8", 1, 8, (10, 18), 6, 3, pad=(2, 2, 2, 2), dilation=2, groups=2, bias=True,
         scale_per_channel=True),
    # depthwise 3x3 stride 2 (groups == channels), per-channel everything, ReLU, i8 output
    Conv("ui8", "i8", 2, 12, (13, 15), 12, 3, stride=2, pad=(1, 1, 1, 1), groups=12, wz_per_channel=True,
         scale_per_channel=True, bias=True, bounds="relu", y="i8"),
    # depthwise 5x5 with a channel multiplier of 2 (groups = channels, 2 outputs a group), no padding
    Conv("i8", "i8", 1, 4, (9, 20), 8, 5, groups=4, bias=True),
    # a power-of-two scale, 3 output channels (one item does them all), i8 output
    Conv("ui8", "ui8", 1, 2, (6, 11), 3, 3, pad=(1, 1, 1, 1), bias=True, pow2=True, y="i8"),
    # per-channel operands of shape [1] (valid by the op's checks: dims[0] in (1, channels))
    Conv("ui8", "i8", 1, 4, (6, 7), 8, 3, wz_per_channel=True, scale_per_channel=True, single_zp=True),
    # channel lanes: groups of 20 outputs (a whole and a partial block of 16 lanes), per-channel everything
    Conv("ui8", "i8", 1, 8, (9, 14), 40, 3, pad=(1, 1, 1, 1), groups=2, wz_per_channel=True,
         scale_per_channel=True, bias=True),
    # channel lanes reading x directly (no padding, stride 1): 3x3, a row of 19 (a partial last block)
    Conv("ui8", "i8", 1, 6, (7, 19), 16, 3, wz_per_channel=True, bias=True),
    # channel lanes with stride 2, dilation 2 and asymmetric pads, batch 2, a Clip's bounds
    Conv("i8", "i8", 2, 5, (10, 12), 16, 3, stride=2, pad=(0, 1, 2, 1), dilation=2, bias=True, bounds="clip"),
]


def params(cases: list[Any]) -> list[Any]:
    return [pytest.param(c, id=str(c)) for c in cases]


INTEGER_CONVS = [CONVS[i] for i in (0, 2, 3, 4, 6, 8)]


def conv_operands(case: Conv, rng: np.random.Generator) -> tuple[list[np.ndarray], dict[str, Any]]:
    """x, w, x_zero_point, w_zero_point."""
    h, w = case.hw
    x = ints(rng, (case.n, case.c, h, w), case.x)
    wt = ints(rng, (case.m, case.c // case.groups, case.k, case.k), case.w)
    xz = ints(rng, (), case.x, *((100, 160) if case.x == "ui8" else (-20, 20)))
    if case.wz_per_channel:
        shape = (1,) if case.single_zp else (case.m,)
        wz = ints(rng, shape, case.w, *((100, 160) if case.w == "ui8" else (-10, 10)))
    else:
        wz = np.array(128 if case.w == "ui8" else 0, NP[case.w])
    return [x, wt, xz, wz], case.attrs()


@pytest.mark.parametrize("case", params(INTEGER_CONVS))
def test_conv2d_integer(case: Conv) -> None:
    inputs, attrs = conv_operands(case, rng_for("convi", str(case)))
    check_op("conv2d_integer", inputs, attrs)


def requant_operands(case: Any, rng: np.random.Generator, acc: np.ndarray, axis: int, channels: int,
                     attrs: dict[str, Any]) -> list[np.ndarray]:
    """scale, y_zero_point, bias? for qconv2d / qmatmul, with the bounds set in `attrs`."""
    bias = None
    if case.bias:
        std = float(acc.std()) or 1.0
        bias = rng.integers(-int(std), int(std) + 1, channels).astype(np.int32)
        acc = acc + bias.reshape([-1] + [1] * (acc.ndim - 1 - axis % acc.ndim))
    scale = calibrate(rng, acc, axis, channels, case.scale_per_channel, case.pow2)
    if case.scale_per_channel and case.single_zp:
        scale = scale[:1].copy()
    mid = 128 if case.y == "ui8" else 0
    yz = np.array(mid + int(rng.integers(-20, 21)), NP[case.y])
    if case.bounds == "relu":
        attrs["min"] = int(yz)
    elif case.bounds == "clip":
        attrs["min"], attrs["max"] = int(yz) - 30, int(yz) + 70
    return [scale, yz] + ([bias] if bias is not None else [])


@pytest.mark.parametrize("case", params(CONVS))
def test_qconv2d(case: Conv) -> None:
    rng = rng_for("qconv", str(case))
    inputs, attrs = conv_operands(case, rng)
    acc = reference("conv2d_integer", inputs, attrs)
    inputs += requant_operands(case, rng, acc, 1, case.m, attrs)
    assert_spread(reference("qconv2d", inputs, attrs), attrs, case.y)
    check_op("qconv2d", inputs, attrs)


SCHEDULES = [{"lanes": 8, "cols": 3}, {"lanes": 16, "cols": 16}, {"lanes": 0, "rows": 2, "cols": 4},
             {"lanes": 0, "rows": 8, "cols": 16}, {"lanes": 16, "cols": 5, "pairs": 0},
             {"lanes": 16, "cols": 1, "pairs": 1}]


@pytest.mark.parametrize("schedule", SCHEDULES,
                         ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
def test_conv2d_integer_schedules(schedule: dict[str, int]) -> None:
    """The template's schedule keys: channel lanes (lanes 8 / 16, cols 1..16 columns an item) or column
    lanes (lanes 0, rows channels an item, cols 4 / 8 / 16), each exact; values outside are refused."""
    case = Conv("ui8", "i8", 1, 8, (9, 14), 32, 3, pad=(1, 1, 1, 1), wz_per_channel=True)
    inputs, attrs = conv_operands(case, rng_for("sched", str(schedule)))
    check_op("conv2d_integer", inputs, attrs, schedule=schedule)


@pytest.mark.parametrize("op,schedule,reason", [
    ("conv2d_integer", {"lanes": 4}, "lanes=4"),
    ("conv2d_integer", {"pairs": 2}, "pairs=2"),
    ("conv2d_integer", {"lanes": 16, "cols": 17}, "cols=17"),
    ("conv2d_integer", {"lanes": 0, "cols": 5}, "cols be 4, 8 or 16"),
    ("matmul_integer", {"rows": 17}, "rows=17 must be in 1..16")])
def test_bad_schedules_are_refused(op: str, schedule: dict[str, int], reason: str) -> None:

    if op == "conv2d_integer":
        inputs, attrs = conv_operands(Conv("ui8", "i8", 1, 8, (9, 14), 32, 3), rng_for("bad", op))
    else:
        inputs, attrs = matmul_operands(MATMULS[0], rng_for("bad", op)), {}
    with pytest.raises(NotLowerable, match=re.escape(reason)):
        lower_op(op, [TensorType.of(a) for a in inputs], attrs, schedule=schedule)


@pytest.mark.parametrize("rows", [1, 3, 16])
def test_matmul_integer_rows(rows: int) -> None:
    check_op("matmul_integer", matmul_operands(MATMULS[0], rng_for("rows", str(rows))), {},
             schedule={"rows": rows})


# the matmuls -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Matmul:
    a: str
    b: str
    ashape: tuple[int, ...]
    bshape: tuple[int, ...]
    bz_per_column: bool = False
    scale_per_channel: bool = False
    bias: bool = False
    bounds: str = ""
    pow2: bool = False
    y: str = "ui8"
    single_zp: bool = False

    def __str__(self) -> str:
        shapes = "@".join("x".join(map(str, s)) for s in (self.ashape, self.bshape))
        parts = [f"{self.a}x{self.b}", shapes]
        parts += ["bzc"] * self.bz_per_column + ["sc"] * self.scale_per_channel + ["bias"] * self.bias
        parts += [self.bounds] * bool(self.bounds) + ["pow2"] * self.pow2 + [f"y{self.y}"]
        return "-".join(parts + ["zp1"] * self.single_zp)


MATMULS = [
    # 2-D, ui8 x ui8, 17 columns (not a multiple of 16), per-column zero point and scale, bias
    Matmul("ui8", "ui8", (6, 40), (40, 17), bz_per_column=True, scale_per_channel=True, bias=True),
    # 2-D, ui8 x i8, 5 rows (odd: one row a work-item), a fused ReLU, i8 output
    Matmul("ui8", "i8", (5, 33), (33, 24), bias=True, bounds="relu", y="i8"),
    # batched 3-D x 2-D: b broadcast over a's batch
    Matmul("i8", "i8", (2, 5, 7), (7, 9), bz_per_column=True, scale_per_channel=True, bounds="clip"),
    # 4-D x 3-D: both batched, a's batch dim 1 broadcast against b's 3
    Matmul("i8", "ui8", (2, 1, 4, 12), (3, 12, 10), bias=True, pow2=True),
    # per-column operands of shape [1]
    Matmul("ui8", "i8", (4, 16), (16, 12), bz_per_column=True, scale_per_channel=True, single_zp=True),
]
INTEGER_MATMULS = [MATMULS[i] for i in (0, 2, 3, 4)]


def matmul_operands(case: Matmul, rng: np.random.Generator) -> list[np.ndarray]:
    a, b = ints(rng, case.ashape, case.a), ints(rng, case.bshape, case.b)
    az = ints(rng, (), case.a, *((100, 160) if case.a == "ui8" else (-20, 20)))
    n = case.bshape[-1]
    if case.bz_per_column:
        shape = (1,) if case.single_zp else (n,)
        bz = ints(rng, shape, case.b, *((100, 160) if case.b == "ui8" else (-10, 10)))
    else:
        bz = ints(rng, (), case.b, *((120, 136) if case.b == "ui8" else (-5, 5)))
    return [a, b, az, bz]


@pytest.mark.parametrize("case", params(INTEGER_MATMULS))
def test_matmul_integer(case: Matmul) -> None:
    check_op("matmul_integer", matmul_operands(case, rng_for("mmi", str(case))), {})


@pytest.mark.parametrize("case", params(MATMULS))
def test_qmatmul(case: Matmul) -> None:
    rng = rng_for("qmm", str(case))
    inputs = matmul_operands(case, rng)
    attrs: dict[str, Any] = {}
    acc = reference("matmul_integer", inputs, attrs)
    inputs += requant_operands(case, rng, acc, -1, case.bshape[-1], attrs)
    assert_spread(reference("qmatmul", inputs, attrs), attrs, case.y)
    check_op("qmatmul", inputs, attrs)


def assert_ties(acc: np.ndarray, scale: np.ndarray, yz: int) -> None:
    """acc * scale + yz has exact .5 ties above and below zero, rounding both up and down."""
    v = acc * scale.astype(np.float64) + yz
    ties = v[v - np.floor(v) == 0.5]
    assert np.any(ties > 0) and np.any(ties < 0), ties
    assert len(set(np.floor(ties).astype(int) % 2)) == 2, ties  # some round up to even, some down


def test_qmatmul_rounds_ties_to_even() -> None:
    """acc * 0.5 (a column at 0.25) with small accumulators: many outputs are exact ties."""
    rng = rng_for("qmm-ties")
    a, b = ints(rng, (6, 5), "i8", -3, 3), ints(rng, (5, 20), "ui8", 125, 131)
    scale = np.full(20, 0.5, np.float32)
    scale[3] = 0.25
    inputs = [a, b, np.array(0, np.int8), np.array(128, np.uint8), scale, np.array(3, np.int8)]
    assert_ties(reference("matmul_integer", inputs[:4], {}), scale, 3)
    check_op("qmatmul", inputs, {})


def test_qconv2d_rounds_ties_to_even() -> None:
    """Per-channel power-of-two scales on small accumulators, an odd output zero point and a bias."""
    rng = rng_for("qconv-ties")
    x, w = ints(rng, (1, 4, 5, 19), "ui8", 60, 68), ints(rng, (4, 4, 3, 3), "i8", -2, 2)
    scale = np.array([0.5, 0.25, 0.5, 0.125], np.float32)
    bias = np.array([1, -3, 0, 2], np.int32)
    inputs = [x, w, np.array(64, np.uint8), np.array(0, np.int8), scale, np.array(-5, np.int8), bias]
    attrs = {"pads": [1, 1, 1, 1]}
    acc = reference("conv2d_integer", inputs[:4], attrs) + bias.reshape(-1, 1, 1)
    assert_ties(acc, scale.reshape(-1, 1, 1), -5)
    check_op("qconv2d", inputs, attrs)


# quantize / dequantize --------------------------------------------------------------------------------------
TIES = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5, -127.5, 3.4999998, -3.5000002], np.float32)
"""x / scale for scale 1: ties round to even, the neighbours of a tie to the nearest."""


def quant_x(rng: np.random.Generator, shape: tuple[int, ...], spread: float) -> np.ndarray:
    """Values around the quantized range and past it on both sides, with ties (for a scale of 1 and powers
    of two) and infinities in the first elements."""
    x = rng.uniform(-spread, spread, shape).astype(np.float32)
    flat = x.reshape(-1)
    specials = np.concatenate([TIES, [np.inf, -np.inf, 1e9, -1e9, 0.0, -0.0]]).astype(np.float32)
    flat[: len(specials)] = specials[: flat.size]
    return x


@pytest.mark.parametrize("dtype", ["i8", "ui8"])
def test_quantize_per_tensor(dtype: str) -> None:
    rng = rng_for("q", dtype)
    x = quant_x(rng, (3, 37), 300.0)
    zp = np.array(-3 if dtype == "i8" else 121, NP[dtype])
    y = reference("quantize", [x, np.array(1.0, np.float32), zp], {})
    lo, hi = int_range(dtype)
    assert np.any(y == lo) and np.any(y == hi) and np.mean((y > lo) & (y < hi)) > 0.25
    check_op("quantize", [x, np.array(1.0, np.float32), zp])
    check_op("quantize", [x * np.float32(0.0123), np.array(0.0123, np.float32), zp])


@pytest.mark.parametrize("dtype", ["i8", "ui8"])
def test_quantize_per_axis(dtype: str) -> None:
    """Scale and zero point [1, C, 1, 1]: powers of two (exact ties in every channel) and an ordinary
    scale."""
    rng = rng_for("qa", dtype)
    scale = np.array([1.0, 0.25, 0.0078125, 0.0173], np.float32).reshape(1, 4, 1, 1)
    x = rng.uniform(-300, 300, (2, 4, 3, 5)).astype(np.float32) * scale
    x[0, :, 0, :] = TIES[:5] * scale[0, :, 0]  # exact products for the powers of two
    x[1, :, 0, :] = TIES[5:] * scale[0, :, 0]
    x[1, :, 2, :3] = [np.inf, -np.inf, -0.0]
    mid = 0 if dtype == "i8" else 128
    zp = (mid + np.array([0, -7, 5, 31])).astype(NP[dtype]).reshape(1, 4, 1, 1)
    y = reference("quantize", [x, scale, zp], {})
    lo, hi = int_range(dtype)
    assert np.any(y == lo) and np.any(y == hi) and np.mean((y > lo) & (y < hi)) > 0.25
    check_op("quantize", [x, scale, zp])


@pytest.mark.parametrize("dtype", ["i8", "ui8"])
def test_dequantize_per_tensor(dtype: str) -> None:
    x = np.arange(*int_range(dtype), dtype=np.int64)
    x = np.append(x, int_range(dtype)[1]).astype(NP[dtype]).reshape(16, 16)
    zp = np.array(-5 if dtype == "i8" else 130, NP[dtype])
    check_op("dequantize", [x, np.array(0.0123, np.float32), zp], rtol=0, atol=0)


@pytest.mark.parametrize("dtype", ["i8", "ui8"])
def test_dequantize_per_axis(dtype: str) -> None:
    rng = rng_for("dqa", dtype)
    x = ints(rng, (2, 3, 4, 7), dtype)
    scale = np.array([0.0123, 0.25, 3.7e-3], np.float32).reshape(1, 3, 1, 1)
    zp = ((0 if dtype == "i8" else 128) + np.array([0, -9, 17])).astype(NP[dtype]).reshape(1, 3, 1, 1)
    check_op("dequantize", [x, scale, zp], rtol=0, atol=0)


# qadd: onnxruntime's QLinearAdd to the bit ----------------------------------------------------------------
def ort_qlinear_add(a: np.ndarray, b: np.ndarray, attrs: dict[str, Any],
                    op: str = "QLinearAdd") -> np.ndarray:
    """onnxruntime's com.microsoft QLinearAdd (or `op`: QLinearMul) on a and b with `attrs`' scales and
    zero points."""
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    et = TensorProto.UINT8 if a.dtype == np.uint8 else TensorProto.INT8
    inits = [numpy_helper.from_array(np.array(attrs[k], np.float32), k)
             for k in ("a_scale", "b_scale", "scale")]
    inits += [numpy_helper.from_array(np.array(attrs[k], a.dtype), k)
              for k in ("a_zero_point", "b_zero_point", "zero_point")]
    names = ["a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point", "scale", "zero_point"]
    node = helper.make_node(op, names, ["y"], domain="com.microsoft")
    out = np.broadcast_shapes(a.shape, b.shape)
    graph = helper.make_graph([node], "qadd", [helper.make_tensor_value_info("a", et, a.shape),
                                               helper.make_tensor_value_info("b", et, b.shape)],
                              [helper.make_tensor_value_info("y", et, out)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"a": a, "b": b})[0]


@pytest.mark.parametrize("dtype, a_shape, b_shape", [
    ("ui8", (2, 24, 9, 11), (2, 24, 9, 11)),  # a residual add
    ("ui8", (1, 8, 5, 7), (1, 8, 1, 1)),  # broadcast
    ("i8", (3, 70), (3, 70)),
])
@pytest.mark.parametrize("seed", range(3))
def test_qadd_is_onnxruntimes_qlinear_add(dtype: str, a_shape: tuple, b_shape: tuple, seed: int) -> None:
    """qadd's reference and its OpenCL kernel give onnxruntime's QLinearAdd to the bit on random 8-bit
    tensors and scales (float32 fmas from the integers; the float dequantize / add / quantize chain
    differs from it on a few elements)."""
    rng = rng_for("qadd", dtype, a_shape, b_shape, seed)
    a, b = ints(rng, a_shape, dtype), ints(rng, b_shape, dtype)
    zlo, zhi = (90, 160) if dtype == "ui8" else (-30, 30)
    def scale(lo: float, hi: float) -> float:
        return float(np.float32(rng.uniform(lo, hi)))

    attrs = {"a_scale": scale(0.01, 0.1), "a_zero_point": int(rng.integers(zlo, zhi)),
             "b_scale": scale(0.01, 0.1), "b_zero_point": int(rng.integers(zlo, zhi)),
             "scale": scale(0.02, 0.15), "zero_point": int(rng.integers(zlo, zhi))}
    want = ort_qlinear_add(a, b, attrs)
    np.testing.assert_array_equal(reference("qadd", [a, b], attrs), want)
    check_op("qadd", [a, b], attrs)


def test_qadd_takes_every_byte_pair_as_onnxruntime() -> None:
    """Every (a, b) byte pair at a PP-OCR v6 recognizer's residual-add parameters, against onnxruntime:
    its fixed part is fma(a_scale / scale, a_zp, b_scale / scale * b_zp) as its AVX2 kernel's compiler
    contracts it (with two roundings, (68, 157) gave 79 where onnxruntime gives 80)."""
    a, b = (v.astype(np.uint8).reshape(1, 256, 256) for v in np.meshgrid(np.arange(256), np.arange(256),
                                                                         indexing="ij"))
    attrs = {"a_scale": 0.014396716840565205, "a_zero_point": 22, "b_scale": 0.003457860089838505,
             "b_zero_point": 129, "scale": 0.015650909394025803, "zero_point": 31}
    want = ort_qlinear_add(a, b, attrs)
    np.testing.assert_array_equal(reference("qadd", [a, b], attrs), want)
    check_op("qadd", [a, b], attrs)


@pytest.mark.parametrize("attrs", [
    {"a_scale": 0.0213, "a_zero_point": 120, "b_scale": 0.0297, "b_zero_point": 130, "scale": 0.3,
     "zero_point": 125},
    {"a_scale": 0.05, "a_zero_point": 3, "b_scale": 0.011, "b_zero_point": 0, "scale": 0.04,
     "zero_point": 7}])
def test_qmul_takes_every_byte_pair_as_onnxruntime(attrs: dict[str, Any]) -> None:
    """qmul's reference and its OpenCL kernel give onnxruntime's QLinearMul to the bit on every (a, b)
    byte pair: the integer product times the float32 ratio, then the zero point, two roundings."""
    a, b = (v.astype(np.uint8).reshape(1, 256, 256) for v in np.meshgrid(np.arange(256), np.arange(256),
                                                                         indexing="ij"))
    want = ort_qlinear_add(a, b, attrs, "QLinearMul")
    np.testing.assert_array_equal(reference("qmul", [a, b], attrs), want)
    check_op("qmul", [a, b], attrs)


# qsoftmax: onnxruntime's QLinearSoftmax to the bit ---------------------------------------------------------
def ort_qdq_softmax(x: np.ndarray, axis: int, attrs: dict[str, Any]) -> np.ndarray:
    """onnxruntime on dequantize -> Softmax -> quantize of ui8 x (it fuses them into QLinearSoftmax)."""
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(np.array(attrs["x_scale"], np.float32), "xs"),
             numpy_helper.from_array(np.array(117, np.uint8), "xz"),
             numpy_helper.from_array(np.array(attrs["y_scale"], np.float32), "ys"),
             numpy_helper.from_array(np.array(attrs["y_zero_point"], np.uint8), "yz")]
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["d"]),
             helper.make_node("Softmax", ["d"], ["s"], axis=axis),
             helper.make_node("QuantizeLinear", ["s", "ys", "yz"], ["y"])]
    io = [helper.make_tensor_value_info(n, TensorProto.UINT8, x.shape) for n in ("x", "y")]
    graph = helper.make_graph(nodes, "qsoftmax", io[:1], io[1:], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


@pytest.mark.parametrize("shape, axis, y_scale, y_zero_point", [
    ((64, 16), -1, 1 / 255, 0),  # a YOLO head's DFL: 16 bins a box
    ((2, 4, 9, 40), -1, 1 / 256, 0),  # attention scores: rows of a sequence
    ((3, 7, 5), 1, 0.0039, 3),  # not the last axis
])
def test_qsoftmax_is_onnxruntimes_qlinear_softmax(shape: tuple, axis: int, y_scale: float,
                                                  y_zero_point: int) -> None:
    """qsoftmax's reference and its OpenCL kernel give onnxruntime's QLinearSoftmax to the bit (its table,
    float sums left to right, floor(1 / y_scale)); the float chain rounds 6% of a DFL's values apart."""
    rng = rng_for("qsoftmax", str(shape), axis)
    x = ints(rng, shape, "ui8")
    attrs = {"axis": axis, "x_scale": float(np.float32(rng.uniform(0.02, 0.2))), "y_scale": y_scale,
             "y_zero_point": y_zero_point}
    want = ort_qdq_softmax(x, axis, attrs)
    np.testing.assert_array_equal(reference("qsoftmax", [x], attrs), want)
    check_op("qsoftmax", [x], attrs)


PAIRS_PROBE = r"""
import glob, os, subprocess, sys
import numpy as np
import pyopencl as cl
from tessel.targets.opencl.kernels.testing import check_op

probe = "__kernel void k(__global int* y) { int f = 0;\n#ifdef __AVX512BW__\nf = 1;\n#endif\n"
probe += "#ifdef __AVX2__\nf |= 2;\n#endif\ny[0] = f; }"
ctx = cl.create_some_context(interactive=False)
q = cl.CommandQueue(ctx)
y = cl.Buffer(ctx, cl.mem_flags.WRITE_ONLY, 4)
cl.Program(ctx, probe).build().k(q, (1,), (1,), y)
f = np.empty(1, np.int32)
cl.enqueue_copy(q, f, y)
q.finish()
print("isa", int(f[0]))
rng = np.random.default_rng(0)
x = rng.integers(0, 256, (1, 20, 6, 7)).astype(np.uint8)
w = rng.integers(-128, 128, (32, 20, 3, 3)).astype(np.int8)
check_op("conv2d_integer", [x, w, np.array(120, np.uint8), np.array(0, np.int8)],
         {"strides": [1, 1], "pads": [1, 1, 1, 1], "dilations": [1, 1], "groups": 1})
for so in glob.glob(os.path.join(os.environ["POCL_CACHE_DIR"], "**", "*conv2d_integer*.so"), recursive=True):
    text = subprocess.run(["objdump", "-d", so], capture_output=True, text=True, check=True).stdout
    print("so", os.path.basename(so), "vpmaddwd" in text, "vpmulld" in text)
"""


def test_paired_channel_conv_multiplies_pairs_with_vpmaddwd(tmp_path) -> None:  # noqa: ANN001
    """Disassembling PoCL's cache: where the device compiler targets AVX-512BW or AVX2, the paired-channel
    integer conv's inner loop is vpmaddwd (16-bit pair multiply-adds), not vpmulld. Skips on other
    devices and without objdump."""

    from .conftest import pocl_probe

    out = pocl_probe(tmp_path, PAIRS_PROBE)
    isa = int(re.search(r"isa (\d+)", out).group(1))  # type: ignore[union-attr]
    if not isa:
        pytest.skip("the device compiler targets neither AVX-512BW nor AVX2")
    main = [line.split()[2:] for line in out.splitlines()
            if line.startswith("so ") and "_conv2d_integer" in line]
    assert main, out
    assert any(v == ["True", "False"] for v in main), out  # vpmaddwd, and no vpmulld left in the main kernel


@pytest.mark.parametrize("case, schedule", [
    (Conv("ui8", "i8", 1, 24, (7, 7), 20, 1, wz_per_channel=True, scale_per_channel=True, bias=True), {}),
    (Conv("ui8", "i8", 2, 9, (4, 4), 12, 1, bias=True, bounds="relu"), {"rows": 4, "vcols": 1}),
    (Conv("i8", "ui8", 1, 16, (5, 9), 16, 1, groups=2, wz_per_channel=True), {"rows": 8, "vcols": 3}),
    (Conv("ui8", "i8", 1, 33, (6, 11), 40, 1, scale_per_channel=True, y="i8"), {"vcols": 4}),
    (Conv("ui8", "i8", 1, 24, (7, 7), 20, 1, wz_per_channel=True), {"pointwise": 0}),
    # 300 outputs: 38 row blocks, two work-groups a panel, each interleaving it into its own slice
    (Conv("i8", "i8", 2, 7, (5, 7), 300, 1, bias=True), {}),
    # the repack launch kept
    (Conv("ui8", "i8", 2, 9, (4, 4), 12, 1, bias=True, bounds="relu"), {"group_repack": 0}),
    (Conv("i8", "ui8", 1, 16, (5, 9), 16, 1, groups=2, wz_per_channel=True), {"group_repack": 0, "vcols": 3}),
], ids=["tail-1", "batch-16px", "groups-odd-rows", "odd-channels", "channel-lanes", "two-groups-a-panel",
        "repack-launch", "repack-launch-groups"])
def test_pointwise_integer_conv_is_a_pixel_gemm(case: Conv, schedule: dict[str, int]) -> None:
    """Unpadded stride-1 1x1 integer convs of 16+ pixels lower as GEMMs over pixel vectors with input
    channels in pairs (a plane's last vector ending at its end: 49 pixels, one new lane; 16 pixels, one
    vector), exact for qconv2d and conv2d_integer, any rows / vcols / groups / odd channel counts;
    pointwise=0 keeps the channel-lane kernel; rows other than 4 or 8 are refused. Each work-group
    interleaves its own panel's pairs (one launch), or with group_repack=0 a repack launch does first."""
    rng = rng_for("pw", str(case), str(schedule))
    inputs, attrs = conv_operands(case, rng)
    low = lower_op("conv2d_integer", [TensorType.of(a) for a in inputs], attrs, schedule=schedule)[1]
    assert low.schedule.get("pointwise", 0) == schedule.get("pointwise", 1)
    if low.schedule.get("pointwise"):
        in_group = schedule.get("group_repack", 1)
        assert low.schedule["group_repack"] == in_group and len(low.kernels) == (1 if in_group else 2)
        assert ("barrier(CLK_GLOBAL_MEM_FENCE)" in low.kernels[-1].source) == bool(in_group)
    check_op("conv2d_integer", inputs, attrs, schedule=schedule)
    acc = reference("conv2d_integer", inputs, attrs)
    inputs += requant_operands(case, rng, acc, 1, case.m, attrs)
    check_op("qconv2d", inputs, attrs, schedule=schedule)
    with pytest.raises(NotLowerable, match="rows=5"):
        lower_op("qconv2d", [TensorType.of(a) for a in inputs], attrs, schedule={"rows": 5})


LOOKUPS = [("ui8", (1, 4, 8, 9), "ui8"), ("i8", (3, 37), "f32"), ("i8", (5,), "i8"), ("ui8", (2, 0), "ui8"),
           ("i8", (2, 3, 19, 23), "ui8"), ("ui8", (64,), "i8"), ("ui8", (1, 96, 12, 12), "ui8")]


@pytest.mark.parametrize("permute", [False, True])
@pytest.mark.parametrize("x, shape, table", LOOKUPS)
def test_lookup(x: str, shape: tuple[int, ...], table: str, permute: bool) -> None:
    """table[x] (fold-lookup's tabulated chains): x's byte read as unsigned, 16 elements a work-item and
    the tail one at a time; with the device's byte permute (AVX-512 VBMI), a byte table of 64 elements or
    more 64 at a time, the last 64 ending at the end (skips where the device has none); exact."""
    import dataclasses

    from tessel.targets.opencl.kernels.gather import PERMUTE

    from .conftest import here

    info = here()
    if permute and not info.has(PERMUTE):
        pytest.skip("the device has no byte permute")
    info = info if permute else dataclasses.replace(info, byte_permute="")
    rng = rng_for("lookup", x, str(shape), table)
    t = ints(rng, (256,), table) if table != "f32" else rng.standard_normal(256).astype(np.float32)
    xs = ints(rng, shape, x)
    low = lower_op("lookup", [TensorType.of(xs), TensorType.of(t)], {}, info=info)[1]
    permuted = permute and table != "f32" and xs.size >= 64
    assert low.schedule.get("vector") == (64 if permuted else 16 if xs.size else None), low.schedule
    check_op("lookup", [xs, t], {}, constant=(False, True), info=info)


def test_the_channel_lane_depthwise_kernel_refuses_what_it_cannot_take() -> None:
    """depthwise=3 takes one output channel an input channel and 1..16 columns an item."""
    case = Conv("ui8", "i8", 1, 4, (7, 7), 8, 3, pad=(1, 1, 1, 1), groups=4)
    inputs, attrs = conv_operands(case, rng_for("dw3-refused"))
    types = [TensorType.of(a) for a in inputs]
    with pytest.raises(NotLowerable, match="one output channel an input channel"):
        lower_op("conv2d_integer", types, attrs, schedule={"depthwise": 3})
    case = Conv("ui8", "i8", 1, 16, (7, 7), 16, 3, pad=(1, 1, 1, 1), groups=16)
    inputs, attrs = conv_operands(case, rng_for("dw3-refused"))
    with pytest.raises(NotLowerable, match="cols=17"):
        lower_op("conv2d_integer", [TensorType.of(a) for a in inputs], attrs,
                 schedule={"depthwise": 3, "cols": 17})


def test_a_module_for_the_byte_permute_is_refused_where_the_device_lacks_it(monkeypatch) -> None:  # noqa: ANN001
    """A lookup lowered for AVX-512 VBMI would stop the process with an illegal instruction on a CPU
    without it: the Executable refuses it (TESSEL_BYTE_PERMUTE=0 makes this device one without)."""
    import dataclasses

    from tessel.ir.diagnostics import DiagnosticError
    from tessel.targets.opencl.kernels.base import DeviceInfo
    from tessel.targets.opencl.kernels.testing import run_op

    monkeypatch.setenv("TESSEL_BYTE_PERMUTE", "0")
    rng = rng_for("vbmi-missing")
    x, t = ints(rng, (2, 64), "ui8"), ints(rng, (256,), "ui8")
    info = dataclasses.replace(DeviceInfo.generic(), byte_permute="avx512vbmi")
    with pytest.raises(DiagnosticError, match="compiled for a device with avx512vbmi"):
        run_op("lookup", [x, t], {}, info=info, constant=(False, True))


DEPTHWISE = [  # a case, its schedule, the kernel taken (schedule `depthwise`: 3 channel lanes, 2 band, 1
    # repacked, 0 integer)
    (Conv("ui8", "i8", 1, 8, (13, 15), 8, 3, pad=(1, 1, 1, 1), groups=8, bias=True, scale_per_channel=True),
     {}, 2),
    # stride 2 (the even / odd phase split), per-channel weight zero points, batch 2, 4 rows an item
    (Conv("ui8", "i8", 2, 12, (13, 34), 12, 3, stride=2, pad=(1, 1, 1, 1), groups=12, wz_per_channel=True,
          bias=True, bounds="relu"), {"depthwise": 2, "rows": 4}, 2),
    # i8 input, ui8 weights, 5x5 stride 2 with asymmetric pads, a channel multiplier of 2, 3 rows an item
    (Conv("i8", "ui8", 1, 4, (20, 37), 8, 5, stride=2, pad=(2, 1, 2, 3), groups=4, bias=True, y="i8"),
     {"rows": 3}, 2),
    # dilation 2, 7 columns (one partial vector), stride 3 with a 7x7 kernel
    (Conv("ui8", "i8", 1, 3, (7, 7), 3, 3, pad=(2, 2, 2, 2), dilation=2, groups=3), {}, 2),
    (Conv("ui8", "i8", 1, 2, (11, 11), 2, 7, stride=3, pad=(3, 3, 3, 3), groups=2, bias=True),
     {"rows": 1}, 2),
    # a band of 7 items across 112 columns, several bands down the rows; stride 2 over 3 items
    (Conv("ui8", "i8", 1, 3, (40, 112), 3, 3, pad=(1, 1, 1, 1), groups=3, bias=True), {}, 2),
    (Conv("i8", "i8", 1, 2, (30, 90), 2, 3, stride=2, pad=(0, 1, 1, 0), groups=2), {"rows": 2}, 2),
    # 20 small maps, 5x5 with a dilation of 2 reaching past the band's rows
    (Conv("ui8", "i8", 1, 20, (6, 6), 20, 5, pad=(4, 4, 4, 4), dilation=2, groups=20, bias=True),
     {"depthwise": 2}, 2),
    # wider than 8 vectors: the repacked kernel; and asked for
    (Conv("ui8", "i8", 1, 2, (5, 140), 2, 3, pad=(1, 1, 1, 1), groups=2), {}, 1),
    (Conv("ui8", "i8", 2, 12, (13, 34), 12, 3, stride=2, pad=(1, 1, 1, 1), groups=12, wz_per_channel=True,
          bias=True), {"depthwise": 1}, 1),
    (Conv("i8", "ui8", 1, 4, (20, 37), 8, 5, stride=2, pad=(2, 1, 2, 3), groups=4, y="i8"),
     {"depthwise": 1, "rows": 3}, 1),
    # the integer kernel kept by depthwise=0
    (Conv("ui8", "i8", 1, 8, (13, 15), 8, 3, pad=(1, 1, 1, 1), groups=8, bias=True), {"depthwise": 0}, 0),
    # 16 channels in the lanes, the default where rows of 8 columns or fewer fill at most half of theirs:
    # whole channel blocks on a 7-column map (items of 4 columns, the second overlapping the first); a
    # partial block (20 channels), stride 2 and per-channel weight zero points; not on a 10-column map
    (Conv("ui8", "i8", 1, 32, (7, 7), 32, 3, pad=(1, 1, 1, 1), groups=32, bias=True, bounds="relu"), {}, 3),
    (Conv("ui8", "i8", 1, 20, (7, 7), 20, 3, stride=2, pad=(1, 1, 1, 1), groups=20, wz_per_channel=True,
          bias=True), {}, 3),
    (Conv("ui8", "i8", 1, 32, (10, 10), 32, 3, pad=(1, 1, 1, 1), groups=32, bias=True), {}, 2),
    # asked for: 17 columns in items of 8 (the last overlapping), batch 2; 16 columns an item; 5 (stored
    # a lane at a time)
    (Conv("ui8", "i8", 2, 12, (13, 34), 12, 3, stride=2, pad=(1, 1, 1, 1), groups=12, wz_per_channel=True,
          bias=True, bounds="relu"), {"depthwise": 3, "cols": 8}, 3),
    (Conv("ui8", "i8", 1, 32, (18, 18), 32, 3, pad=(1, 1, 1, 1), groups=32, bias=True), {"depthwise": 3}, 3),
    (Conv("i8", "i8", 1, 16, (9, 9), 16, 3, pad=(1, 1, 1, 1), groups=16, y="i8"), {"depthwise": 3, "cols": 5},
     3),
    # asked for: i8 input and ui8 weights, 5x5 stride 2 with asymmetric pads; a dilation of 2 reaching
    # past the map
    (Conv("i8", "ui8", 1, 4, (20, 37), 4, 5, stride=2, pad=(2, 1, 2, 3), groups=4, y="i8"),
     {"depthwise": 3, "cols": 3}, 3),
    (Conv("ui8", "i8", 1, 20, (6, 6), 20, 5, pad=(4, 4, 4, 4), dilation=2, groups=20, bias=True),
     {"depthwise": 3}, 3),
]


@pytest.mark.parametrize("case, schedule, kind", DEPTHWISE, ids=[f"{c}-{s}" for c, s, _ in DEPTHWISE])
def test_depthwise_integer_conv_in_float_is_exact(case: Conv, schedule: dict[str, int], kind: int) -> None:
    """One input channel a group: float FMAs give the i32 accumulator exactly (qconv_depthwise.py), any
    stride (phase-split band, repack or channel lanes), dilation, padding, channel multiplier and rows an
    item; the channel-lane kernel where its lanes pay, the band kernel up to 8 vectors of columns, the
    repacked one past that or when asked; depthwise=0 keeps the integer kernel; rows past 8 are refused."""
    rng = rng_for("dw", str(case), str(schedule))
    inputs, attrs = conv_operands(case, rng)
    low = lower_op("conv2d_integer", [TensorType.of(a) for a in inputs], attrs, schedule=schedule)[1]
    assert low.schedule.get("depthwise", 0) == kind
    if kind == 2:  # one kernel, no repack launch, in the form cooperative execution runs as two phases
        from tessel.targets.opencl.cooperative import phased

        (k,) = low.kernels
        assert phased(k.source[k.source.index("{", k.source.index("__kernel")):]) is not None
    if kind in (1, 2) and case.stride == 2:  # a stride-2 row's phases split by clang's shuffle, where
        # PoCL's shuffle2 is a library call (kept only for other compilers)
        assert "KERNEL_EVENS(vload16" in "".join(k.source for k in low.kernels)
    check_op("conv2d_integer", inputs, attrs, schedule=schedule)
    acc = reference("conv2d_integer", inputs, attrs)
    inputs += requant_operands(case, rng, acc, 1, case.m, attrs)
    check_op("qconv2d", inputs, attrs, schedule=schedule)
    with pytest.raises(NotLowerable, match="rows=9"):
        lower_op("qconv2d", [TensorType.of(a) for a in inputs], attrs, schedule={"depthwise": 2, "rows": 9})


@pytest.mark.parametrize("dtype, shape, k, s, pads, ceil", [
    ("ui8", (1, 3, 13, 17), 3, 2, (0, 0, 0, 0), True), ("i8", (2, 4, 9, 40), 3, 1, (1, 1, 1, 1), False),
    ("ui8", (1, 2, 56, 56), 3, 2, (1, 1, 1, 1), False), ("i8", (1, 2, 7, 7), 2, 2, (0, 0, 0, 0), True)])
def test_integer_max_pool(dtype: str, shape: tuple[int, ...], k: int, s: int, pads: tuple[int, ...],
                          ceil: bool) -> None:
    """8-bit max pools (fold-qdq moves a QDQ model's onto the integers): padding at the type's minimum
    never wins; vector interior and scalar edges, exact."""
    x = ints(rng_for("maxpool", dtype, str(shape)), shape, dtype)
    check_op("max_pool2d", [x], {"kernel": [k, k], "strides": [s, s], "pads": list(pads), "ceil_mode": ceil})


# dynamic_quantize: onnxruntime's DynamicQuantizeLinear to the bit -------------------------------------------
def ort_dynamic_quantize(x: np.ndarray) -> list[np.ndarray]:
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])
    outs = [helper.make_tensor_value_info("y", TensorProto.UINT8, x.shape),
            helper.make_tensor_value_info("s", TensorProto.FLOAT, []),
            helper.make_tensor_value_info("z", TensorProto.UINT8, [])]
    graph = helper.make_graph([node], "dql", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              outs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})


def dynamic_quantize_reference(x: np.ndarray) -> list[np.ndarray]:
    opdef = get_op("dynamic_quantize")
    assert opdef is not None
    sig = opdef.sig([TensorType.of(x)], {})
    sig.results = opdef.infer(sig)
    return list(opdef.reference(sig, x))


def dynamic_quantize_input(kind: str, shape: tuple[int, ...]) -> np.ndarray:
    rng = rng_for("dynamic_quantize", kind, str(shape))
    if kind == "ties":  # range [-1, 127/128]: scale 1/128, zero point 128, every x / scale halfway
        x = (rng.integers(-128, 127, shape) + 0.5) / 128
        x.flat[:2] = -1.0, 127 / 128
        return x.astype(np.float32)
    x = rng.standard_normal(shape).astype(np.float32) * 3
    return {"mixed": x, "positive": np.abs(x) + 0.5, "negative": -np.abs(x) - 0.5}[kind]


@pytest.mark.parametrize("kind, shape", [
    ("mixed", (2, 64, 128)),  # a BERT layer's activations: 4 slices
    ("mixed", (3, 70001)),  # 64 slices, none a multiple of 16
    ("ties", (5, 33)),  # one slice, a scalar tail
    ("ties", (9000,)),
    ("positive", (17, 19)),  # the range widened to hold 0: zero point 0
    ("negative", (1000,)),  # zero point 255
])
def test_dynamic_quantize_is_onnxruntimes(kind: str, shape: tuple[int, ...]) -> None:
    """dynamic_quantize's reference and its two-launch kernel give onnxruntime's DynamicQuantizeLinear to
    the bit: the range's min and max, the scale and zero point in float32, ties rounded to even."""
    x = dynamic_quantize_input(kind, shape)
    want = ort_dynamic_quantize(x)
    got = dynamic_quantize_reference(x)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
    check_op("dynamic_quantize", [x])


def test_dynamic_quantize_of_zeros() -> None:
    """A range of one point (x all zeros) takes scale 1/255 and zero point 0 in the kernel as in the
    reference (the spec's 0/0 has no value)."""
    check_op("dynamic_quantize", [np.zeros((4, 40), np.float32)])
    y, scale, zp = dynamic_quantize_reference(np.zeros((4, 40), np.float32))
    assert scale == np.float32(1 / 255) and zp == 0 and not y.any()
