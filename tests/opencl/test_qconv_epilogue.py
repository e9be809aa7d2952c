"""qconv2d's fused epilogue (passes/fuse_rules.py REQUANTIZED_ANCHORS, kernels/fused_epilogue.py): a QDQ
model's float chain between two integer convs (dequantize, a per-channel mul and add, quantize; or a
residual dequantized and added) joins the conv's kernel, and every integer conv template applies it to the
value it stores. Each case runs `fuse` then the lowering, must give one launch for the region (no
`unfused-region` remark) and the unfused module's bytes from the numpy interpreter: the chain's arithmetic
is the unfused one's, to the bit. The templates: depthwise rows of 16 columns or more and of 8-15 (two
overlapping vectors); depthwise with 16 channels in the lanes (rows of 8 columns or fewer: items of 4
columns transposed, or a lane at a time under 4); the 1x1 GEMM over pixels; the pixel-lane dense conv;
the channel-lane conv with whole blocks of 16 channels (the chain across the lanes) and without (lane by
lane); the narrow-group pixel-lane conv. With a DeviceInfo without the 8-bit dot product, the paired
(16-bit multiply-add) kernels instead of the quads."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from tessel.ir.interpreter import run_func
from tessel.ir.parser import parse_module
from tessel.passes.manager import PassManager
from tessel.passes.pipeline import parse_pipeline
from tessel.targets.opencl import device as dev
from tessel.targets.opencl.lower import lower_module
from tessel.targets.opencl.runtime import Executable

from .conftest import here


def T(*dims: int, dtype: str) -> str:
    return f"tensor<{'x'.join(map(str, dims))}x{dtype}>"


def case_module(c: int, o: int, hw: int, k: int, groups: int, stride: int, chain: str) -> str:
    """A func: qconv2d of x [1, c, hw, hw] (ui8) by constant weights, then `chain` ("bn": dequantize, mul
    and add of per-channel constants, quantize; "residual": a qadd of a ui8 argument of the output's
    shape; "lookup": a table of 256 bytes), then the 8-bit result; the requantizing scale set so the
    outputs spread over the 8-bit range."""
    pad = k // 2
    ho = (hw + 2 * pad - k) // stride + 1
    taps = c // groups * k * k
    scale = 40.0 / (868.0 * math.sqrt(taps))  # acc std ~ sqrt(taps) * 73.6 * 11.8 for these inputs
    x, y = T(1, c, hw, hw, dtype="ui8"), T(1, o, ho, ho, dtype="ui8")
    yf, ch = T(1, o, ho, ho, dtype="f32"), T(1, o, 1, 1, dtype="f32")
    args = [f"%x: {x}"] + ([f"%r: {y}"] if chain == "residual" else [])
    lines = [
        f"func @main({', '.join(args)}) -> {y} {{",
        f"  %w = const {{value = dense<0> : {T(o, c // groups, k, k, dtype='i8')}}} : () -> "
        f"{T(o, c // groups, k, k, dtype='i8')}",
        "  %xz = const {value = dense<128> : tensor<ui8>} : () -> tensor<ui8>",
        "  %wz = const {value = dense<0> : tensor<i8>} : () -> tensor<i8>",
        f"  %s = const {{value = dense<{scale!r}> : {T(o, dtype='f32')}}} : () -> {T(o, dtype='f32')}",
        "  %yz = const {value = dense<120> : tensor<ui8>} : () -> tensor<ui8>",
        f"  %b = const {{value = dense<0> : {T(o, dtype='i32')}}} : () -> {T(o, dtype='i32')}",
        "  %ds = const {value = dense<0.05> : tensor<f32>} : () -> tensor<f32>",
        "  %qs = const {value = dense<0.07> : tensor<f32>} : () -> tensor<f32>",
        "  %qz = const {value = dense<100> : tensor<ui8>} : () -> tensor<ui8>",
        f"  %c = qconv2d %x, %w, %xz, %wz, %s, %yz, %b {{groups = {groups}, pads = [{pad}, {pad}, {pad}, "
        f"{pad}], strides = [{stride}, {stride}]}} : ({x}, {T(o, c // groups, k, k, dtype='i8')}, "
        f"tensor<ui8>, tensor<i8>, {T(o, dtype='f32')}, tensor<ui8>, {T(o, dtype='i32')}) -> {y}",
        f"  %d = dequantize %c, %ds, %yz : ({y}, tensor<f32>, tensor<ui8>) -> {yf}",
    ]
    if chain == "bn":
        lines += [
            f"  %g = const {{value = dense<0.0> : {ch}}} : () -> {ch}",
            f"  %h = const {{value = dense<0.0> : {ch}}} : () -> {ch}",
            f"  %m = mul %d, %g : ({yf}, {ch}) -> {yf}",
            f"  %a = add %m, %h : ({yf}, {ch}) -> {yf}",
        ]
        lines.append(f"  %q = quantize %a, %qs, %qz : ({yf}, tensor<f32>, tensor<ui8>) -> {y}")
    elif chain == "lookup":  # a tabulated activation (fold-lookup's), joining small epilogues (fuse)
        lines[-1:] = ["  %t = const {value = dense<0> : tensor<256xui8>} : () -> tensor<256xui8>",
                      f"  %q = lookup %c, %t : ({y}, tensor<256xui8>) -> {y}"]
    else:  # as fold-qdq leaves a QDQ residual add: onnxruntime's QLinearAdd arithmetic on the integers
        lines[-1:] = [f"  %q = qadd %c, %r {{a_scale = 0.05, a_zero_point = 120, b_scale = 0.06, "
                      f"b_zero_point = 100, scale = 0.07, zero_point = 110}} : ({y}, {y}) -> {y}"]
    lines += [f"  return %q : {y}", "}"]
    return "module @m {\n" + "\n".join(lines) + "\n}\n"


def randomize(m, rng: np.random.Generator) -> None:  # noqa: ANN001
    """The weights i8 in [-20, 20], the chain's per-channel factors around 1 and offsets around 0."""
    from tessel.ir.attributes import DenseAttr

    for op in m.funcs[0].block.ops:
        if op.name != "const":
            continue
        t = op.results[0].type
        if t.dtype == "i8" and t.rank == 4:
            op.attrs["value"] = DenseAttr(t, rng.integers(-20, 21, t.dims).astype(np.int8))
        elif t.dtype == "f32" and t.rank == 4:
            base = 0.0 if any(u.name == "add" for u, _ in op.results[0].uses) else 1.0
            op.attrs["value"] = DenseAttr(t, (base + 0.3 * rng.standard_normal(t.dims)).astype(np.float32))
        elif t.dtype == "ui8" and t.dims == (256,):  # a lookup's table: a permutation of the bytes
            op.attrs["value"] = DenseAttr(t, rng.permutation(256).astype(np.uint8))
        elif t.dtype == "i32":
            op.attrs["value"] = DenseAttr(t, rng.integers(-500, 501, t.dims).astype(np.int32))


NO_DOT = "pairs"  # lowered for a DeviceInfo without the 8-bit dot product: the 16-bit multiply-add kernels

CASES = [  # (id, c, o, hw, k, groups, stride, chain, schedule it must take)
    ("depthwise-wide", 16, 16, 20, 3, 16, 1, "bn", "depthwise"),
    ("depthwise-12", 16, 16, 12, 3, 16, 1, "bn", "depthwise"),
    ("depthwise-12-residual", 16, 16, 12, 3, 16, 1, "residual", "depthwise"),
    ("depthwise-6", 16, 16, 6, 3, 16, 1, "bn", "depthwise"),
    ("depthwise-3", 16, 16, 3, 3, 16, 1, "bn", "depthwise"),
    ("depthwise-stride2", 16, 16, 20, 3, 16, 2, "residual", "depthwise"),
    # 16 channels in the lanes (rows of 8 columns or fewer): the chain across them (whole blocks) or along
    # each channel's transposed row (24 channels)
    ("depthwise-lanes-partial", 24, 24, 7, 3, 24, 1, "bn", "depthwise"),
    ("depthwise-lanes-stride2", 32, 32, 12, 3, 32, 2, "residual", "depthwise"),
    ("pointwise", 8, 16, 10, 1, 1, 1, "bn", "pointwise"),
    ("pointwise-residual", 8, 16, 10, 1, 1, 1, "residual", "pointwise"),
    ("pixels", 8, 16, 18, 3, 1, 1, "bn", "pixels"),
    ("channel-lanes", 16, 32, 6, 3, 1, 1, "residual", "lanes"),
    ("channel-lanes-partial", 16, 24, 6, 3, 1, 1, "bn", "lanes"),
    ("pixel-lanes", 8, 8, 9, 3, 2, 1, "bn", "cols"),
    # a table lookup in the chain (a gather from the program's constant array, lane by lane)
    ("pointwise-lookup", 8, 16, 10, 1, 1, 1, "lookup", "pointwise"),
    ("depthwise-lookup", 16, 16, 10, 3, 16, 1, "lookup", "depthwise"),
    ("depthwise-lanes-lookup", 32, 32, 6, 3, 32, 1, "lookup", "depthwise"),
    ("channel-lanes-lookup", 16, 32, 6, 3, 1, 1, "lookup", "lanes"),
]


def dot_info():  # noqa: ANN201
    return dataclasses.replace(here(), int8_dot="") if here().int8_dot else here()


@pytest.mark.parametrize("device", ["native", NO_DOT])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_qconv_epilogue_matches_the_unfused_module(case: tuple, device: str) -> None:
    name, c, o, hw, k, groups, stride, chain, kernel = case
    if device == NO_DOT and kernel not in ("pointwise", "lanes", "pixels"):
        pytest.skip("the same kernel as natively (no 8-bit dot product in it)")
    text = case_module(c, o, hw, k, groups, stride, chain)
    want_m, got_m = parse_module(text), parse_module(text)
    rng = np.random.default_rng(len(name) * 7919 + o)
    randomize(want_m, np.random.default_rng(1))
    randomize(got_m, np.random.default_rng(1))
    func = want_m.funcs[0]
    inputs = [rng.integers(0, 256, a.type.dims).astype(np.uint8) for a in func.args]
    want = run_func(want_m, func, inputs)[0]
    assert 0.25 < np.mean((want > 0) & (want < 255)) and len(np.unique(want)) > 8, "outputs saturate"

    PassManager(parse_pipeline("fuse")).run(got_m)
    regions = [op for op in got_m.funcs[0].block.ops if op.name == "kernel"]
    assert len(regions) == 1 and regions[0].attrs["kind"] == "epilogue"
    remarks: list = []
    lower_module(got_m, here() if device == "native" else dot_info(), remarks=remarks)
    assert not [r for r in remarks if "unfused" in str(r)], remarks
    launches = [op for op in got_m.funcs[0].block.ops if op.name == "cl.launch"]
    assert len(launches) == 1, [op.attrs["kernels"] for op in launches]
    schedule = launches[0].attrs["schedule"]
    kernel = "lanes" if kernel == "pixels" and device == NO_DOT else kernel  # pixels: dot products only
    assert kernel in schedule and schedule.get("fused") == (5 if chain == "bn" else 2), schedule
    if kernel == "depthwise":  # channel lanes where a row fills at most half of its 16 lanes, else the band
        assert schedule["depthwise"] == (3 if (hw - 1) // stride + 1 <= 8 else 2), schedule
    source = next(op.attrs["source"] for op in got_m.funcs[0].block.ops if op.name == "cl.program")
    if kernel == "depthwise":  # few stores an item: the chain along a row inlined; the channel-lane
        # kernel's chain across channels (whole channel blocks) called
        assert ("static inline uchar" in source) != ("noinline" in source), source
        assert "noinline" not in source or schedule["depthwise"] == 3
    else:  # called at each store, not inlined
        assert "__attribute__((noinline)) static uchar" in source
    got = Executable(got_m, got_m.funcs[0], dev.pick_device()).run(inputs)[0]
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes(), (
        f"{np.count_nonzero(got != want)} of {want.size} differ")
