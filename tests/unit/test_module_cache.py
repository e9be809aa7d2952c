"""The compiled-module cache (targets/opencl/compiled.py): `tessel.compile` of a model compiled before, in
any process, loads the module instead of compiling it; a dynamic model's sizes likewise; a changed model,
option, device or tessel gives another key; a bad entry is a miss (a CacheWarning), never a wrong model;
the folder is trimmed least recently used first. The OpenCL cases skip without a platform."""

from __future__ import annotations

import base64
import hashlib
import os
import warnings
from pathlib import Path

import numpy as np
import pytest
from tessel.targets.opencl import compiled
from tessel.targets.opencl.cache import CacheWarning
from tessel.targets.opencl.device import opencl_available

NO_OPENCL = opencl_available()
needs_opencl = pytest.mark.skipif(NO_OPENCL is not None, reason=str(NO_OPENCL))

W = (np.arange(256, dtype=np.float32).reshape(16, 16) % 11 - 5) / 7
STATIC = """module @m {
func @main(%x: tensor<3x16xf32>) -> tensor<3x16xf32> {
  %w = const {value = dense_resource<w> : tensor<16x16xf32>} : () -> tensor<16x16xf32>
  %0 = matmul %x, %w : (tensor<3x16xf32>, tensor<16x16xf32>) -> tensor<3x16xf32>
  %1 = relu %0 : (tensor<3x16xf32>) -> tensor<3x16xf32>
  return %1 : tensor<3x16xf32>
}
}
{-#
  resources: {
    w: "sha256:DIGEST:base64:PAYLOAD"
  }
#-}
""".replace("DIGEST", hashlib.sha256(W.tobytes()).hexdigest()).replace(
    "PAYLOAD", base64.b64encode(W.tobytes()).decode())
DYNAMIC = STATIC.replace("tensor<3x16xf32>", "tensor<?x16xf32>")
K = (np.arange(16 * 9 * 9, dtype=np.float32).reshape(16, 9, 3, 3) % 13 - 6) / 10
CONV = """module @c {
func @main(%x: tensor<1x9x8x8xf32>) -> tensor<1x16x8x8xf32> {
  %w = const {value = dense_resource<w> : tensor<16x9x3x3xf32>} : () -> tensor<16x9x3x3xf32>
%0 = conv2d %x, %w {pads = [1, 1, 1, 1]} : (tensor<1x9x8x8xf32>, tensor<16x9x3x3xf32>) -> tensor<1x16x8x8xf32>
  return %0 : tensor<1x16x8x8xf32>
}
}
{-#
  resources: {
    w: "sha256:DIGEST:base64:PAYLOAD"
  }
#-}
""".replace("DIGEST", hashlib.sha256(K.tobytes()).hexdigest()).replace(
    "PAYLOAD", base64.b64encode(K.tobytes()).decode())

K16 = (np.arange(16 * 16 * 9, dtype=np.float32).reshape(16, 16, 3, 3) % 7 - 3) / 20
WIDE = CONV.replace("@c", "@wide").replace("x9x", "x16x").replace("16x9x3x3", "16x16x3x3").replace(
    "x8x8", "x48x48")
WIDE = WIDE.replace(hashlib.sha256(K.tobytes()).hexdigest(), hashlib.sha256(K16.tobytes()).hexdigest())
WIDE = WIDE.replace(base64.b64encode(K.tobytes()).decode(), base64.b64encode(K16.tobytes()).decode())
"""A 3x3 conv the Winograd rule considers (16 channels each way, 10.6 MFLOP): its lowering asks for the
device's peaks."""


@pytest.fixture
def cache_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The cache on (tests/conftest.py turns it off for the other tests), in a folder of its own (the
    calibration stays where the suite keeps it)."""
    monkeypatch.setenv("TESSEL_MODULE_CACHE", "1")
    monkeypatch.setattr(compiled, "folder", lambda: str(tmp_path / "modules"))
    return tmp_path / "modules"


def _run(model: object, x: np.ndarray) -> np.ndarray:
    return model.run(None, {"x": x})[0]  # type: ignore[attr-defined]


@needs_opencl
def test_a_second_compile_loads_the_module(cache_on: Path) -> None:
    import tessel

    x = np.linspace(-1, 1, 48, dtype=np.float32).reshape(3, 16)
    first = tessel.compile(STATIC)
    assert "cache" not in first.phases and {"import", "opt", "codegen", "store"} <= set(first.phases)
    assert len(list(cache_on.glob("*.tsl"))) == 1 and len(list(cache_on.glob("*.weights"))) == 1
    again = tessel.compile(STATIC)
    assert set(again.phases) == {"cache"}
    np.testing.assert_array_equal(_run(again, x), _run(first, x))
    np.testing.assert_allclose(_run(again, x), np.maximum(x @ W, 0), rtol=1e-5, atol=1e-6)
    # the levels before the target's are made again when asked for
    assert "imported" in again.modules and again.modules["imported"].attrs.get("target") != "opencl"
    assert set(again.modules) == {"imported", "optimized", "target"}


@needs_opencl
def test_what_the_module_depends_on_is_in_the_key(cache_on: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tessel

    tessel.compile(STATIC)
    assert "cache" not in tessel.compile(STATIC, opt_level=1).phases  # an option
    assert "cache" not in tessel.compile(STATIC.replace("relu", "sigmoid")).phases  # the model
    monkeypatch.setattr(compiled, "_CODE", "another tessel")
    assert "cache" not in tessel.compile(STATIC).phases  # tessel's code
    assert "cache" not in tessel.compile(STATIC, cache=False).phases
    monkeypatch.setenv("TESSEL_MODULE_CACHE", "0")
    assert "cache" not in tessel.compile(STATIC).phases


@needs_opencl
@pytest.mark.parametrize("damage", ["weights", "text"])
def test_a_bad_entry_is_compiled_again(cache_on: Path, damage: str) -> None:
    import tessel

    x = np.ones((3, 16), np.float32)
    want = _run(tessel.compile(STATIC), x)
    (path,) = cache_on.glob(f"*.{'weights' if damage == 'weights' else 'tsl'}")
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF
    path.write_bytes(bytes(data))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = tessel.compile(STATIC)
    assert "cache" not in again.phases
    found = [w for w in caught if issubclass(w.category, CacheWarning)]
    assert len(found) == 1 and "compiled again" in str(found[0].message), [str(w.message) for w in caught]
    np.testing.assert_array_equal(_run(again, x), want)
    assert "cache" in tessel.compile(STATIC).phases  # stored again


@needs_opencl
def test_a_dynamic_models_sizes_are_kept(cache_on: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tessel
    from tessel.targets.opencl import dynamic

    x = np.linspace(-1, 1, 80, dtype=np.float32).reshape(5, 16)
    want = _run(tessel.compile(DYNAMIC), x)  # size 5 compiled at its first run, then kept

    def no_compiling(*args: object, **kwargs: object) -> None:
        raise AssertionError("a size in the cache was compiled again")

    monkeypatch.setattr(dynamic, "compile_size", no_compiling)
    again = tessel.compile(DYNAMIC)
    assert "cache" in again.phases
    np.testing.assert_array_equal(_run(again, x), want)
    with pytest.raises(AssertionError, match="compiled again"):
        _run(again, x[:2])  # a size never met is compiled


@needs_opencl
def test_the_weights_are_kept_packed(cache_on: Path) -> None:
    """What the lowering packs at load time (a conv's weights) is stored packed: the module read from the
    cache has no load-time op left, and runs as the one compiled."""
    import tessel

    def load_time_ops(model: object) -> list[str]:
        func = model.module.funcs[0]  # type: ignore[attr-defined]
        return [op.name for op in func.block.ops if op.name not in compiled.NOT_LOAD_TIME]

    x = np.linspace(-1, 1, 9 * 64, dtype=np.float32).reshape(1, 9, 8, 8)
    plain = tessel.compile(CONV, cache=False)
    assert load_time_ops(plain)  # what there was to fold
    first = tessel.compile(CONV)
    again = tessel.compile(CONV)
    assert "cache" in again.phases and load_time_ops(first) == load_time_ops(again) == []
    want = _run(plain, x)
    np.testing.assert_array_equal(_run(first, x), want)
    np.testing.assert_array_equal(_run(again, x), want)


@needs_opencl
def test_a_model_file_met_before_is_not_read(cache_on: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A model given by path is found by its path and stat the second time, without reading it; the file
    rewritten is read (and compiled) again."""
    import tessel
    from tessel import api

    path = tmp_path / "m.tsl"
    path.write_text(STATIC)
    tessel.compile(path)
    read = api.model_bytes

    def no_reading(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model file was read")

    monkeypatch.setattr(api, "model_bytes", no_reading)
    assert "cache" in tessel.compile(path).phases
    path.write_text(STATIC.replace("relu", "sigmoid"))
    os.utime(path, ns=(1, 1))  # another stat, however coarse the clock
    with pytest.raises(AssertionError, match="was read"):
        tessel.compile(path)
    monkeypatch.setattr(api, "model_bytes", read)
    again = tessel.compile(path)
    assert "cache" not in again.phases
    x = np.ones((3, 16), np.float32)
    np.testing.assert_allclose(_run(again, x), 1 / (1 + np.exp(-(x @ W))), rtol=1e-5)


def test_models_with_external_weights_are_not_cached() -> None:
    assert compiled.model_key(b"\x08\x07...location\x12weights.bin", False, {}, "info") is None
    assert compiled.model_key(b'module { } {-# resources: { w: "sha256:00:external:w.bin:0:4" } #-}', True,
                              {}, "info") is None
    key = compiled.model_key(b"\x08\x07 model bytes", False, {"opt_level": 2}, "info")
    assert key is not None and key != compiled.model_key(b"\x08\x07 model bytes", False, {"opt_level": 1},
                                                         "info")


def test_the_folder_is_trimmed_least_recently_used_first(tmp_path: Path) -> None:
    for i, name in enumerate(["old", "mid", "new"]):
        for ext, size in ((".tsl", 1 << 19), (".weights", 1 << 19)):
            path = tmp_path / f"{name}{ext}"
            path.write_bytes(b"x" * size)
            os.utime(path, (1000 + i, 1000 + i))
    compiled.trim(str(tmp_path), limit_mb=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mid.tsl", "mid.weights", "new.tsl", "new.weights"]
    compiled.trim(str(tmp_path), limit_mb=0.5)
    assert list(tmp_path.iterdir()) == []


@needs_opencl
def test_the_device_is_calibrated_by_the_first_compile_that_needs_it(
        cache_on: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a machine with no stored peaks a compile whose lowering chooses nothing by them does not
    calibrate; the first that does calibrates (once) and is stored under the key of the peaks stored by
    then, so the next compile of it is a read."""
    import tessel
    from tessel.targets.opencl import profile

    monkeypatch.setenv("TESSEL_CACHE_DIR", str(tmp_path / "fresh"))  # no stored peaks
    made: list[str] = []

    def fake(device: object, *args: object, **kwargs: object) -> profile.Peaks:
        made.append("calibrated")
        return profile.Peaks(300.0, 27.0, 5.0, "fake", "2026-01-01", stream_gbps=13.0)

    monkeypatch.setattr(profile, "calibrate", fake)
    assert "cache" not in tessel.compile(STATIC).phases and made == []
    assert "cache" not in tessel.compile(CONV).phases and made == []  # 9 channels: the rule refuses it
    x = np.linspace(-1, 1, 16 * 48 * 48, dtype=np.float32).reshape(1, 16, 48, 48)
    first = tessel.compile(WIDE)
    assert "cache" not in first.phases and made == ["calibrated"]
    again = tessel.compile(WIDE)
    assert set(again.phases) == {"cache"} and made == ["calibrated"]
    np.testing.assert_array_equal(_run(again, x), _run(first, x))


@needs_opencl
def test_a_dynamic_size_calibrates_the_device_when_its_lowering_needs_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A dynamic func's sizes are lowered at run time (as tessel-run runs a dynamic module): with no
    stored peaks, the first size whose conv the Winograd rule considers calibrates the device, once."""
    from tessel.ir.parser import parse_module
    from tessel.targets.opencl import device as dev
    from tessel.targets.opencl import dynamic, profile
    from tessel.targets.opencl.lower import lower_module

    monkeypatch.setenv("TESSEL_CACHE_DIR", str(tmp_path))  # no stored peaks
    made: list[str] = []

    def fake(device: object, *args: object, **kwargs: object) -> profile.Peaks:
        made.append("calibrated")
        return profile.Peaks(300.0, 27.0, 5.0, "fake", "2026-01-01", stream_gbps=13.0)

    monkeypatch.setattr(profile, "calibrate", fake)
    m = parse_module(WIDE.replace("tensor<1x16x48x48xf32>", "tensor<?x16x48x48xf32>"), "<test>")
    lower_module(m, profile.compile_info(dev.pick_device()))
    assert made == []  # nothing lowered yet: the sizes come at run time
    exe = dynamic.executable(m, m.funcs[0])
    x = np.ones((2, 16, 48, 48), np.float32)
    exe.run([x])
    exe.run([x[:1]])
    assert made == ["calibrated"]
