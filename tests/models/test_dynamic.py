"""Dynamic dims end to end (issue 35): one import, one compile, inputs of two sizes each, on the numpy
reference and on OpenCL, against onnxruntime; what get_inputs reports; errors for inputs that do not fit.
The models (tests/models/dynamic.py) are small and built here, as exporters write them."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest
import tessel
from tessel.api import InvalidArgument

from .dynamic import (
    MODELS,
    cnn,
    if_branch_for_other_shapes,
    if_on_input,
    loop_counted,
    scan_sequence,
    squeeze_if,
    squeeze_if_gemm,
)

ort = pytest.importorskip("onnxruntime")


def _opencl() -> bool:
    from tessel.targets.opencl import device

    return device.opencl_available() is None


def _feed(shape: tuple[int, ...], seed: int) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}


@pytest.mark.parametrize("target", ["numpy", "opencl"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_one_compile_two_sizes(name: str, target: str) -> None:
    if target == "opencl" and not _opencl():
        pytest.skip("no OpenCL platform")
    make, shapes = MODELS[name]
    data = make()
    session = ort.InferenceSession(data)
    model = tessel.compile(data, target=target)
    for i, shape in enumerate(shapes):
        feed = _feed(shape, i)
        (want,) = session.run(None, feed)
        (got,) = model.run(None, feed)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)
    if target == "opencl":
        assert model._exe.compiled == 2  # each size compiled once, at its first run
        model.run(None, _feed(shapes[0], 5))
        assert model._exe.compiled == 2


def test_import_keeps_dims_symbolic() -> None:
    from tessel.frontends.onnx.importer import import_model
    from tessel.ir.printer import to_text

    text = to_text(import_model(MODELS["paddle"][0](), "paddle.onnx"))
    assert "func @main(%x: tensor<[x_0]x4x[x_2]x[x_3]xf32>)" in text  # -1 and unnamed dims are symbols
    # the 0s copy the input's (symbolic) dims and the -1 is what they leave
    assert "reshape %s {shape = [[x_0], 6, [x_2 * x_3]]}" in text
    text = to_text(import_model(cnn(), "cnn.onnx"))
    assert "shape = [[N], 8]" in text and "gather" not in text  # the shape chain folded


def test_input_shape_still_makes_a_static_module() -> None:
    model = tessel.compile(cnn(), target="numpy", input_shapes={"x": [1, 3, 16, 16]})
    assert model.get_inputs()[0].shape == [1, 3, 16, 16]
    assert "[" not in str(model.func.args[0].type)


def test_get_inputs_reports_dynamic_dims() -> None:
    model = tessel.compile(cnn(), target="numpy")
    (x,) = model.get_inputs()
    assert x.shape == ["N", 3, "H", "W"]  # as onnxruntime reports dim_params
    assert model.get_outputs()[0].shape == ["N", 10]
    model = tessel.compile(MODELS["paddle"][0](), target="numpy")  # -1 and unnamed dims: None, as ort says
    assert model.get_inputs()[0].shape == [None, 4, None, None]
    assert model.get_outputs()[0].shape == [None, None, 5]


def test_inputs_that_do_not_fit() -> None:
    model = tessel.compile(cnn(), target="numpy")
    with pytest.raises(InvalidArgument, match=r"input 'x' has shape \[1, 4, 8, 8\], expected tensor<\[N\]x3"):
        model.run(None, {"x": np.zeros((1, 4, 8, 8), np.float32)})
    with pytest.raises(InvalidArgument, match="input 'x' has shape"):
        model.run(None, {"x": np.zeros((1, 3, 8), np.float32)})


def test_shape_hints_on_a_static_model() -> None:
    """A static model is compiled for its one size: a hint of that size changes nothing, another is an
    error (not a crash of the specializer on lowered IR)."""
    if not _opencl():
        pytest.skip("no OpenCL platform")
    static = tessel.compile(cnn(), input_shapes={"x": [1, 3, 16, 16]}, shape_hints={"x": [1, 3, 16, 16]})
    assert static.run(None, _feed((1, 3, 16, 16), 0))[0].shape == (1, 10)
    with pytest.raises(InvalidArgument, match=r"do not fit the model's static inputs \[\[1, 3, 16, 16\]\]"):
        tessel.compile(cnn(), input_shapes={"x": [1, 3, 16, 16]}, shape_hints={"x": [1, 3, 8, 8]})


def test_shape_hint_lowers_a_size_ahead(tmp_path) -> None:  # noqa: ANN001
    """tessel compile --shape-hint embeds that size's kernels; tessel-run runs it and another size."""
    if not _opencl():
        pytest.skip("no OpenCL platform")
    src = tmp_path / "cnn.onnx"
    src.write_bytes(cnn())
    out = tmp_path / "cnn.cl.tsl"
    tool = [sys.executable, "-m", "tessel"]
    subprocess.run([*tool, "compile", str(src), "--shape-hint", "x=1x3x16x16", "-o", str(out)], check=True)
    text = out.read_text()
    assert 'func @main.s0(%x: tensor<1x3x16x16xf32>)' in text and 'specializes = "main"' in text
    for shape in ("1x3x16x16", "2x3x10x12"):
        r = subprocess.run([*tool, "run", str(out), "--random-inputs", "--input-shape", f"x={shape}",
                            "--check-against", "numpy"], capture_output=True, text=True, check=True)
        assert "matches numpy" in r.stdout
    bad = subprocess.run([*tool, "compile", str(src), "--shape-hint", "y=1x3x16x16"], capture_output=True,
                         text=True)
    assert bad.returncode == 2 and "every input" in bad.stderr
    static = subprocess.run([*tool, "compile", str(src), "--input-shape", "x=1x3x16x16", "--shape-hint",
                             "x=1x3x16x16"], capture_output=True, text=True)
    assert static.returncode == 2 and "no func with dynamic dims" in static.stderr
    wrong = subprocess.run([*tool, "run", str(out), "--random-inputs", "--input-shape", "x=1x4x16x16"],
                           capture_output=True, text=True)
    assert wrong.returncode == 1 and "shape [1, 4, 16, 16] given for input 'x' does not fit" in wrong.stderr
    none = subprocess.run([*tool, "run", str(out), "--random-inputs"], capture_output=True, text=True)
    assert none.returncode == 1 and "give its shape (--input-shape x=DxD...)" in none.stderr


def test_if_with_branches_of_other_ranks_splits_the_rest() -> None:
    """An If whose branches give other ranks (squeeze where T is 1) becomes an `if` whose regions each hold
    a copy of the rest of the graph; where the rest does not convert after one branch, an `assert`."""
    from tessel.frontends.onnx.importer import import_model
    from tessel.ir.printer import to_text

    text = to_text(import_model(squeeze_if(), "squeeze_if.onnx"))
    assert text.count("= relu %") == 2 and "= if %" in text and "assert" not in text
    text = to_text(import_model(squeeze_if_gemm(), "squeeze_if_gemm.onnx"))
    assert "= if %" not in text and text.count("gemm %") == 1
    assert ("assert %is1 {message = \"the model cannot run at these input sizes: its If 'squeeze_if' takes "
            "its else branch, after which the graph does not convert (ONNX node 'fc' (Gemm):") in text


def test_an_if_whose_rest_converts_after_neither_branch_is_an_import_error() -> None:
    """A Conv after the If takes neither the squeezed rank nor the other: one error naming the If."""
    from tessel.frontends.onnx.importer import import_model
    from tessel.ir.diagnostics import DiagnosticError

    from .dynamic import _f32, _squeeze_if

    rng = np.random.default_rng(8)
    conv = onnx.helper.make_node("Conv", ["s", "w"], ["y"], name="conv")
    data = _squeeze_if([conv], {"w": _f32(rng, 4, 8, 3, 3)}, ["N", 4, None, None], "neither")
    with pytest.raises(DiagnosticError, match="ONNX node 'squeeze_if' \\(If\\): the branches yield .* with "
                                              "the rest of the graph converted into each branch, neither "
                                              "converts"):
        import_model(data, "neither.onnx")


@pytest.mark.parametrize("target", ["numpy", "opencl"])
def test_assert_fails_a_run_at_sizes_the_model_cannot_take(target: str) -> None:
    if target == "opencl" and not _opencl():
        pytest.skip("no OpenCL platform")
    model = tessel.compile(squeeze_if_gemm(), target=target)
    model.run(None, _feed((2, 8, 1), 0))
    with pytest.raises(InvalidArgument, match="the model cannot run at these input sizes: its If "
                                              "'squeeze_if' takes its else branch"):
        model.run(None, _feed((2, 8, 3), 0))


@pytest.mark.parametrize("target", ["numpy", "opencl"])
def test_an_if_branch_that_does_not_convert_fails_only_when_taken(target: str) -> None:
    """An If on an input whose else branch does not convert at the model's shapes (silero-vad's 8 kHz
    branch at a 16 kHz chunk size, compiled statically) imports with that branch as a failing assert: the
    other branch runs, and taking this one is an InvalidArgument naming the If and the reason."""
    if target == "opencl" and not _opencl():
        pytest.skip("no OpenCL platform")
    data = if_branch_for_other_shapes()
    model = tessel.compile(data, target=target, input_shapes={"x": [2, 8, 1]})
    x = np.random.default_rng(1).standard_normal((2, 8, 1)).astype(np.float32)
    w = onnx.numpy_helper.to_array(next(i for i in onnx.load_from_string(data).graph.initializer
                                        if i.name == "w"))  # onnxruntime refuses the model: its Gemm
    (got,) = model.run(None, {"x": x, "flag": np.array(True)})
    np.testing.assert_allclose(got, x[:, :, 0] @ w, rtol=1e-5, atol=1e-6)
    with pytest.raises(InvalidArgument, match="the model cannot run at these input sizes: its If 'pick' "
                                              r"takes its else branch, which does not convert at them"):
        model.run(None, {"x": x, "flag": np.array(False)})


def _control_feeds(name: str) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(7)
    f32 = np.float32
    return {
        "if": [{"x": rng.standard_normal((2, 8)).astype(f32), "sr": np.array(16000)},
               {"x": rng.standard_normal((3, 8)).astype(f32), "sr": np.array(8000)}],
        "loop": [{"steps": np.array(3), "s0": rng.standard_normal((1, 6)).astype(f32)},
                 {"steps": np.array(7), "s0": rng.standard_normal((1, 6)).astype(f32)}],
        "scan": [{"acc0": np.zeros(3, f32), "xs": rng.standard_normal((4, 3)).astype(f32)},
                 {"acc0": np.ones(3, f32), "xs": rng.standard_normal((9, 3)).astype(f32)}],
    }[name]


CONTROL = {"if": if_on_input, "loop": loop_counted, "scan": scan_sequence}


@pytest.mark.parametrize("target", ["numpy", "opencl"])
@pytest.mark.parametrize("name", sorted(CONTROL))
def test_control_flow(name: str, target: str) -> None:
    """An If on an input (both branches taken), a Loop whose trip count is an input (its scan output as long
    as the count), a Scan over a symbolic length: one compile, two calls, as onnxruntime computes."""
    if target == "opencl" and not _opencl():
        pytest.skip("no OpenCL platform")
    data = CONTROL[name]()
    session = ort.InferenceSession(data)
    model = tessel.compile(data, target=target)
    op = {"if": "if", "loop": "loop", "scan": "scan"}[name]
    assert any(o.name == op for o in model.modules["imported"].funcs[0].block.ops)
    for feed in _control_feeds(name):
        want = session.run(None, feed)
        got = model.run(None, feed)
        for g, w in zip(got, want, strict=True):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_a_size_gets_the_kernels_of_its_static_compile() -> None:
    """-O2 fuses the dynamic module (tessel-opt shows the regions); compiling one size dissolves those
    regions and fuses again with the sizes known, so the size launches what its static compile launches."""
    if not _opencl():
        pytest.skip("no OpenCL platform")
    dynamic = tessel.compile(cnn())
    assert any(op.name == "kernel" for op in dynamic.modules["optimized"].walk())
    for shape in ((1, 3, 16, 16), (2, 3, 13, 9)):
        feed = _feed(shape, 0)
        static = tessel.compile(cnn(), input_shapes={"x": list(shape)})
        (got,), (want,) = dynamic.run(None, feed), static.run(None, feed)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        launched = [(s.name, s.global_size) for s in dynamic._exe.for_shapes([shape]).steps]
        assert launched == [(s.name, s.global_size) for s in static._exe.steps]


def test_loop_carried_values_stay_on_the_device(monkeypatch) -> None:  # noqa: ANN001
    """On OpenCL each iteration of a loop gets the state the last one left on the device (a DeviceArray,
    copied device to device), never a host array; the host reads back the condition and the results."""
    if not _opencl():
        pytest.skip("no OpenCL platform")
    from tessel.targets.opencl import control
    from tessel.targets.opencl.runtime import DeviceArray

    carried: list[type] = []
    region = control.Plan.region

    def spy(self, op, k, env, args):  # noqa: ANN001, ANN202
        if op.name == "loop":
            carried.append(type(args[2]))
        return region(self, op, k, env, args)

    monkeypatch.setattr(control.Plan, "region", spy)
    model = tessel.compile(loop_counted())
    feed = {"steps": np.array(5), "s0": np.ones((1, 6), np.float32)}
    want = ort.InferenceSession(loop_counted()).run(None, feed)
    got = model.run(None, feed)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    assert len(carried) == 5 and carried[0] is np.ndarray  # the input s0, from the host
    assert all(t is DeviceArray for t in carried[1:])


def test_if_note_names_the_constant_input(tmp_path) -> None:  # noqa: ANN001
    """tessel-import says which --constant-input would fold an If decided by an input; given it, the If
    folds away at import."""
    src = tmp_path / "switch.onnx"
    src.write_bytes(if_on_input())
    tool = [sys.executable, "-m", "tessel", "import"]
    r = subprocess.run([*tool, str(src), "--elide-resources"], capture_output=True, text=True, check=True)
    assert "note: If 'switch' is decided at run time by graph input 'sr'" in r.stderr
    assert "--constant-input sr=FILE.npy" in r.stderr and " = if " in r.stdout
    np.save(tmp_path / "sr.npy", np.array(16000))
    given = f"sr={tmp_path / 'sr.npy'}"
    r = subprocess.run([*tool, str(src), "--constant-input", given, "--elide-resources"],
                       capture_output=True, text=True, check=True)
    assert " = if " not in r.stdout and "relu" in r.stdout and not r.stderr
