"""The same script with `onnxruntime.InferenceSession(...)` and with `tessel.compile(...)` swapped in: on
the light models (seeded random weights) and the zoo (bench/zoo, when built), the outputs match.

squeezenet and the transformer encoder run in `make test`; the other light models and the zoo are slow
(`make test-all`); zoo models that are not built (bench/zoo/build.py, the bench extra) are skipped.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest

from .test_models import LIGHT

ZOO = Path(__file__).resolve().parents[2] / "bench" / "zoo"
FAST = {"light_squeezenet"}
ort = pytest.importorskip("onnxruntime")


def _opencl() -> bool:
    from tessel.targets.opencl import device

    return device.opencl_available() is None


def script(make_session: Callable[[str], object], path: str,
           feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """What a user's script does: open a session on the file, look up the inputs, run."""
    session = make_session(path)
    names = [i.name for i in session.get_inputs()]  # type: ignore[attr-defined]
    outs = [o.name for o in session.get_outputs()]  # type: ignore[attr-defined]
    return list(session.run(outs, {n: feeds[n] for n in names}))  # type: ignore[attr-defined]


def _swap(path: str, feeds: dict[str, np.ndarray]) -> None:
    import tessel

    want = script(lambda p: ort.InferenceSession(p, providers=["CPUExecutionProvider"]), path, feeds)
    got = script(tessel.compile, path, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-4)


def _light() -> list:
    return [pytest.param(p, id=p.stem, marks=[] if p.stem in FAST else [pytest.mark.slow]) for p in LIGHT]


@pytest.mark.parametrize("path", _light())
def test_light_model_swaps_for_onnxruntime(path: Path, tmp_path: Path) -> None:
    if not _opencl():
        pytest.skip("no OpenCL device")
    from tessel.frontends.onnx.randomize import randomize_weights

    model = randomize_weights(onnx.load(path), seed=0)
    file = tmp_path / path.name
    onnx.save(model, file)
    inits = {i.name for i in model.graph.initializer}
    rng = np.random.default_rng(3)
    feeds = {vi.name: rng.standard_normal([d.dim_value for d in vi.type.tensor_type.shape.dim])
             .astype(np.float32) for vi in model.graph.input if vi.name not in inits}
    _swap(str(file), feeds)


def test_transformer_swaps_for_onnxruntime(tmp_path: Path) -> None:
    if not _opencl():
        pytest.skip("no OpenCL device")
    from .transformer import build_encoder, encoder_inputs

    file = tmp_path / "encoder.onnx"
    model = build_encoder()
    onnx.save(model, file)
    _swap(str(file), encoder_inputs(model))


def _zoo() -> list:
    sys.path.insert(0, str(ZOO))
    import zoo

    return [pytest.param(s.name, marks=[pytest.mark.slow]) for s in zoo.SPECS]


@pytest.mark.parametrize("name", _zoo())
def test_zoo_model_swaps_for_onnxruntime(name: str) -> None:
    if not _opencl():
        pytest.skip("no OpenCL device")
    import zoo

    try:
        path, feeds = zoo.load(name)
    except FileNotFoundError as e:
        pytest.skip(str(e))
    _swap(str(path), feeds)


def test_run_adds_no_work_to_the_executable(monkeypatch: pytest.MonkeyPatch) -> None:
    """After the first call at some input shapes, `CompiledModel.run` hands the caller's arrays to the
    executable as they are (no copy, no check that walks the func) and its results back as they come: the
    API's own cost is a dict lookup per input. A feed that differs (shape, dtype, names) is checked in
    full again, with the same errors."""
    import tessel
    from tessel.api import InvalidArgument
    from tessel.ir import interpreter

    from .dynamic import cnn

    model = tessel.compile(cnn(), target="opencl" if _opencl() else "numpy")
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    model.run(None, {"x": x})  # checked in full once
    seen: list[tuple[list[np.ndarray], list[np.ndarray]]] = []

    def executed(arrays: list[np.ndarray]) -> list[np.ndarray]:
        outs = [np.zeros((1, 10), np.float32)]
        seen.append((arrays, outs))
        return outs

    def no_check(*_args: object, **_kw: object) -> None:
        raise AssertionError("the feed was checked again")

    monkeypatch.setattr(model, "_execute", executed)
    monkeypatch.setattr(interpreter, "check_inputs", no_check)
    monkeypatch.setattr(interpreter, "Namer", no_check)
    outs = model.run(None, {"x": x})
    (arrays, given), = seen
    assert arrays[0] is x and outs[0] is given[0]
    monkeypatch.undo()
    with pytest.raises(InvalidArgument, match="input 'x' has dtype float64"):
        model.run(None, {"x": x.astype(np.float64)})
    with pytest.raises(InvalidArgument, match="missing input 'x'"):
        model.run(None, {"y": x})
