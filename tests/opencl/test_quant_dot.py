"""The integer convs on the CPU's 8-bit dot product (targets/opencl/kernels/qdot.py, `vpdpbusd`):
chosen where the device has it (device.int8_dot) and the weights less their constant zero points are
signed bytes, exact against the registry's references for both kernels (channel lanes, and the 1x1 GEMM
over pixels) on i8 and ui8 inputs, odd channel counts, groups, strides, dilations and padding; the other
cases keep the paired kernels. The lowering tests need no VNNI (a DeviceInfo says so); the runs skip on
devices without it."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
from tessel.ir.parser import parse_module
from tessel.ir.types import TensorType
from tessel.targets.opencl import device as dev
from tessel.targets.opencl.kernels.testing import check_op, lower_op
from tessel.targets.opencl.lower import lower_module

from .conftest import pocl_probe
from .test_quant_kernels import (
    Conv,
    Matmul,
    conv_operands,
    matmul_operands,
    reference,
    requant_operands,
    rng_for,
)

VNNI = dataclasses.replace(dev.DeviceInfo.generic(), int8_dot="avx512vnni")


def has_dot() -> bool:
    return dev.opencl_available() is None and dev.device_info(dev.pick_device()).has("avx512vnni")


needs_dot = pytest.mark.skipif(not has_dot(), reason="the device has no 8-bit dot product (AVX-512 VNNI)")

# weights are constants (as in a model: packed at load time, their zero points read by the lowering)
CASES = [
    # 3x3 pad 1, 20 input channels (5 quads), 32 outputs (two lane blocks), a non-zero x zero point
    (Conv("ui8", "i8", 1, 20, (6, 7), 32, 3, pad=(1, 1, 1, 1), bias=True, scale_per_channel=True), False),
    # the same with x_zero_point a constant 0 (after a ReLU): no weight-sum term
    (Conv("ui8", "i8", 2, 20, (6, 7), 32, 3, pad=(1, 1, 1, 1), bias=True), True),
    # i8 inputs (flipped to unsigned), 13 channels (a partial quad), stride 2, 20 outputs (a partial block)
    (Conv("i8", "i8", 2, 13, (9, 11), 20, 3, stride=2, pad=(1, 1, 1, 1), bounds="relu", y="i8"), False),
    # ui8 weights at zero point 128 (flipped to signed), dilation 2, groups 2, asymmetric pads
    (Conv("i8", "ui8", 1, 16, (10, 18), 40, 3, pad=(2, 1, 2, 3), dilation=2, groups=2, bias=True), False),
    # 5x5, a Clip's bounds
    (Conv("ui8", "i8", 1, 7, (12, 17), 16, 5, pad=(2, 2, 2, 2), bounds="clip"), False),
    # 1x1 GEMMs: 49 pixels (a partial last vector), 24 channels, 20 outputs (a partial row block)
    (Conv("ui8", "i8", 1, 24, (7, 7), 20, 1, scale_per_channel=True, bias=True), False),
    (Conv("i8", "ui8", 2, 9, (4, 4), 12, 1, bias=True, bounds="relu"), False),
    (Conv("ui8", "i8", 1, 33, (6, 11), 40, 1, groups=1, y="i8"), True),
    (Conv("ui8", "i8", 1, 16, (5, 9), 16, 1, groups=2, scale_per_channel=True), False),
    # pixel lanes (rows of 16 columns or more): 16 channels at 40 columns (a last vector overlapping), a
    # partial row block (20 outputs), i8 inputs at stride 2, groups, a zero x zero point, 3 input channels
    (Conv("ui8", "i8", 1, 16, (9, 40), 16, 3, pad=(1, 1, 1, 1), bias=True, scale_per_channel=True), False),
    (Conv("i8", "i8", 2, 13, (8, 37), 20, 3, stride=2, pad=(1, 1, 1, 1), bounds="relu", y="i8"), False),
    (Conv("ui8", "ui8", 1, 12, (6, 33), 24, 3, pad=(1, 1, 1, 1), groups=3, bias=True), True),
    (Conv("ui8", "i8", 1, 3, (11, 64), 24, 3, stride=2, pad=(0, 1, 1, 1)), False),
]


def _wide(case: Conv) -> bool:
    """The output rows are 16 columns or more: the pixel-lane kernel (unless 1x1)."""
    w = case.hw[1] + case.pad[1] + case.pad[3]
    return case.k > 1 and (w - case.dilation * (case.k - 1) - 1) // case.stride + 1 >= 16


def constant(n: int, xz: bool) -> tuple[bool, ...]:
    """x an argument, the weights and the requantizing operands constants, x_zero_point too when `xz`."""
    return (False, True, xz) + (True,) * (n - 3)


@pytest.mark.parametrize("case, xz0", CASES, ids=[f"{c}{'-xz0' if z else ''}" for c, z in CASES])
def test_dot_lowering_is_chosen_and_exact(case: Conv, xz0: bool) -> None:
    rng = rng_for("dot", str(case), str(xz0))
    inputs, attrs = conv_operands(case, rng)
    if xz0:
        inputs[2] = np.zeros((), np.uint8)
    types = [TensorType.of(a) for a in inputs]
    low = lower_op("conv2d_integer", types, attrs, constant=constant(4, xz0), info=VNNI, values=inputs)[1]
    assert low.schedule.get("quads") == 1, low.schedule
    assert low.schedule.get("pointwise", 0) == (case.k == 1)
    assert low.schedule.get("pixels", 0) == _wide(case)
    assert ("- s" in low.kernels[-1].source) == (not xz0)  # the zero point's weight-sum term
    if case.k == 1:  # each work-group interleaves its own pixels' quads: no repack launch
        assert low.schedule["group_repack"] == 1 and len(low.kernels) == 1
    if not has_dot():
        pytest.skip("the device has no 8-bit dot product (AVX-512 VNNI)")
    check_op("conv2d_integer", inputs, attrs, constant=constant(4, xz0))
    acc = reference("conv2d_integer", inputs, attrs)
    inputs += requant_operands(case, rng, acc, 1, case.m, attrs)
    check_op("qconv2d", inputs, attrs, constant=constant(len(inputs), xz0))


SHIFTED = [  # weights less their zero point past a signed byte: the pixel-lane kernel with input sums
    Conv("ui8", "ui8", 1, 6, (9, 40), 24, 3, pad=(1, 1, 1, 1), bias=True),  # ui8 at a random zero point
    Conv("ui8", "ui8", 2, 13, (8, 37), 20, 3, stride=2, pad=(1, 1, 1, 1), wz_per_channel=True, y="i8"),
    Conv("i8", "i8", 1, 8, (6, 33), 16, 3, pad=(1, 1, 1, 1), groups=2, wz_per_channel=True, bounds="relu"),
]


@pytest.mark.parametrize("case", SHIFTED, ids=[str(c) for c in SHIFTED])
def test_dot_takes_any_constant_weight_zero_point_in_pixel_lanes(case: Conv) -> None:
    """ui8 weights at a zero point other than 128 (a dynamically quantized model's) and i8 weights at
    zero points other than 0: w - wz = w' + shift with w' a signed byte, the shift times each output's
    input sum (one more dot product a column vector) added back; exact."""
    rng = rng_for("dot-shift", str(case))
    inputs, attrs = conv_operands(case, rng)
    if not case.wz_per_channel:
        inputs[3] = np.array(121, np.uint8)
    types = [TensorType.of(a) for a in inputs]
    low = lower_op("conv2d_integer", types, attrs, constant=constant(4, False), info=VNNI, values=inputs)[1]
    assert low.schedule.get("quads") == 1 and low.schedule.get("pixels") == 1, low.schedule
    assert "(int16)(0x01010101)" in low.kernels[1].source
    if not has_dot():
        pytest.skip("the device has no 8-bit dot product (AVX-512 VNNI)")
    check_op("conv2d_integer", inputs, attrs, constant=constant(4, False))
    acc = reference("conv2d_integer", inputs, attrs)
    inputs += requant_operands(case, rng, acc, 1, case.m, attrs)
    check_op("qconv2d", inputs, attrs, constant=constant(len(inputs), False))


def test_dot_needs_signed_byte_weights_and_the_device() -> None:
    """Weight zero points that are not all 0 (i8) or all 128 (ui8), or not constants, keep the paired
    kernels, as does a device without the dot product or schedule quads=0."""
    case = Conv("ui8", "i8", 1, 8, (6, 7), 16, 3, pad=(1, 1, 1, 1), wz_per_channel=True)
    inputs, attrs = conv_operands(case, rng_for("dot-refuse"))
    inputs[3] = np.where(np.arange(16) == 3, 1, 0).astype(np.int8)  # one channel's zero point is 1
    types = [TensorType.of(a) for a in inputs]

    def chosen(consts: tuple[bool, ...], info: object = VNNI, **schedule: int) -> bool:
        low = lower_op("conv2d_integer", types, attrs, constant=consts, info=info, values=inputs,
                       schedule=schedule)[1]
        return bool(low.schedule.get("quads"))

    assert not chosen(constant(4, False))
    inputs[3] = np.zeros(16, np.int8)
    assert chosen(constant(4, False))
    assert not chosen((False, True, False, False))  # the zero point is not known
    assert not chosen(constant(4, False), info=dev.DeviceInfo.generic())
    assert not chosen(constant(4, False), quads=0)


MATMULS = [
    # 2-D, K 64 (whole quads), 40 columns (a partial block), 12 rows (a partial row block)
    (Matmul("ui8", "i8", (12, 64), (64, 40), scale_per_channel=True, bias=True), {}),
    # batched A over a 2-D B, K 30 (a partial last quad), 3 rows an item
    (Matmul("ui8", "i8", (2, 5, 30), (30, 16), bias=True, bounds="relu"), {"rows": 3}),
    # i8 A (flipped), ui8 B at zero point 128 (flipped), K 13, 33 columns
    (Matmul("i8", "ui8", (3, 17, 13), (13, 33), y="i8"), {}),
    # batched B, K 8, 16 rows an item
    (Matmul("i8", "i8", (2, 9, 8), (2, 8, 20)), {"rows": 16}),
]


@pytest.mark.parametrize("trivial", [True, False], ids=["signed-byte-b", "any-b-zero-point"])
@pytest.mark.parametrize("case, schedule", MATMULS, ids=[str(c) for c, _ in MATMULS])
def test_dot_matmul_is_exact(case: Matmul, schedule: dict[str, int], trivial: bool) -> None:
    """matmul_integer and qmatmul on the dot product: any K (a partial last quad assembled from the row's
    bytes), partial row and column blocks, batched A or B, i8 or ui8 either side; B's zero point 0 (i8)
    or 128 (ui8), or any (a dynamically quantized model's ui8 weights: the rows' sums of A correct the
    products of the flipped bytes), per tensor or per column."""
    rng = rng_for("dot-mm", str(case), str(trivial))
    inputs = matmul_operands(case, rng)
    if trivial:
        inputs[3] = np.array(0 if case.b == "i8" else 128, inputs[3].dtype)  # signed-byte weights
    else:
        n = case.bshape[-1]
        inputs[3] = rng.integers(-20, 20, n).astype(np.int8) if case.b == "i8" else \
            rng.integers(0, 256, n if len(case.bshape) == 2 else ()).astype(np.uint8)
    types = [TensorType.of(a) for a in inputs]
    low = lower_op("matmul_integer", types, {}, constant=constant(4, False), info=VNNI, values=inputs,
                   schedule=schedule)[1]
    assert low.schedule.get("quads") == 1, low.schedule
    if not has_dot():
        pytest.skip("the device has no 8-bit dot product (AVX-512 VNNI)")
    check_op("matmul_integer", inputs, {}, constant=constant(4, False), schedule=schedule)
    attrs: dict[str, object] = {}
    acc = reference("matmul_integer", inputs, attrs)
    inputs += requant_operands(case, rng, acc, -1, case.bshape[-1], attrs)
    check_op("qmatmul", inputs, attrs, constant=constant(len(inputs), False), schedule=schedule)


DOT_PROBE = r"""
import glob, os, subprocess
import numpy as np
from tessel.targets.opencl.kernels.testing import check_op

rng = np.random.default_rng(0)
x = rng.integers(0, 256, (1, 20, 6, 7)).astype(np.uint8)
w = rng.integers(-128, 128, (32, 20, 3, 3)).astype(np.int8)
check_op("conv2d_integer", [x, w, np.array(120, np.uint8), np.array(0, np.int8)],
         {"strides": [1, 1], "pads": [1, 1, 1, 1], "dilations": [1, 1], "groups": 1},
         constant=(False, True, True, True))
for so in glob.glob(os.path.join(os.environ["POCL_CACHE_DIR"], "**", "*conv2d_integer*.so"), recursive=True):
    text = subprocess.run(["objdump", "-d", so], capture_output=True, text=True, check=True).stdout
    print("so", os.path.basename(so), "vpdpbusd" in text, "vpmaddwd" in text or "vpmulld" in text)
"""


@needs_dot
def test_the_inner_loop_is_vpdpbusd(tmp_path) -> None:  # noqa: ANN001
    """Disassembling PoCL's cache: the channel-lane kernel's inner loop is vpdpbusd, with no 16-bit
    multiply-add or 32-bit multiply left. Skips without VNNI or objdump."""
    out = pocl_probe(tmp_path, DOT_PROBE)
    main = [line.split()[2:] for line in out.splitlines() if re.match(r"so .*_conv2d_integer", line)]
    assert main, out
    assert any(v == ["True", "False"] for v in main), out


def test_a_module_for_the_dot_product_is_refused_where_the_device_lacks_it(monkeypatch) -> None:  # noqa: ANN001
    """Kernels lowered for VNNI would stop the process with an illegal instruction on a CPU without it: the
    Executable refuses them with a diagnostic instead (TESSEL_INT8_DOT=0 makes this device one without)."""
    from tessel.ir.diagnostics import DiagnosticError
    from tessel.targets.opencl.kernels.testing import run_op

    if dev.opencl_available() is not None:
        pytest.skip("needs an OpenCL device")
    monkeypatch.setenv("TESSEL_INT8_DOT", "0")
    case = Conv("ui8", "i8", 1, 8, (6, 7), 16, 3, pad=(1, 1, 1, 1))
    inputs, attrs = conv_operands(case, rng_for("dot-missing"))
    with pytest.raises(DiagnosticError, match="compiled for a device with avx512vnni"):
        run_op("conv2d_integer", inputs, attrs, info=VNNI, constant=constant(4, False))


@pytest.mark.parametrize("reverse, lengths, per_col, hidden", [
    (False, [], False, 32), (True, [5, 3], True, 32), (False, [4, 5], False, 36)])
def test_dot_qlstm_scan(reverse: bool, lengths: list[int], per_col: bool, hidden: int) -> None:
    """DynamicQuantizeLSTM's scan on the dot product: chosen for i8 R at a constant zero point of 0 and H a
    multiple of 16 (not for another zero point, nor H = 36, which keeps the int-vector loop), and as the
    int-vector loop's result (each step's h quantized once into bytes, the column sums once), reversed,
    with sequence lengths and a scale per column."""
    rng = rng_for("qlstm", str(reverse), str(lengths), str(per_col), str(hidden))
    steps, batch = 5, 2
    ins = [rng.standard_normal((steps, batch, 4 * hidden)).astype(np.float32),
           rng.integers(-120, 120, (hidden, 4 * hidden)).astype(np.int8),
           (rng.standard_normal((batch, hidden)) * 0.5).astype(np.float32),
           (rng.standard_normal((batch, hidden)) * 0.5).astype(np.float32),
           (rng.uniform(0.002, 0.01, 4 * hidden) if per_col else np.array(0.005)).astype(np.float32),
           np.zeros(4 * hidden if per_col else (), np.int8)]
    attrs = {"reverse": reverse, "lengths": lengths}
    consts = (False, True, False, False, True, True)
    types = [TensorType.of(a) for a in ins]
    def dot(values: list[np.ndarray]) -> bool:
        low = lower_op("qlstm_scan", types, attrs, constant=consts, info=VNNI, values=values)[1]
        return bool(low.schedule.get("quads"))

    assert dot(ins) == (hidden % 16 == 0)
    assert not dot([*ins[:5], np.ones_like(ins[5])])
    if not has_dot():
        pytest.skip("the device has no 8-bit dot product (AVX-512 VNNI)")
    check_op("qlstm_scan", ins, attrs, constant=consts, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(dev.opencl_available() is not None, reason="no OpenCL")
def test_the_feature_probe_runs_only_for_a_kernel_that_would_use_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """device_info records the features everything but the probe says the device has; the probe program
    (device._probed) is built and run only when a lowering would use one (DeviceInfo.has): a float model
    never pays for it. A hand-made DeviceInfo (no hook) is taken at its word."""
    real, asked = dev._probed, []
    monkeypatch.setattr(dev, "_probed", lambda d: asked.append(d) or real(d))
    d = dev.pick_device()
    info = dev.device_info(d)
    m = parse_module("""module @m {
  func @main(%x: tensor<4x32xf32>, %w: tensor<32x16xf32>) -> tensor<4x16xf32> {
    %0 = matmul %x, %w : (tensor<4x32xf32>, tensor<32x16xf32>) -> tensor<4x16xf32>
    return %0 : tensor<4x16xf32>
  }
}""", "<test>")
    lower_module(m, info)
    assert asked == []
    assert not info.has("") and not info.has("sse9")
    if info.int8_dot:
        assert info.has(info.int8_dot) == (info.int8_dot in real(d)) and asked == [d]
    assert VNNI.has("avx512vnni") and not VNNI.has("avx512vbmi")
