"""Out of memory, said plainly (issue 19).

- Device memory (targets/opencl/memory.py): a lowered func whose memory plan, inputs and weights exceed
  the device's global memory, or one of whose buffers exceeds its largest allocation, fails before
  anything is allocated, with one error line and notes naming the largest buffers, what they hold and
  their ONNX nodes. Small devices are simulated by the function's limit arguments and, for the tools,
  TESSEL_DEVICE_MEMORY.
- Host memory (cli/common.py): a MemoryError while a tool works, raised directly, inside a pass, or by
  a real address-space limit (RLIMIT_AS), exits 1 with `error: out of host memory while <what> (<file>)`
  and no traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper
from tessel.api import import_model_source, optimize
from tessel.ir.diagnostics import DiagnosticError, render
from tessel.ir.parser import parse_module
from tessel.targets.opencl.device import DeviceInfo, opencl_available
from tessel.targets.opencl.lower import lower_module
from tessel.targets.opencl.memory import ENV, check_memory, device_buffers, limits, parse_size

ROOT = Path(__file__).resolve().parents[2]
BLOCK = ROOT / "examples" / "block.tsl"
BIN = Path(sys.executable).parent


def lowered_block():  # noqa: ANN201
    """examples/block.tsl lowered as it is (no -O): buffers of 8 KiB, 3.8 KiB and less, 28.5 KiB in all."""
    return lowered_block_module().funcs[0]


def lowered_block_module():  # noqa: ANN201
    m = parse_module(BLOCK.read_bytes(), BLOCK.name)
    lower_module(m, DeviceInfo.generic())
    return m


def fc_model() -> onnx.ModelProto:
    """x[1, 256] @ fc.weight[256, 1024] (1 MiB) + fc.bias, in a node named /fc/MatMul."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((256, 1024)).astype(np.float32), "fc.weight")
    b = numpy_helper.from_array(np.zeros(1024, np.float32), "fc.bias")
    nodes = [helper.make_node("MatMul", ["x", "fc.weight"], ["h"], name="/fc/MatMul"),
             helper.make_node("Add", ["h", "fc.bias"], ["y"], name="/fc/Add")]
    graph = helper.make_graph(nodes, "fc", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1024])], [w, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def text(e: DiagnosticError) -> str:
    return "".join(render(d, default_file="tool") for d in e.diagnostics)


# --- device memory ------------------------------------------------------------------------------------

def test_a_buffer_over_the_largest_allocation() -> None:
    func = lowered_block()
    with pytest.raises(DiagnosticError) as e:
        check_memory(func, global_mem=1 << 30, max_alloc=5000)
    (d,) = e.value.diagnostics
    assert d.message == ("func @main needs a buffer of 8.0 KiB, more than the device allows in one "
                         "allocation (4.9 KiB); 3 buffers are over it")
    notes = [n.message for n in d.notes]
    assert len(notes) == 3 and all(n.startswith("8.0 KiB: ") for n in notes)
    # what each holds and the ONNX node of the launch writing it (the largest value's first)
    assert "memory-plan buffer 0 holding tensor<1x8x16x16xf32>" in notes[0]
    assert "written by Conv_0" in notes[0]
    assert any("weight (a constant) tensor<1x8x16x16xf32>, read by Mul_4" in n for n in notes)


def test_a_plan_and_weights_over_the_global_memory() -> None:
    func = lowered_block()
    with pytest.raises(DiagnosticError) as e:
        check_memory(func, global_mem=10 << 10, max_alloc=10 << 10)
    (d,) = e.value.diagnostics
    assert d.message == ("func @main needs 28.5 KiB of device memory (16.0 KiB memory plan, 9.5 KiB weights, "
                         "3.0 KiB inputs), more than the device has (10.0 KiB)")
    notes = [n.message for n in d.notes]
    assert len(notes) == 6  # the five largest buffers, then the rest in one
    assert "3.0 KiB: input 'image' tensor<1x3x16x16xf32>, read by Conv_0" in notes
    assert "864 bytes: weight 'conv.weight' (pack) tensor<1x1x3x3x3x8xf32>, read by Conv_0" in notes
    assert notes[-1] == "and 7 smaller buffers (712 bytes)"
    out = text(e.value)
    assert out.startswith("tool: error: func @main needs 28.5 KiB") and out.count("note:") == 6


def test_both_limits_at_once_give_two_errors() -> None:
    with pytest.raises(DiagnosticError) as e:
        check_memory(lowered_block(), global_mem=10 << 10, max_alloc=5000)
    assert [d.message.split(",")[0] for d in e.value.diagnostics] == [
        "func @main needs a buffer of 8.0 KiB",
        "func @main needs 28.5 KiB of device memory (16.0 KiB memory plan"]


def test_a_func_that_fits_passes() -> None:
    func = lowered_block()
    total = sum(b.bytes for b in device_buffers(func))
    check_memory(func, global_mem=total, max_alloc=8192)  # exactly enough
    with pytest.raises(DiagnosticError):
        check_memory(func, global_mem=total - 1, max_alloc=8192)
    with pytest.raises(DiagnosticError):
        check_memory(func, global_mem=total, max_alloc=8191)
    check_memory(func)  # no device, no limits: nothing to check


def test_weights_are_named_by_initializer_and_node() -> None:
    m = import_model_source(fc_model())
    optimize(m, 2)
    lower_module(m, DeviceInfo.generic())
    func = m.funcs[0]
    (big,) = [b for b in device_buffers(func) if b.bytes >= 1 << 20]
    assert big.kind == "weight" and big.bytes == 1 << 20
    with pytest.raises(DiagnosticError) as e:
        check_memory(func, global_mem=1 << 30, max_alloc=512 << 10)
    (d,) = e.value.diagnostics
    assert d.message.startswith("func @main needs a buffer of 1.0 MiB, more than the device allows")
    assert d.notes[0].message.startswith("1.0 MiB: weight 'fc.weight'")
    assert "read by /fc/MatMul" in d.notes[0].message


def test_the_buffers_are_what_an_executable_allocates() -> None:
    if opencl_available() is not None:
        pytest.skip(opencl_available())
    from tessel.targets.opencl.runtime import Executable

    m = lowered_block_module()
    func = m.funcs[0]
    exe = Executable(m, func, execution="pool")
    bufs = device_buffers(func)
    assert exe.peak_bytes == sum(b.bytes for b in bufs if b.kind == "plan")
    assert exe.weight_bytes == sum(b.bytes for b in bufs if b.kind == "weight")
    assert len(exe.slots) == sum(b.kind == "plan" for b in bufs)
    assert len(exe.args) == sum(b.kind == "input" for b in bufs)


def test_sizes_and_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert [parse_size(s) for s in ("4096", "64k", "512M", "2GiB", "3 MB")] == [4096, 64 << 10, 512 << 20,
                                                                                2 << 30, 3 << 20]
    with pytest.raises(ValueError):
        parse_size("lots")
    monkeypatch.delenv(ENV, raising=False)
    assert limits() is None
    monkeypatch.setenv(ENV, "10K")
    lim = limits()
    assert lim is not None and (lim.global_mem, lim.max_alloc, lim.by_env) == (10 << 10, 10 << 10, True)
    monkeypatch.setenv(ENV, "1M,4096")
    lim = limits()
    assert lim is not None and (lim.global_mem, lim.max_alloc) == (1 << 20, 4096)
    lim = limits(global_mem=123)  # the arguments win over the environment
    assert lim is not None and (lim.global_mem, lim.by_env) == (123, False)
    for bad in ("lots", "1M,2M,3M", "0"):
        monkeypatch.setenv(ENV, bad)
        with pytest.raises(DiagnosticError, match=f"{ENV}='{bad}' is not BYTES"):
            limits()


def test_codegen_checks_the_device_it_lowers_for(tmp_path: Path) -> None:
    from tessel.cli import codegen

    out = tmp_path / "block.cl.tsl"
    r = CliRunner().invoke(codegen.main, [str(BLOCK), "-o", str(out)], prog_name="tessel-codegen",
                           env={ENV: "10K"})
    assert r.exit_code == 1, r.output
    assert r.stderr.startswith("tessel-codegen: error: func @main needs 28.5 KiB of device memory")
    assert "(10.0 KiB, by TESSEL_DEVICE_MEMORY)" in r.stderr and "Traceback" not in r.stderr
    assert not out.exists()
    r = CliRunner().invoke(codegen.main, [str(BLOCK), "-o", str(out)], prog_name="tessel-codegen",
                           env={ENV: "1M"})
    assert r.exit_code == 0, r.output


# End to end through tessel-run: Executable.__init__ (targets/opencl/runtime.py) calls
# check_memory(func, self.device) before it builds or allocates anything.
@pytest.mark.skipif(opencl_available() is not None, reason=str(opencl_available()))
def test_tessel_run_fails_before_any_launch(tmp_path: Path) -> None:
    lowered = tmp_path / "block.cl.tsl"
    subprocess.run([str(BIN / "tessel-codegen"), str(BLOCK), "-o", str(lowered)], check=True)
    env = {**os.environ, ENV: "16K,6K"}
    r = subprocess.run([str(BIN / "tessel-run"), str(lowered), "--random-inputs", "--profile"],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 1, r.stderr
    assert "tessel-run: error: func @main needs a buffer of 8.0 KiB, more than device '" in r.stderr
    assert "tessel-run: error: func @main needs 28.5 KiB of device memory" in r.stderr
    assert "written by Conv_0" in r.stderr and "Traceback" not in r.stderr
    assert "ran @main" not in r.stdout and r.stdout == ""  # nothing ran


# --- host memory --------------------------------------------------------------------------------------

def test_a_memory_error_in_a_tool_exits_1(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from tessel.cli import import_
    from tessel.frontends.onnx import importer

    def exhausted(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise MemoryError

    path = tmp_path / "fc.onnx"
    path.write_bytes(fc_model().SerializeToString())
    monkeypatch.setattr(importer, "import_model", exhausted)
    r = CliRunner().invoke(import_.main, [str(path)], prog_name="tessel-import")
    assert r.exit_code == 1
    assert r.stderr == f"tessel-import: error: out of host memory while importing ({path})\n"


def test_protobuf_out_of_memory_is_out_of_memory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """upb reports a failed allocation as EncodeError('Failed to serialize proto') (onnx.checker serializes
    the model: an RLIMIT_AS of 600 MiB over a 256 MiB model fails there) or a DecodeError '... Arena
    alloc failed'."""
    from google.protobuf.message import EncodeError
    from tessel.cli import import_

    def exhausted(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise EncodeError("Failed to serialize proto")

    path = tmp_path / "fc.onnx"
    path.write_bytes(fc_model().SerializeToString())
    monkeypatch.setattr(onnx.checker, "check_model", exhausted)
    r = CliRunner().invoke(import_.main, [str(path)], prog_name="tessel-import")
    assert r.exit_code == 1
    assert r.stderr == f"tessel-import: error: out of host memory while importing ({path})\n"


def test_a_memory_error_in_a_pass_is_not_a_compiler_bug(monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    import tempfile

    from tessel.cli import opt
    from tessel.passes.cse import CSE

    def exhausted(self, module, ctx):  # noqa: ANN001, ANN202
        raise MemoryError

    monkeypatch.setattr(CSE, "run", exhausted)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the pass manager's reproducer goes
    r = CliRunner().invoke(opt.main, [str(BLOCK), "--pass-pipeline=cse"], prog_name="tessel-opt")
    assert r.exit_code == 1
    assert r.stderr == f"tessel-opt: error: out of host memory while optimizing ({BLOCK}, in pass 'cse')\n"


CHILD = """
import resource, sys
import numpy, onnx
from tessel.cli.import_ import main
import tessel.frontends.onnx.importer
size = next(int(l.split()[1]) * 1024 for l in open('/proc/self/status') if l.startswith('VmSize'))
resource.setrlimit(resource.RLIMIT_AS, (size + (32 << 20), resource.RLIM_INFINITY))
sys.argv = ['tessel-import', *sys.argv[1:]]
main()
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux's /proc for the VM size")
def test_a_real_address_space_limit_exits_1(tmp_path: Path) -> None:
    """A 64 MiB model in a process left 32 MiB of address space after its imports (RLIMIT_AS): the tool
    runs out of memory for real, and says so."""
    n = 16 << 20
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"], name="/add")], "big",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])],
        [numpy_helper.from_array(np.ones(n, np.float32), "w")])
    path = tmp_path / "big.onnx"
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path.write_bytes(model.SerializeToString())
    r = subprocess.run([sys.executable, "-c", CHILD, str(path), "-o", str(tmp_path / "big.tsl")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr
    assert r.stderr == f"tessel-import: error: out of host memory while importing ({path})\n"
    assert not (tmp_path / "big.tsl").exists()
