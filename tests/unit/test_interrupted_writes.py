"""An interrupted or failed write never leaves a partial output nor clobbers an existing one (DESIGN §1).

In process (click's CliRunner, through the tools' real `handle_errors`): the printer (or numpy.savez for
`tessel-run --outputs`) is patched to write part of the output and then raise KeyboardInterrupt (Ctrl-C:
exit 130, `interrupted`), a RuntimeError (a bug: exit 3) or OSError ENOSPC (a full disk: exit 1). After
each, the output folder holds exactly what it held before, byte for byte: no temp file, no half file.
Then the same with a real SIGINT sent to a `tessel-import -o` subprocess while it writes a 16 MB model,
and the cases where a rename cannot be used (a FIFO) or must not replace the name (a symlink).
"""

from __future__ import annotations

import errno
import io
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import click
import numpy as np
import pytest
from click.testing import CliRunner
from tessel.cli import codegen as codegen_cli
from tessel.cli import import_ as import_cli
from tessel.cli import opt as opt_cli
from tessel.cli import run as run_cli
from tessel.ir import printer

from .test_bad_inputs import check_clean_stderr

CORPUS = Path(__file__).resolve().parents[1] / "bad_inputs"
MODEL_TSL = str(CORPUS / "npz" / "model.tsl")
MODEL_ONNX = str(CORPUS / "onnx" / "valid.onnx")  # has a weight: a resources section to write
OLD = b"// the output of an earlier run: a failed run must leave these bytes alone\n"
OLD_SIDE = b"earlier weights\n"

# (tool, its click command, arguments before the output flags)
TOOLS: dict[str, tuple[click.Command, list[str]]] = {
    "tessel-opt": (opt_cli.main, [MODEL_TSL, "--pass-pipeline=cse"]),
    "tessel-import": (import_cli.main, [MODEL_ONNX]),
    "tessel-codegen": (codegen_cli.main, [MODEL_TSL]),
}
# (exception raised mid-write, exit status, message on stderr)
FAILURES: dict[str, tuple[Callable[[], BaseException], int, str]] = {
    "ctrl-c": (KeyboardInterrupt, 130, ": interrupted"),
    "bug": (lambda: RuntimeError("boom mid-write"), 3, "internal compiler error: RuntimeError: boom"),
    "disk-full": (lambda: OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), 1, "No space left on device"),
}


def invoke(tool: str, command: click.Command, args: list[str]) -> click.testing.Result:
    return CliRunner().invoke(command, args, prog_name=tool)


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def half_then_raise(make_exc: Callable[[], BaseException]) -> Callable[..., None]:
    """A print_module that writes the first half of the real text (and side-file bytes), then raises."""
    real = printer.print_module

    def fake(m, out, **kwargs) -> None:  # noqa: ANN001
        buf = io.StringIO()
        real(m, buf, **kwargs)
        out.write(buf.getvalue()[: len(buf.getvalue()) // 2])
        out.flush()
        raise make_exc()

    return fake


@pytest.mark.parametrize("failure", list(FAILURES))
@pytest.mark.parametrize("tool", list(TOOLS))
@pytest.mark.parametrize("existing", [True, False], ids=["existing", "new"])
def test_failed_write_leaves_the_output_alone(tool: str, failure: str, existing: bool, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    command, args = TOOLS[tool]
    make_exc, code, message = FAILURES[failure]
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    if existing:
        (out_dir / "m.tsl").write_bytes(OLD)
        (out_dir / "w.bin").write_bytes(OLD_SIDE)
    before = snapshot(out_dir)
    monkeypatch.setattr(opt_cli, "print_module", half_then_raise(make_exc))  # write_modules prints with it
    r = invoke(tool, command, [*args, "-o", str(out_dir / "m.tsl"), f"--external-weights={out_dir}/w.bin"])
    assert r.exit_code == code, f"exit {r.exit_code}, expected {code}:\n{r.stderr}\n{r.exception!r}"
    assert message in r.stderr, r.stderr
    assert snapshot(out_dir) == before, "the output folder changed: a partial file, a temp file or a clobber"
    if failure != "bug":
        check_clean_stderr(r.stderr)


@pytest.mark.parametrize("failure", list(FAILURES))
@pytest.mark.parametrize("existing", [True, False], ids=["existing", "new"])
def test_run_outputs_failed_write(failure: str, existing: bool, tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    make_exc, code, message = FAILURES[failure]
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    if existing:
        (out_dir / "r.npz").write_bytes(OLD)
    before = snapshot(out_dir)

    def fake_savez(f, **arrays) -> None:  # noqa: ANN001
        f.write(b"PK\x03\x04 half an archive")
        raise make_exc()

    monkeypatch.setattr(np, "savez", fake_savez)
    r = invoke("tessel-run", run_cli.main, [MODEL_TSL, "--random-inputs", "-q", "--outputs",
                                            str(out_dir / "r.npz")])
    assert r.exit_code == code, f"exit {r.exit_code}, expected {code}:\n{r.stderr}\n{r.exception!r}"
    assert message in r.stderr, r.stderr
    assert snapshot(out_dir) == before


def test_the_patches_do_bite(tmp_path: Path) -> None:
    """Without a patch the same commands do write their outputs (so the tests above can fail)."""
    for tool, (command, args) in TOOLS.items():
        out = tmp_path / f"{tool}.tsl"
        r = invoke(tool, command, [*args, "-o", str(out)])
        assert r.exit_code == 0, r.stderr
        assert out.read_text().startswith("module"), tool
    r = invoke("tessel-run", run_cli.main, [MODEL_TSL, "--random-inputs", "-q", "--outputs",
                                            str(tmp_path / "r.npz")])
    assert r.exit_code == 0 and set(np.load(tmp_path / "r.npz").files) == {"result0"}


def _big_model(path: Path) -> None:
    """A 16 MB MatMul weight: tessel-import spends a fraction of a second writing it."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((2048, 2048), dtype=np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "big",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2048])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2048])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def _default_sigint() -> None:
    """In the child: Ctrl-C's default action, which Python turns into KeyboardInterrupt (a test runner
    started in the background hands its children SIGINT ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_during_a_real_import(tmp_path: Path) -> None:
    """SIGINT while `tessel-import -o` writes (its temp file exists): exit 130, `interrupted`, no
    traceback, the earlier output intact and no temp file. On a loaded machine the write may finish
    before the signal lands (exit 0, a complete new file); then it tries again."""
    model = tmp_path / "big.onnx"
    _big_model(model)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    tool = Path(sys.executable).parent / "tessel-import"
    for _attempt in range(3):
        (out_dir / "m.tsl").write_bytes(OLD)
        p = subprocess.Popen([str(tool), str(model), "-o", str(out_dir / "m.tsl")], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint)
        deadline = time.monotonic() + 60
        while p.poll() is None and len(os.listdir(out_dir)) < 2 and time.monotonic() < deadline:
            time.sleep(0.001)
        p.send_signal(signal.SIGINT)
        stdout, stderr = p.communicate(timeout=60)
        if p.returncode == 0:  # finished first: the new output is whole, and nothing else is left
            assert sorted(os.listdir(out_dir)) == ["m.tsl"] and (out_dir / "m.tsl").read_bytes() != OLD
            continue
        assert p.returncode == 130, f"exit {p.returncode}:\n{stderr}"
        assert stderr == "tessel-import: interrupted\n", stderr
        assert stdout == ""
        assert snapshot(out_dir) == {"m.tsl": OLD}
        return
    pytest.fail("the import finished before SIGINT landed, three times")


def test_output_to_a_fifo_is_written_in_place(tmp_path: Path) -> None:
    """A FIFO (like /dev/null or /dev/stdout) cannot be renamed over: the tool writes into it, and it
    stays a FIFO. (Replacing a device node with a regular file is what root's rename would do.)"""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    r = invoke("tessel-opt", opt_cli.main, [MODEL_TSL, "-o", str(fifo)])
    reader.join(timeout=10)  # a daemon: if the FIFO was renamed over, its reader blocks forever
    assert r.exit_code == 0, r.stderr
    assert stat.S_ISFIFO(os.stat(fifo).st_mode), "the FIFO was replaced by a regular file"
    assert got and got[0].startswith(b"module")
    assert sorted(os.listdir(tmp_path)) == ["pipe"]


def test_output_through_a_symlink_keeps_the_link(tmp_path: Path) -> None:
    target = tmp_path / "real.tsl"
    target.write_bytes(OLD)
    link = tmp_path / "link.tsl"
    link.symlink_to(target)
    r = invoke("tessel-opt", opt_cli.main, [MODEL_TSL, "-o", str(link)])
    assert r.exit_code == 0, r.stderr
    assert link.is_symlink() and target.read_text().startswith("module")
    assert sorted(os.listdir(tmp_path)) == ["link.tsl", "real.tsl"]
