"""--check-bounds and --poison on the device: instrumented kernels record their first out-of-bounds access
(global and __local, reads and writes, through helpers), suppress it, and leave in-bounds runs alone; the
runtime reports it as a KernelFault naming kernel, node and argument; poison marks memory no kernel wrote."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from tessel.ir.core import Module
from tessel.ir.parser import parse_module
from tessel.targets.opencl import device as dev
from tessel.targets.opencl.checks import KernelFault, poisoned, trace_launches
from tessel.targets.opencl.lower import lower_module
from tessel.targets.opencl.runtime import Executable
from tessel.targets.opencl.sanitize import ERROR_BUFFER_BYTES, PREAMBLE, SINK_OFFSET, Violation, instrument

from .conftest import here

LOCAL = """__kernel void KERNEL(__global const float* X, __global float* Y, const int shift) {
    __local float L[16];
    const int l = get_local_id(0);
    L[l + shift] = X[get_global_id(0)];
    barrier(CLK_LOCAL_MEM_FENCE);
    Y[get_global_id(0)] = L[15 - l];
}"""


def run_kernel(source: str, extents: list[int], arrays: list[np.ndarray], scalars: tuple = (),
               size: int = 16) -> tuple[Violation | None, list[np.ndarray]]:
    cl = dev.cl()
    device = dev.pick_device()
    ctx = cl.Context([device])
    q = cl.CommandQueue(ctx, device)
    text = instrument(source, extents)
    # the instrumented kernel takes (buffers..., tsl_err, tsl_step) after the template's parameters
    prg = cl.Program(ctx, PREAMBLE + text.replace("KERNEL", "k")).build()
    mf = cl.mem_flags
    bufs = [cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=a) for a in arrays]
    zeros = np.zeros(ERROR_BUFFER_BYTES // 4, np.int32)
    err = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=zeros)
    k = cl.Kernel(prg, "k")
    k.set_args(*bufs, *scalars, err, np.int32(5))
    cl.enqueue_nd_range_kernel(q, k, (size,), (size,))
    record = np.empty(ERROR_BUFFER_BYTES // 4, np.int32)
    cl.enqueue_copy(q, record, err)
    outs = []
    for a, b in zip(arrays, bufs, strict=True):
        o = np.empty_like(a)
        cl.enqueue_copy(q, o, b)
        outs.append(o)
    q.finish()
    return Violation.read(record[: SINK_OFFSET // 4]), outs


def test_local_accesses_in_bounds_run_clean_and_compute_the_same() -> None:
    x = np.arange(16, dtype=np.float32)
    # the kernel's `shift` parameter is a scalar: extents cover the buffers only
    v, (_, y) = run_kernel(LOCAL, [64, 64], [x, np.zeros(16, np.float32)], (np.int32(0),))
    assert v is None
    np.testing.assert_array_equal(y, x[::-1])


def test_a_local_write_past_the_array_is_recorded_and_suppressed() -> None:
    x = np.arange(16, dtype=np.float32)
    v, (_, y) = run_kernel(LOCAL, [64, 64], [x, np.zeros(16, np.float32)], (np.int32(1),))
    assert v is not None
    assert (v.local, v.store, v.arg, v.step) == (True, True, -1, 5)  # the kernel's first __local array
    assert (v.offset // v.esize, v.extent // v.esize, v.count) == (16, 16, 1)
    np.testing.assert_array_equal(y[:15], x[14::-1])  # L[1..15] = X[0..14]; X[15] went to the sink


def test_a_global_read_before_the_buffer_is_recorded_with_a_negative_element() -> None:
    src = """__kernel void KERNEL(__global const float* X, __global float* Y) {
    const int g = get_global_id(0);
    Y[g] = X[g - 1];
}"""
    v, (_, y) = run_kernel(src, [64, 64], [np.ones(16, np.float32), np.zeros(16, np.float32)])
    assert v is not None and not v.store and (v.arg, v.offset // v.esize, v.count) == (0, -1, 1)
    assert np.all(y[1:] == 1.0)


def test_helpers_check_against_the_root_their_caller_passed() -> None:
    src = """static inline float KERNEL_get(__global const float* restrict p, int i) { return p[i]; }
__kernel void KERNEL(__global const float* X, __global float* Y) {
    const int g = get_global_id(0);
    Y[g] = KERNEL_get(X + 8, g);
}"""
    v, _ = run_kernel(src, [64, 64], [np.ones(16, np.float32), np.zeros(16, np.float32)])
    assert v is not None and v.arg == 0 and v.offset // v.esize == 16 and v.count == 8


MODULE = """module @m {
  func @main(%x: tensor<4x8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
    %0 = add %x, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32> loc("onnx:Add_0")
    %1 = relu %0 : (tensor<4x8xf32>) -> tensor<4x8xf32> loc("onnx:Relu_1")
    return %1 : tensor<4x8xf32>
  }
}"""


def checked(source: str = MODULE, **kw: object) -> tuple[Executable, list[np.ndarray]]:
    m = parse_module(source, "<test>")
    lower_module(m, here(), check_bounds=True)
    f = m.funcs[0]
    rng = np.random.default_rng(0)
    return Executable(m, f, **kw), [rng.standard_normal(a.type.dims).astype(np.float32) for a in f.args]


def edited(source: str, loc: str, edit: Callable[[str], str],
           check_bounds: bool = True) -> tuple[Module, str]:
    """`source` lowered, with the program's text from the kernel of the launch at `loc` on passed through
    `edit` (a bug planted in one kernel): the module and that kernel's name."""
    m = parse_module(source, "<test>")
    lower_module(m, here(), check_bounds=check_bounds)
    prog = m.funcs[0].block.ops[0]
    launch = next(op for op in m.funcs[0].block.ops if op.name == "cl.launch" and op.loc == (loc,))
    name = launch.attrs["kernels"][0]["name"]
    text = prog.attrs["source"]
    head = text.index(f"void {name}(")
    prog.attrs["source"] = text[:head] + edit(text[head:])
    return m, name


def test_a_checked_module_runs_on_the_pool_and_matches() -> None:
    exe, (x, b) = checked(poison=True)
    assert exe.execution == "pool" and exe.checks is not None and exe.checks.bounds
    for _ in range(3):
        (y,) = exe.run([x, b])
        np.testing.assert_allclose(y, np.maximum(x + b, 0), rtol=1e-6)


def test_a_corrupted_extent_is_reported_as_a_kernel_fault_naming_kernel_node_and_argument() -> None:
    """The relu's output extent shrunk by one element in the program: its last store is out of bounds."""
    m, name = edited(MODULE, "onnx:Relu_1",
                     lambda t: t.replace("tsl_n_out0 = 128UL", "tsl_n_out0 = 124UL", 1))
    exe = Executable(m, m.funcs[0])
    with pytest.raises(KernelFault) as e:
        exe.run([np.ones((4, 8), np.float32), np.ones(8, np.float32)])
    d = e.value.diagnostics[0]
    assert d.message == (f"out-of-bounds write in kernel {name} (ONNX node Relu_1): element 16 of a "
                         "31-element buffer")
    notes = "\n".join(n.message for n in d.notes)
    assert "the access is a 16-element vector (elements 16 to 31)" in notes
    assert ("the buffer is the kernel's argument 'out0' (out0: result #0 of the launch, "
            "tensor<4x8xf32>)") in notes
    assert e.value.exit_code == 3


def test_poison_fills_the_plan_and_the_trace_reads_every_launch() -> None:
    exe, (x, b) = checked(poison=True)
    launches = trace_launches(exe, [x, b])
    assert [op.loc for op, _ in launches] == [("onnx:Add_0",), ("onnx:Relu_1",)]
    assert all(poisoned(r) == 0 for _, rs in launches for r in rs)  # every kernel wrote its whole result
    q = exe._pool_queue
    exe.checks.before(q)  # the plan as a run starts: every slot poisoned
    slot = exe.slots[0]
    raw = np.empty(32, np.uint32)
    if exe.svm:
        raw[:] = np.array(slot.mem[:128]).view(np.uint32)
    else:
        exe.cl.enqueue_copy(q, raw, slot, is_blocking=True)
    assert np.all(raw == 0x7FA00000)
    assert poisoned(raw.view(np.float32)) == 32


@pytest.mark.parametrize("dtypes, first", [({"f32"}, 0x7FA00000), ({"i64", "f16"}, 0x7D00),
                                           ({"i32", "bool"}, 0xA5)])
def test_poison_patterns_follow_the_buffer_dtype(dtypes: set[str], first: int) -> None:
    from tessel.targets.opencl.checks import poison_pattern

    p = poison_pattern(dtypes)
    width = 4 if first > 0xFFFF else 2 if first > 0xFF else 1
    assert int.from_bytes(p[:width].tobytes(), "little") == first


T = "tensor<1x2x16x8xf32>"
ATTENTION = f"""module @m {{
  func @main(%q: {T}, %k: {T}, %v: {T}) -> {T} {{
    %0 = attention %q, %k, %v {{scale = 0.5}} : ({T}, {T}, {T}) -> {T} loc("onnx:Attention_0")
    return %0 : {T}
  }}
}}"""


def test_a_local_array_overrun_is_reported_by_the_array_name() -> None:
    """The attention kernel's __local key panel `kl` shrunk to half in the program: the kernel's fill of
    its second half is out of bounds, and the fault names the array, not a kernel argument."""
    def halve(text: str) -> str:
        assert "const ulong tsl_n_kl = 512UL" in text
        return text.replace("const ulong tsl_n_kl = 512UL", "const ulong tsl_n_kl = 256UL", 1)

    m, _ = edited(ATTENTION, "onnx:Attention_0", halve)
    exe = Executable(m, m.funcs[0])
    rng = np.random.default_rng(0)
    with pytest.raises(KernelFault) as e:
        exe.run([rng.standard_normal((1, 2, 16, 8)).astype(np.float32) for _ in range(3)])
    d = e.value.diagnostics[0]
    kernel = exe.steps[0].name
    assert d.message.startswith(f"out-of-bounds write of __local array 'kl' in kernel {kernel} "
                                "(ONNX node Attention_0): element ")
    assert d.message.endswith("of a 64-element array")
    assert int(d.message.split("element ")[1].split()[0]) >= 64
    assert not any("the kernel's argument" in n.message for n in d.notes)


def test_cooperative_execution_refuses_checked_kernels() -> None:
    from tessel.ir.diagnostics import DiagnosticError

    with pytest.raises(DiagnosticError, match="cooperative execution cannot run checked kernels"):
        checked(execution="cooperative")
    exe, _ = checked(poison=True, execution="auto")  # auto settles on the pool, without comparing ways
    assert exe.execution == "pool"


def test_poisoned_counts_the_pattern_of_each_dtype() -> None:
    import ml_dtypes

    f = np.array([0x7FA00000, 0x7FC00000, 0x7FA00000], np.uint32).view(np.float32)  # the quiet NaN is not
    assert poisoned(f) == 2
    assert poisoned(np.array([0x7D00, 0x7E00], np.uint16).view(np.float16)) == 1
    assert poisoned(np.array([0x7FA0, 0x7FA0, 0], np.uint16).view(ml_dtypes.bfloat16)) == 2
    assert poisoned(np.array([0xA5A5A5A5, 7, -1], np.int64).astype(np.uint32).view(np.int32)) == 1
    assert poisoned(np.full(5, 0xA5, np.uint8).view(np.bool_)) == 5
    assert poisoned(np.array([0xA5A5A5A5A5A5A5A5, 0], np.uint64).view(np.int64)) == 1
    assert poisoned(np.zeros(0, np.float32)) == 0


def test_tessel_run_check_bounds_lowers_with_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """`tessel-run --check-bounds` on graph-level IR lowers with the checks on: the off-by-one plugin's
    max_pool kernel is caught (exit status 3), not run unchecked."""
    import runpy
    from pathlib import Path

    from click.testing import CliRunner
    from tessel.cli import run
    from tessel.targets.opencl.kernels import load_all
    from tessel.targets.opencl.kernels.base import TEMPLATES

    load_all()
    root = Path(__file__).resolve().parents[2]
    monkeypatch.setitem(TEMPLATES, "max_pool2d", TEMPLATES["max_pool2d"])  # restored after the test
    runpy.run_path(str(root / "tests" / "plugins" / "kernel_off_by_one.py"))
    monkeypatch.delenv("TESSEL_CHECK_BOUNDS", raising=False)
    source = root / "lit_tests" / "targets" / "opencl" / "Inputs" / "max-pool.tsl"
    r = CliRunner().invoke(run.main, [str(source), "--target=opencl", "--check-bounds", "--random-inputs"],
                           prog_name="tessel-run")
    assert r.exit_code == 3, r.output
    assert ("out-of-bounds read in kernel k0_max_pool2d (ONNX node /features/pool1/MaxPool): element 1024 "
            "of a 1024-element buffer") in r.stderr


def test_the_first_wrong_launch_counts_the_poison_it_left() -> None:
    """A relu kernel that returns at once leaves its result as the poison fill: the note names its kernel
    and node and counts the elements still holding the pattern."""
    from tessel.debug.localize import first_wrong_launch
    from tessel.debug.validate import Tolerance

    src = MODULE.replace(
        "    return %1 : tensor<4x8xf32>",
        '    %2 = add %1, %0 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32> loc("onnx:Add_2")\n'
        "    return %2 : tensor<4x8xf32>")
    m, name = edited(src, "onnx:Relu_1", lambda t: t.replace("{", "{ return;", 1), check_bounds=False)
    exe = Executable(m, m.funcs[0], poison=True)
    x, b = np.ones((4, 8), np.float32), np.ones(8, np.float32)
    note = first_wrong_launch(m, m.funcs[0], [x, b], exe, Tolerance(1e-3, 1e-4))
    assert note is not None
    assert note.startswith(f"the first launch whose results differ is kernel {name} (ONNX node Relu_1): ")
    assert note.endswith("; 32 of them hold the poison pattern: memory no kernel wrote)")


QUANTIZED = """module @q {
  func @main(%x: tensor<1x32x7x7xui8>, %t: tensor<256xui8>) -> tensor<1x32x7x7xui8> {
    %w = const {value = dense<3> : tensor<32x1x3x3xi8>} : () -> tensor<32x1x3x3xi8>
    %xz = const {value = dense<128> : tensor<ui8>} : () -> tensor<ui8>
    %wz = const {value = dense<0> : tensor<i8>} : () -> tensor<i8>
    %s = const {value = dense<0.01> : tensor<32xf32>} : () -> tensor<32xf32>
    %yz = const {value = dense<120> : tensor<ui8>} : () -> tensor<ui8>
    %c = qconv2d %x, %w, %xz, %wz, %s, %yz {groups = 32, pads = [1, 1, 1, 1], strides = [1, 1]} : \
(tensor<1x32x7x7xui8>, tensor<32x1x3x3xi8>, tensor<ui8>, tensor<i8>, tensor<32xf32>, tensor<ui8>) -> \
tensor<1x32x7x7xui8> loc("onnx:Conv_0")
    %y = lookup %c, %t : (tensor<1x32x7x7xui8>, tensor<256xui8>) -> tensor<1x32x7x7xui8> loc("onnx:Lookup_1")
    return %y : tensor<1x32x7x7xui8>
  }
}"""


def test_the_integer_kernels_with_shuffles_run_checked_and_match() -> None:
    """The depthwise conv with 16 channels in the lanes (its repack and stores transposed by shuffles)
    and, where the device has the byte permute, the 64-element lookup (its loads joined by shuffles) are
    instrumented like any kernel and compute what the unchecked module does."""
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (1, 32, 7, 7)).astype(np.uint8)
    t = rng.integers(0, 256, 256).astype(np.uint8)
    outs = []
    for bounds in (True, False):
        m = parse_module(QUANTIZED, "<test>")
        lower_module(m, here(), check_bounds=bounds)
        source = m.funcs[0].block.ops[0].attrs["source"]
        assert "16 channels (lanes)" in source
        assert ("vpermi2varqi512" in source) == here().has("avx512vbmi")
        (y,) = Executable(m, m.funcs[0]).run([x, t])
        outs.append(y)
    np.testing.assert_array_equal(outs[0], outs[1])
