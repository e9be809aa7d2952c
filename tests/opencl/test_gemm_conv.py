"""The gemm and conv templates against the registry references, on small shapes that still exercise every
path: M/N/K tails, packed and unpacked A, batch broadcasting, gemm's transposes and C broadcasts, conv
strides/pads/dilations, grouped, depthwise and channel counts off the 16-blocking. Each case is one PoCL
build, so the list is kept short."""

from __future__ import annotations

import numpy as np
import pytest
from tessel.ir.types import TensorType
from tessel.targets.opencl.kernels.base import NotLowerable
from tessel.targets.opencl.kernels.testing import check_op, lower_op

TOL = {"rtol": 1e-4, "atol": 1e-4}
rng = np.random.default_rng(7)


def arr(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("a, b", [
    ((33, 20), (20, 40)),  # M tail (rows 16 -> 33 = 2 x 17) and N tail (40 = 2.5 x 16)
    ((1, 100), (100, 37)),  # GEMV: one row, split accumulators, A unpacked
    ((7,), (7, 5)),  # 1-D A
    ((4, 7), (7,)),  # 1-D B: one column
    ((2, 3, 17, 9), (3, 9, 18)),  # batched, B broadcast over the leading batch dim
    ((2, 1, 5, 4), (3, 4, 6)),  # both operands broadcast
    ((64, 48), (48, 64)),  # no tails
])
def test_matmul(a: tuple[int, ...], b: tuple[int, ...]) -> None:
    check_op("matmul", [arr(*a), arr(*b)], **TOL)


def test_matmul_schedule_override() -> None:
    check_op("matmul", [arr(30, 10), arr(10, 24)], schedule={"rows": 7, "cols": 8}, **TOL)
    _, low = lower_op("matmul", [TensorType((30, 10), "f32"), TensorType((10, 24), "f32")], {},
                      schedule={"rows": 7, "cols": 8})
    assert low.schedule == {"rows": 7, "cols": 8}


@pytest.mark.parametrize("a, b, c, attrs", [
    ((9, 33), (20, 9), (20,), {"trans_a": True, "trans_b": True, "alpha": 0.5, "beta": 2.0}),
    ((33, 9), (9, 20), (33, 1), {}),  # C broadcast along N
    ((1, 9), (20, 9), None, {"trans_b": True}),  # an FC layer at batch 1
    ((5, 9), (9, 3), (), {"alpha": -1.0, "beta": 0.25}),  # scalar C, narrow N
])
def test_gemm(a, b, c, attrs) -> None:
    ins = [arr(*a), arr(*b)] + ([] if c is None else [arr(*c)])
    check_op("gemm", ins, attrs, **TOL)


def conv_case(n, c, o, hw, k, *, s=1, p=0, d=1, g=1, bias=True):
    h, w = hw if isinstance(hw, tuple) else (hw, hw)
    attrs = {"strides": [s, s] if isinstance(s, int) else s, "pads": [p] * 4 if isinstance(p, int) else p,
             "dilations": [d, d], "groups": g}
    return [arr(n, c, h, w), arr(o, c // g, k, k)] + ([arr(o)] if bias else []), attrs


@pytest.mark.parametrize("case", [
    conv_case(1, 16, 16, 8, 3, p=1),  # 3x3 same, blocks exact
    conv_case(1, 3, 20, (17, 19), 3, s=2, p=1),  # RGB stem-like: 3 input channels, O tail
    conv_case(2, 5, 7, 9, 1, bias=False),  # batch 2, 1x1, no bias, narrow O
    conv_case(1, 12, 6, 10, 3, p=[1, 0, 2, 1], d=2, g=3),  # asymmetric pads, dilation, groups 3
    conv_case(1, 3, 8, 23, 11, s=4, p=2),  # alexnet-like 11x11 stride 4
    conv_case(1, 40, 48, 7, 3, p=1, g=2),  # grouped, 20 channels a group (blocks of 10), 7x7 (2-row tiles)
    conv_case(1, 24, 48, 6, 1, g=8),  # shufflenet-like grouped 1x1, 6 outputs a group
    conv_case(1, 96, 32, 9, 3, p=1),  # densenet-like 3x3 with 96 channels
    conv_case(1, 32, 32, 12, 3, s=2, p=1, g=32),  # depthwise stride 2
    conv_case(2, 20, 20, (9, 11), 5, p=2, g=20),  # depthwise 5x5, channel tail, batch 2
    conv_case(1, 8, 16, 9, 3, p=1, g=8),  # channel multiplier 2: the grouped path
])
def test_conv2d(case) -> None:
    check_op("conv2d", *case, **TOL)


def test_conv2d_schedule_override() -> None:
    ins, attrs = conv_case(1, 16, 16, 10, 3, p=1)
    check_op("conv2d", ins, attrs, schedule={"tile_h": 2, "tile_w": 5, "cols": 8}, **TOL)


def test_source_is_deterministic() -> None:
    types = [TensorType((1, 64, 14, 14), "f32"), TensorType((64, 64, 3, 3), "f32"), TensorType((64,), "f32")]
    attrs = {"strides": [1, 1], "pads": [1, 1, 1, 1], "dilations": [1, 1], "groups": 1}
    one = lower_op("conv2d", types, attrs)[1]
    two = lower_op("conv2d", types, attrs)[1]
    assert [k.source for k in one.kernels] == [k.source for k in two.kernels]
    assert one.schedule == {"tile_h": 1, "tile_w": 14, "cols": 16, "cin_block": 16}
    assert one.pack[1].inner_tiles == (16, 16)


def test_epilogue_hook() -> None:
    from tessel.targets.opencl.kernels.conv import lower_conv2d
    from tessel.targets.opencl.kernels.gemm import lower_matmul

    relu = lambda v, i, n: f"fmax({v}, 0.0f)"  # noqa: E731
    types = [TensorType((1, 16, 8, 8), "f32"), TensorType((16, 16, 3, 3), "f32")]
    ctx, _ = lower_op("conv2d", types, {"pads": [1, 1, 1, 1]})
    assert "fmax(" in lower_conv2d(ctx, relu).kernels[-1].source
    ctx, _ = lower_op("matmul", [TensorType((8, 8), "f32"), TensorType((8, 8), "f32")], {})
    assert "fmax(" in lower_matmul(ctx, relu).kernels[-1].source


@pytest.mark.parametrize("op, types, attrs, reason", [
    ("matmul", [TensorType((4, 4), "f16"), TensorType((4, 4), "f16")], {}, "f32 only"),
    ("matmul", [TensorType((None, 4), "f32"), TensorType((4, 4), "f32")], {}, "dynamic shape"),
    ("gemm", [TensorType((4, 4), "f64"), TensorType((4, 4), "f64")], {}, "f32 only"),
    ("conv2d", [TensorType((1, 4, 8, 8), "f16"), TensorType((4, 4, 3, 3), "f16")], {}, "f32 only"),
    ("conv2d", [TensorType((None, 4, 8, 8), "f32"), TensorType((4, 4, 3, 3), "f32")], {}, "dynamic shape"),
    ("matmul", [TensorType((4, 4), "f32"), TensorType((4, 4), "f32")], {"schedule": {"cols": 3}}, "cols=3"),
])
def test_not_lowerable(op, types, attrs, reason) -> None:
    schedule = attrs.pop("schedule", None)
    with pytest.raises(NotLowerable, match=reason):
        lower_op(op, types, attrs, schedule=schedule)


@pytest.mark.parametrize("attrs,xs,ws", [
    ({}, (1, 3, 5, 5), (3, 4, 3, 3)),
    ({"strides": [2, 2], "pads": [1, 0, 1, 1], "output_padding": [1, 0], "bias": True},
     (2, 4, 4, 3), (4, 2, 3, 2)),
    ({"strides": [2, 1], "dilations": [2, 2], "groups": 2}, (1, 4, 3, 4), (4, 3, 2, 3)),
])
def test_conv_transpose2d(attrs: dict, xs: tuple, ws: tuple) -> None:
    rng = np.random.default_rng(3)
    attrs = dict(attrs)
    ins = [rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ws).astype(np.float32)]
    if attrs.pop("bias", False):
        ins.append(rng.standard_normal(ws[1] * attrs.get("groups", 1)).astype(np.float32))
    check_op("conv_transpose2d", ins, attrs, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("c,o,g,k", [(136, 136, 4, 1), (60, 40, 4, 3), (24, 30, 3, 1)])
def test_grouped_conv_with_padded_group_columns(c: int, o: int, g: int, k: int) -> None:
    """Groups of 34, 10 or 10 output channels get 16- or 8-wide columns padded per group."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, c, 9, 11)).astype(np.float32)
    w = rng.standard_normal((o, c // g, k, k)).astype(np.float32)
    b = rng.standard_normal(o).astype(np.float32)
    check_op("conv2d", [x, w, b], {"groups": g, "pads": [k // 2] * 4}, rtol=1e-4, atol=1e-4)
