"""Winograd F(2x2, 3x3) convolutions (targets/opencl/kernels/winograd.py) and the winograd_filter ops."""

from __future__ import annotations

import numpy as np
import pytest
from tessel.ir.ops.registry import OpError, get_op, load_all
from tessel.ir.ops.winograd import filter_shape, transform_filter, untransform_filter
from tessel.ir.types import TensorType
from tessel.targets.opencl.kernels.base import DeviceInfo, NotLowerable
from tessel.targets.opencl.kernels.conv import lower_conv2d

from .test_blocked_conv import check_blocked, conv_case, make_ctx

load_all()
CONST = (False, True, True)  # constant weights and bias, as in a model


@pytest.mark.parametrize("case, pads, blocks", [
    ((1, 32, 40, 9, 3), 1, (0, 0)),  # odd output: tiles past the edge, a partial block of 8 channels
    ((1, 32, 40, 9, 3), 0, (16, 16)),
    ((1, 32, 32, 8, 3), 1, (16, 16)),
    ((2, 20, 33, 7, 3), 1, (0, 16)),  # batch 2, NCHW input of 20 channels (zero lanes past C)
    ((2, 20, 33, (6, 11), 3), 0, (16, 0)),  # blocked input of a partial block, rectangular
    ((1, 48, 16, 10, 3), [0, 1, 2, 1], (16, 16)),  # asymmetric pads
    ((1, 16, 24, 1, 3), 1, (0, 0)),  # a 1x1 image: one tile, most of its patch padding
])
def test_winograd_matches_the_reference(case, pads, blocks) -> None:
    """Every layout pair, pads, tails and batch: the result, the epilogue's flat index in out0's layout,
    a blocked output's zero padding lanes and no write past out0 (check_blocked's NaN guard)."""
    ins, attrs = conv_case(*case)
    attrs["pads"] = pads if isinstance(pads, list) else [pads] * 4
    for tile in (2, 4):
        # F(4x4)'s coefficients (up to 8 and 1/24) cost a few more ulps of the outputs' scale (~40 here)
        schedule = {"winograd": 1, "tile": tile}
        low = check_blocked("conv2d", ins, attrs, *blocks, epilogue=True, schedule=schedule, constant=CONST,
                            atol=1e-4 if tile == 2 else 1e-3)
        assert low.schedule["winograd"] == 1 and len(low.kernels) == 3 and len(low.scratch) == 2
        assert low.pack[1].transform == "winograd" and low.pack[1].tile == low.schedule["tile"] == tile


def test_winograd_without_bias_and_rows_override() -> None:
    ins, attrs = conv_case(1, 32, 32, 12, 3, p=1, bias=False)
    low = check_blocked("conv2d", ins, attrs, 16, 16, schedule={"winograd": 1, "rows": 5}, constant=CONST[:2])
    assert low.schedule["rows"] == 5 and low.kernels[2].args == ("tmp1", "out0")


def choice(c: int, o: int, hw: int, *, s: int = 1, g: int = 1, constant=CONST, device=None,
           **schedule) -> int:
    """The Winograd tile the conv lowers with (0: the direct kernel)."""
    ins, attrs = conv_case(1, c, o, hw, 3, s=s, p=1, g=g)
    ctx = make_ctx("conv2d", ins, attrs, schedule, constant)
    ctx.device = device or ctx.device
    return int(lower_conv2d(ctx, None, in_block=16, out_block=16).schedule.get("tile", 0))


def test_when_winograd_is_chosen() -> None:
    """Constant weights, >= 32 channels each way, >= 8 MFLOP, scratch within WINOGRAD_SCRATCH; F(4x4)
    when it gives at least 32 tiles, else F(2x2)."""
    assert choice(64, 64, 56) == choice(128, 128, 28) == choice(64, 64, 224) == 4  # 58 MiB of scratch
    assert choice(512, 512, 7) == choice(256, 256, 14) == 2  # 4 and 16 tiles of 4x4
    assert choice(128, 128, 224) == 0  # 115 MiB: the transforms would stream from DRAM
    assert choice(16, 64, 56) == choice(64, 16, 56) == 0  # few channels
    assert choice(32, 32, 8) == 0  # 1.2 MFLOP
    assert choice(64, 64, 56, constant=(False, False, True)) == 0  # weights computed at run time
    assert choice(64, 64, 56, s=2) == choice(64, 64, 56, g=2) == 0
    assert choice(64, 64, 56, winograd=0) == 0 and choice(16, 16, 8, winograd=1) == 2
    assert choice(64, 64, 56, winograd=1, tile=2) == 2 and choice(16, 16, 8, winograd=1, tile=4) == 4
    assert choice(64, 64, 56, device=DeviceInfo(is_cpu=False)) == 0  # measured on CPUs only


def test_winograd_refusals() -> None:
    ins, attrs = conv_case(1, 32, 32, 8, 3, s=2, p=1)
    with pytest.raises(NotLowerable, match="stride 1"):
        lower_conv2d(make_ctx("conv2d", ins, attrs, {"winograd": 1}, CONST), None)
    ins, attrs = conv_case(1, 32, 32, 8, 3, p=1)
    with pytest.raises(NotLowerable, match="not a constant"):
        lower_conv2d(make_ctx("conv2d", ins, attrs, {"winograd": 1}), None)
    with pytest.raises(NotLowerable, match="16-channel blocks"):
        lower_conv2d(make_ctx("conv2d", ins, attrs, {"winograd": 1}, CONST), None, in_block=8)
    with pytest.raises(NotLowerable, match="rows=0"):
        lower_conv2d(make_ctx("conv2d", ins, attrs, {"winograd": 1, "rows": 0}, CONST), None)
    with pytest.raises(NotLowerable, match="tile=3"):
        lower_conv2d(make_ctx("conv2d", ins, attrs, {"winograd": 1, "tile": 3}, CONST), None)


def test_few_registers_take_fewer_rows() -> None:
    ins, attrs = conv_case(1, 64, 64, 28, 3, p=1)
    ctx = make_ctx("conv2d", ins, attrs, {}, CONST)
    ctx.device = DeviceInfo(vector_width=8, vector_registers=16)  # AVX2
    assert lower_conv2d(ctx, None).schedule["rows"] == ctx.device.accumulators(16)


def test_filter_ops_round_trip() -> None:
    w = np.random.default_rng(0).standard_normal((40, 20, 3, 3)).astype(np.float32)
    u = transform_filter(w, 2)
    assert u.shape == filter_shape(40, 20, 2) == (16, 3, 32, 16) and u.flags.c_contiguous
    assert (u[:, 2, :, 8:] == 0).all() and (u[:, :, 20:, :] == 0).all()  # padded channels
    # U[xi] is G g G^T: its corners are the kernel's corners
    assert np.allclose(u[0, 0, 3, 5], w[5, 3, 0, 0]) and np.allclose(u[15, 1, 7, 2], w[18, 7, 2, 2])
    np.testing.assert_allclose(untransform_filter(u, 40, 20, 2), w, atol=1e-6)
    u4 = transform_filter(w, 4)
    assert u4.shape == filter_shape(40, 20, 4) == (36, 3, 32, 16)
    assert np.allclose(u4[0, 0, 3, 5], w[5, 3, 0, 0] / 16)  # G's corner is 1/4
    np.testing.assert_allclose(untransform_filter(u4, 40, 20, 4), w, atol=1e-5)
    fdef, udef = get_op("winograd_filter"), get_op("winograd_unfilter")
    assert fdef is not None and udef is not None
    want = [TensorType((16, 3, 32, 16), "f32")]
    assert fdef.infer(fdef.sig([TensorType((40, 20, 3, 3), "f32")], {})) == want  # tile 2 by default
    with pytest.raises(OpError, match="tile"):
        fdef.infer(fdef.sig([TensorType((40, 20, 3, 3), "f32")], {"tile": 3}))
    with pytest.raises(OpError, match="3, 3"):
        fdef.infer(fdef.sig([TensorType((40, 20, 5, 5), "f32")], {}))
    with pytest.raises(OpError, match="not a winograd_filter"):
        udef.infer(udef.sig([TensorType((16, 3, 32, 16), "f32")], {"shape": [40, 40, 3, 3]}))
