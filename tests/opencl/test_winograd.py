"""Winograd F(2x2, 3x3) convolutions (targets/opencl/kernels/winograd.py) and the winograd_filter ops."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tessel.ir.interpreter import run_func
from tessel.ir.ops.registry import OpError, get_op, load_all
from tessel.ir.ops.winograd import filter_shape, transform_filter, untransform_filter
from tessel.ir.parser import parse_module
from tessel.ir.types import TensorType
from tessel.targets.opencl.kernels.base import DeviceInfo, NotLowerable
from tessel.targets.opencl.kernels.conv import lower_conv2d
from tessel.targets.opencl.lower import lower_module
from tessel.targets.opencl.runtime import Executable

from .test_blocked_conv import check_blocked, conv_case, make_ctx
from .test_fused import T, conv_region, randomize

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
        assert low.pack[1].winograd == low.schedule["tile"] == tile


def test_winograd_without_bias_and_rows_override() -> None:
    ins, attrs = conv_case(1, 32, 32, 12, 3, p=1, bias=False)
    # 12x12 is 9 tiles: F(4x4) since MIN_TILES_4X4 = 9, with F(4x4)'s tolerance (the inputs come from the
    # module's shared generator, so they depend on which tests ran before: 1e-4 held for some orders only)
    low = check_blocked("conv2d", ins, attrs, 16, 16, schedule={"winograd": 1, "rows": 5}, constant=CONST[:2],
                        atol=1e-3)
    assert low.schedule["rows"] == 5 and low.kernels[2].args == ("tmp1", "out0")


def choice(c: int, o: int, hw: int, *, s: int = 1, g: int = 1, constant=CONST, device=None,
           **schedule) -> int:
    """The Winograd tile the conv lowers with (0: the direct kernel)."""
    ins, attrs = conv_case(1, c, o, hw, 3, s=s, p=1, g=g)
    ctx = make_ctx("conv2d", ins, attrs, schedule, constant)
    ctx.device = device or ctx.device
    return int(lower_conv2d(ctx, None, in_block=16, out_block=16).schedule.get("tile", 0))


def test_when_winograd_is_chosen() -> None:
    """Constant weights, >= 16 channels each way, >= 8 MFLOP, scratch within WINOGRAD_SCRATCH; F(4x4)
    when it gives at least 9 tiles (MIN_TILES_4X4), else F(2x2)."""
    assert choice(64, 64, 56) == choice(128, 128, 28) == choice(64, 64, 224) == 4  # 58 MiB of scratch
    assert choice(512, 512, 7) == choice(256, 256, 8) == 2  # 4 tiles of 4x4
    assert choice(256, 256, 14) == choice(256, 384, 12) == 4  # 16 and 9 tiles
    assert choice(128, 128, 224) == 0  # 115 MiB: the transforms would stream from DRAM
    assert choice(16, 64, 56) == choice(64, 16, 56) == 4
    assert choice(8, 64, 56) == choice(64, 8, 56) == 0  # few channels
    assert choice(32, 32, 8) == 0  # 1.2 MFLOP
    assert choice(64, 64, 56, constant=(False, False, True)) == 0  # weights computed at run time
    assert choice(64, 64, 56, s=2) == choice(64, 64, 56, g=2) == 0
    assert choice(64, 64, 56, winograd=0) == 0 and choice(16, 16, 8, winograd=1) == 2
    assert choice(64, 64, 56, winograd=1, tile=2) == 2 and choice(16, 16, 8, winograd=1, tile=4) == 4
    assert choice(64, 64, 56, device=DeviceInfo(is_cpu=False)) == 0  # measured on CPUs only


def test_measured_peaks_choose_the_tile() -> None:
    """With the device's calibrated peaks the choice is the cheapest of direct, F(2x2) and F(4x4) on its
    roofline: each transformed weight serves one tile, so on few tiles the GEMM streams (m+2)^2/9 times the
    direct kernel's weights. Where weights stream slowly (an Intel Xeon VM: 13 GB/s against 300 GFLOP/s)
    a 7x7 image keeps the direct kernel and 14x14 takes F(2x2); where they stream fast the choices are the
    rule's without peaks."""
    slow = DeviceInfo(peak_gflops=300, stream_gbps=13, copy_gbps=27)
    fast = DeviceInfo(peak_gflops=300, stream_gbps=60, copy_gbps=40)
    assert choice(512, 512, 7, device=slow) == 0 and choice(512, 512, 7, device=fast) == 2
    assert choice(256, 256, 14, device=slow) == 2 and choice(256, 256, 14, device=fast) == 4
    for device in (slow, fast):  # many tiles: the GEMM is compute-bound on either
        assert choice(64, 64, 56, device=device) == choice(128, 128, 28, device=device) == 4
    assert choice(512, 512, 7, device=fast, winograd=1, tile=4) == 4  # the schedule still decides


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


def test_winograd_in_a_fused_region_and_its_profile_flops() -> None:
    """A conv + residual add + ReLU region of a model lowers by Winograd (the chain as the output
    transform's epilogue, checked against the interpreter), and the launch's flops go to its GEMM kernel
    (`flops_kernel`), whose profile row then shows the effective GFLOP/s."""
    y = T(1, 32, 24, 24)
    chain = f"""%a = add %c, %_res : ({y}, {y}) -> {y}
    %r = relu %a : ({y}) -> {y}
    yield %r : {y}"""
    text = conv_region(32, 32, 24, chain, {"res": y}, bias_in_conv=True)
    want_m, m = parse_module(text), parse_module(text)
    randomize(want_m, np.random.default_rng(0))
    randomize(m, np.random.default_rng(0))
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal(a.type.dims).astype(np.float32) for a in m.funcs[0].args]
    (want,) = run_func(want_m, want_m.funcs[0], inputs)
    lower_module(m)
    (got,) = Executable(m, m.funcs[0]).run(inputs)
    # F(4x4): within ~1e-5 of the outputs' scale (here ~8: weights 0.5 N(0, 1) over 288 inputs)
    assert np.abs(got - want).max() < 5e-5 * np.abs(want).max()
    (launch,) = [op for op in m.funcs[0].block.ops if op.name == "cl.launch"]
    assert launch.attrs["schedule"]["winograd"] == 1 and launch.attrs["flops_kernel"] == 1
    steps = Executable(m, m.funcs[0]).steps
    assert [s.flops > 0 for s in steps] == [False, True, False]
    # lower_module's schedule defaults (the tools' --no-winograd) reach the region's conv too
    direct = parse_module(text)
    lower_module(direct, schedule={"winograd": 0})
    (launch,) = [op for op in direct.funcs[0].block.ops if op.name == "cl.launch"]
    assert "winograd" not in launch.attrs["schedule"] and "flops_kernel" not in launch.attrs


@settings(max_examples=30, deadline=None, derandomize=True, database=None)
@given(st.integers(1, 2), st.integers(1, 40), st.integers(1, 40), st.integers(1, 13), st.integers(1, 13),
       st.lists(st.integers(0, 2), min_size=4, max_size=4),
       st.sampled_from([(0, 0), (16, 0), (0, 16), (16, 16)]),
       st.sampled_from([2, 4]), st.booleans())
def test_winograd_on_random_shapes(n, c, o, h, w, pads, blocks, tile, bias) -> None:
    """Any size of image, channels, batch and pads, forced onto both tiles: the reference's result, the
    epilogue's index, the blocked padding lanes and no write past out0."""
    if h + pads[0] + pads[2] < 3 or w + pads[1] + pads[3] < 3:
        return  # no output pixel
    rng = np.random.default_rng(n * 1000 + c * 31 + o)
    shapes = [(n, c, h, w), (o, c, 3, 3), (o,)][: 3 if bias else 2]
    ins = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    attrs = {"strides": [1, 1], "pads": pads, "dilations": [1, 1], "groups": 1}
    check_blocked("conv2d", ins, attrs, *blocks, epilogue=True, schedule={"winograd": 1, "tile": tile},
                  constant=CONST[:len(ins)], atol=1e-4 if tile == 2 else 1e-3)


class _Hook:
    """A DeviceInfo's calibration hook that counts its calls (profile.OnFirstNeed without a device)."""

    def __init__(self, peaks):  # noqa: ANN001
        self.calls, self.peaks_given = 0, peaks
        self.peaks = None

    def __call__(self):  # noqa: ANN204
        self.calls += 1
        self.peaks = self.peaks_given
        return self.peaks


def test_the_device_is_calibrated_on_the_first_choice_that_needs_its_peaks() -> None:
    """A DeviceInfo without peaks carries a calibration hook (profile.compile_info); only the Winograd cost
    model calls it, for a conv the rule would consider, and the choice is then the one made with those
    peaks given from the start. Convs the rule refuses by their shape never calibrate."""
    from tessel.targets.opencl.profile import Peaks

    peaks = Peaks(300.0, 27.0, 5.0, stream_gbps=13.0)
    given = DeviceInfo(peak_gflops=300, stream_gbps=13, copy_gbps=27)
    for c, o, hw, s, g in [(8, 64, 56, 1, 1), (64, 64, 56, 2, 1), (64, 64, 56, 1, 2), (32, 32, 8, 1, 1)]:
        hook = _Hook(peaks)
        assert choice(c, o, hw, s=s, g=g, device=DeviceInfo(calibrate=hook)) == 0 and hook.calls == 0
    for c, o, hw in [(512, 512, 7), (256, 256, 14), (64, 64, 56)]:
        hook = _Hook(peaks)
        assert choice(c, o, hw, device=DeviceInfo(calibrate=hook)) == choice(c, o, hw, device=given)
        assert hook.calls >= 1
    assert DeviceInfo(calibrate=_Hook(None)).measured() == DeviceInfo()  # nothing measured: as it was
    assert DeviceInfo(calibrate=_Hook(peaks)).measured() == given
    assert repr(DeviceInfo(calibrate=_Hook(peaks))) == repr(DeviceInfo())  # not part of its identity


def test_considers_finds_the_convs_the_rule_would_ask_about() -> None:
    from tessel.targets.opencl.kernels.winograd import considers

    def module(k: int, stride: int, groups: int) -> object:
        c = 4 * groups
        h, p = 8 // stride, k // 2
        x, w, y = f"tensor<1x{c}x8x8xf32>", f"tensor<8x4x{k}x{k}xf32>", f"tensor<1x8x{h}x{h}xf32>"
        attrs = f"strides = [{stride}, {stride}], pads = [{p}, {p}, {p}, {p}], dilations = [1, 1], " \
            f"groups = {groups}"
        return parse_module(f"""module @m {{
  func @main(%x: {x}, %w: {w}) -> {y} {{
    %0 = conv2d %x, %w {{{attrs}}} : ({x}, {w}) -> {y}
    return %0 : {y}
  }}
}}""", "<test>")

    assert considers(module(3, 1, 1))
    assert not any(considers(module(k, s, g)) for k, s, g in [(1, 1, 1), (3, 2, 1), (3, 1, 2)])
