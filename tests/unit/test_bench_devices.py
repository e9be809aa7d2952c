"""The benches' device options (no OpenCL, no timing): bench/intel_opencl.py's ICD registration and
tune_bench's --device-info."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest
from tessel.targets.opencl.kernels.base import DeviceInfo

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load(name: str):  # noqa: ANN202
    spec = importlib.util.spec_from_file_location(f"tessel_bench_{name}", BENCH / f"{name}.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_intel_runtime_is_registered_beside_the_other_vendors(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """register() points the ICD loader at a folder holding the vendors it read before (PoCL stays
    visible) and one file naming the venv's libintelocl.so, and returns the spec that picks it."""
    intel = _load("intel_opencl")
    prefix = tmp_path / "venv"
    (prefix / "lib").mkdir(parents=True)
    (prefix / "lib" / "libintelocl.so").write_bytes(b"")
    vendors = tmp_path / "vendors"
    vendors.mkdir()
    (vendors / "pocl.icd").write_text("libpocl.so.2\n")
    monkeypatch.setattr(sys, "prefix", str(prefix))
    monkeypatch.setenv("OCL_ICD_VENDORS", str(vendors))
    assert intel.register() == "Intel(R) OpenCL"
    folder = Path(os.environ["OCL_ICD_VENDORS"])
    assert folder != vendors
    assert (folder / "pocl.icd").read_text() == "libpocl.so.2\n"
    assert (folder / "tessel-intel-cpu.icd").read_text().strip() == str(prefix / "lib" / "libintelocl.so")


def test_intel_runtime_missing_says_how_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    intel = _load("intel_opencl")
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    with pytest.raises(SystemExit, match=r"pip install -e '\.\[intel-opencl\]'"):
        intel.register()


def test_device_info_overrides() -> None:
    sys.path.insert(0, str(BENCH))
    try:
        tune_bench = _load("tune_bench")
    finally:
        sys.path.remove(str(BENCH))
    info = tune_bench.as_info(DeviceInfo.generic(), "vector_width=8,vector_registers=16")
    assert (info.vector_width, info.vector_registers, info.compute_units) == (8, 16, 2)
    assert tune_bench.as_info(DeviceInfo.generic(), "") == DeviceInfo.generic()
    with pytest.raises(SystemExit, match="not <DeviceInfo field>=<integer>"):
        tune_bench.as_info(DeviceInfo.generic(), "registers=16")
