"""1x1 stride-1 convs on NCHW as GEMMs over pixel vectors (kernels/conv_pointwise.py): which convs take it,
its numbers against the registry reference on planes with and without a partial last vector, its refusals,
its stores staying in bounds (a bounds-checked run of a fused region writing over its residual), and the
schedule space that offers the direct kernel instead."""

from __future__ import annotations

import numpy as np
import pytest
from tessel.ir.interpreter import run_func
from tessel.ir.parser import parse_module
from tessel.ir.types import TensorType
from tessel.passes.manager import PassManager
from tessel.passes.pipeline import parse_pipeline
from tessel.targets.opencl.kernels.base import DeviceInfo, NotLowerable
from tessel.targets.opencl.kernels.conv_pointwise import tail_pieces
from tessel.targets.opencl.kernels.testing import check_op
from tessel.targets.opencl.kernels.testing import lower_op as lower_for
from tessel.targets.opencl.lower import lower_module
from tessel.targets.opencl.runtime import Executable
from tessel.targets.opencl.space import space_of

from .conftest import here

AVX512 = DeviceInfo(vector_width=16, vector_registers=32)
AVX2 = DeviceInfo(vector_width=8, vector_registers=16)
TOL = {"rtol": 1e-4, "atol": 1e-4}
rng = np.random.default_rng(11)


def case(n: int, c: int, o: int, hw: int | tuple[int, int], *, g: int = 1, k: int = 1, s: int = 1, p: int = 0,
         bias: bool = True) -> tuple[list[np.ndarray], dict]:
    h, w = hw if isinstance(hw, tuple) else (hw, hw)
    ins = [rng.standard_normal((n, c, h, w)), rng.standard_normal((o, c // g, k, k))]
    ins += [rng.standard_normal(o)] if bias else []
    attrs = {"strides": [s, s], "pads": [p] * 4, "dilations": [1, 1], "groups": g}
    return [a.astype(np.float32) for a in ins], attrs


def lowered(ins: list[np.ndarray], attrs: dict, schedule: dict | None = None, info: DeviceInfo = AVX512):
    return lower_for("conv2d", [TensorType.of(a) for a in ins], attrs, schedule=schedule, info=info)[1]


@pytest.mark.parametrize("ins, attrs", [
    case(1, 272, 272, 14, g=4),  # shufflenet: 196 pixels, the last vector's lanes 12..15 new
    case(1, 136, 136, 28, g=4),  # 784 pixels: whole vectors
    case(1, 544, 544, 7, g=4),  # 49 pixels: one new lane in the last vector
    case(2, 24, 36, 5, g=3),  # batch 2 x 3 groups (the bias of group b % 3); 25 pixels: lanes 7..15
    case(1, 32, 20, (4, 4)),  # exactly one vector of pixels
    case(1, 16, 30, (3, 13), bias=False),  # no bias, 39 pixels
    case(1, 64, 48, (9, 7)),  # dense
])
def test_pointwise_conv_matches_the_reference(ins: list[np.ndarray], attrs: dict) -> None:
    low = lowered(ins, attrs)
    assert low.schedule["pointwise"] == 1 and len(low.kernels) == 1 and not low.scratch
    check_op("conv2d", ins, attrs, **TOL)


@pytest.mark.parametrize("schedule", [{"rows": 5, "vcols": 3}, {"rows": 1, "vcols": 4},
                                      {"rows": 32, "vcols": 1}, {"rows": 3, "vcols": 2, "local": 1}])
def test_pointwise_schedules_tail_rows_and_vectors_past_the_plane(schedule: dict) -> None:
    """Rows that do not divide a group's channels (a guarded last block) and work-items whose last vectors
    lie past the plane (3 vectors of 196 pixels: 13 = 4 x 3 + 1) store only what is theirs."""
    ins, attrs = case(1, 68, 68, 14, g=2)
    low = lowered(ins, attrs, schedule)
    assert {k: low.schedule.get(k, 4 if k == "local" else None) for k in schedule} == schedule
    check_op("conv2d", ins, attrs, schedule=schedule, **TOL)


@pytest.mark.parametrize("ins, attrs, why", [
    (*case(1, 16, 16, 8, k=3, p=1), "1x1 stride-1 unpadded"),
    (*case(1, 16, 16, 8, s=2), "1x1 stride-1 unpadded"),
    (*case(1, 16, 16, 8, g=16), "depthwise"),
    (*case(1, 16, 16, 3), "fewer than a vector"),
])
def test_other_convs_keep_their_kernels_and_refuse_pointwise(ins: list[np.ndarray], attrs: dict,
                                                             why: str) -> None:
    assert "pointwise" not in lowered(ins, attrs).schedule
    with pytest.raises(NotLowerable, match=why):
        lowered(ins, attrs, {"pointwise": 1})


def test_a_direct_kernel_record_keeps_the_direct_kernel() -> None:
    """A schedule naming the direct kernel's keys (a tuning record older than this kernel) lowers the
    direct kernel, as does pointwise=0; both match the reference."""
    ins, attrs = case(1, 272, 272, 14, g=4)
    for schedule in ({"tile_h": 2, "tile_w": 2}, {"pointwise": 0}):
        low = lowered(ins, attrs, schedule)
        assert "pointwise" not in low.schedule and "tile_h" in low.schedule
        check_op("conv2d", ins, attrs, schedule=schedule, **TOL)
    with pytest.raises(NotLowerable, match="vcols=5"):
        lowered(ins, attrs, {"vcols": 5})


def test_register_budget_bounds_the_block() -> None:
    """rows x vcols float16 accumulators stay within DeviceInfo.accumulators: 30 on AVX-512, 6 on AVX2
    (where a float16 is two registers)."""
    ins, attrs = case(1, 256, 256, 28)
    for info in (AVX512, AVX2):
        s = lowered(ins, attrs, info=info).schedule
        assert s["rows"] * s["vcols"] <= info.accumulators(16, s["vcols"])
    check_op("conv2d", ins, attrs, info=AVX2, **TOL)


def test_tail_pieces_are_aligned_powers_of_two() -> None:
    assert tail_pieces(12) == [(12, 4)]
    assert tail_pieces(15) == [(15, 1)]
    assert tail_pieces(7) == [(7, 1), (8, 8)]
    assert tail_pieces(3) == [(3, 1), (4, 4), (8, 8)]
    assert tail_pieces(16) == []


def test_the_space_offers_the_direct_kernel_and_the_direct_space_the_gemm() -> None:
    ins, attrs = case(1, 64, 64, 14, g=4)
    types = [TensorType.of(a) for a in ins]
    ctx, low = lower_for("conv2d", types, attrs, constant=(False, True), info=AVX512)
    sp = space_of(ctx, low)
    assert sp is not None and {"pointwise": 0} in sp.extra
    assert {k.name: k.values for k in sp.knobs}["vcols"] == (1, 2, 3, 4)
    ctx, low = lower_for("conv2d", types, attrs, constant=(False, True), info=AVX512,
                         schedule={"pointwise": 0})
    sp = space_of(ctx, low)
    assert sp is not None and {"pointwise": 1} in sp.extra


def T(*dims: int) -> str:
    return f"tensor<{'x'.join(map(str, dims))}xf32>"


def test_fused_residual_region_stays_in_bounds_writing_over_its_residual() -> None:
    """conv2d + residual add + relu fused into one pointwise launch, lowered with bounds checks and run
    with poisoned memory: the tail vector's overlapping loads and partial stores stay inside every buffer,
    each output element is written once (the memory plan may give the result the residual's buffer), and
    the results match the interpreter's."""
    x, w, b = T(1, 48, 7, 7), T(48, 12, 1, 1), T(48)
    text = f"""module @m {{
  func @main(%x: {x}, %r: {x}, %w: {w}, %b: {b}) -> {x} {{
    %0 = conv2d %x, %w, %b {{groups = 4}} : ({x}, {w}, {b}) -> {x} loc("onnx:Conv_0")
    %1 = add %0, %r : ({x}, {x}) -> {x} loc("onnx:Add_1")
    %2 = relu %1 : ({x}) -> {x} loc("onnx:Relu_2")
    return %2 : {x}
  }}
}}
"""
    want_m, m = parse_module(text), parse_module(text)
    dims = ((1, 48, 7, 7), (1, 48, 7, 7), (48, 12, 1, 1), (48,))
    inputs = [rng.standard_normal(d).astype(np.float32) for d in dims]
    want = run_func(want_m, want_m.funcs[0], inputs)
    PassManager(parse_pipeline("fuse")).run(m)
    lower_module(m, here(), check_bounds=True)
    # the weights, an argument here, are packed by a launch of their own before the conv's
    (launch,) = [op for op in m.funcs[0].block.ops if op.name == "cl.launch" and "schedule" in op.attrs]
    assert launch.attrs["schedule"]["pointwise"] == 1
    exe = Executable(m, m.funcs[0], poison=True)
    for _ in range(2):
        got = exe.run(inputs)
        np.testing.assert_allclose(got[0], want[0], **TOL)
