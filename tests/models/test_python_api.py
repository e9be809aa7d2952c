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
