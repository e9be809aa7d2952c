"""What tessel reads off an OpenCL device (device.device_info), on fake devices: no OpenCL needed."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from tessel.targets.opencl import device as dev
from tessel.targets.opencl.kernels.conv_geometry import pick_tile

cl = pytest.importorskip("pyopencl")


def _cpu(preferred: int, native: int) -> SimpleNamespace:
    platform = SimpleNamespace(name="Fake", version="1.0")
    return SimpleNamespace(
        platform=platform, name="fake cpu", version="1", driver_version="1", max_compute_units=2,
        max_work_group_size=8192, local_mem_size=262144, mem_base_addr_align=1024, extensions="",
        type=cl.device_type.CPU, preferred_vector_width_float=preferred, native_vector_width_float=native)


@pytest.mark.parametrize(("preferred", "native", "floats"), [
    (16, 16, 16),  # PoCL on AVX-512
    (8, 8, 8),  # PoCL on AVX2
    (1, 16, 16),  # Intel's CPU runtime: asks for scalar code, its registers hold 16 floats
    (1, 8, 8),
    (0, 0, 4),  # nothing reported: SSE's four
])
def test_simd_width_is_the_registers_width(preferred: int, native: int, floats: int) -> None:
    info = dev.device_info(_cpu(preferred, native))
    assert dev.simd_floats(_cpu(preferred, native)) == floats
    assert info.vector_width == floats
    assert info.vector_registers == (32 if floats >= 16 else 16)


def test_a_runtime_that_vectorizes_itself_gets_the_avx512_register_budget() -> None:
    """The tile budget follows the register width, not the preferred width of 1 (Intel's runtime was
    handed 2-accumulator tiles: squeezenet 7.7 ms, 3.7 with the native width)."""
    assert dev.device_info(_cpu(1, 16)).accumulators(16) == 30


@pytest.mark.parametrize(("nc", "cap"), [(4, 2), (3, 1), (1, 0), (2, 2)])
def test_a_tile_has_a_pixel_even_past_the_register_budget(nc: int, cap: int) -> None:
    """pick_tile returns a tile of at least one pixel when the columns alone exceed the accumulators (it
    returned 0 rows, and the conv's tile check divided by zero)."""
    th, tw = pick_tile(13, 13, 24 // nc, nc=nc, cap=cap)
    assert th >= 1 and tw >= 1


def test_measured_peaks_reach_the_lowering(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """device_info carries the device's calibrated peaks (given, or the stored ones), which the lowering's
    cost model reads; a device never calibrated has none (the rules without peaks apply)."""
    from tessel.targets.opencl.profile import Peaks, save_peaks

    monkeypatch.setenv("TESSEL_CACHE_DIR", str(tmp_path))
    cpu = _cpu(16, 16)
    none = dev.device_info(cpu)
    assert (none.peak_gflops, none.stream_gbps, none.copy_gbps) == (0.0, 0.0, 0.0)
    given = dev.device_info(cpu, Peaks(300.0, 27.0, 4.0, stream_gbps=13.0))
    assert (given.peak_gflops, given.stream_gbps, given.copy_gbps) == (300.0, 13.0, 27.0)
    save_peaks(cpu, Peaks(200.0, 30.0, 4.0, stream_gbps=40.0))
    stored = dev.device_info(cpu)
    assert (stored.peak_gflops, stored.stream_gbps, stored.copy_gbps) == (200.0, 40.0, 30.0)
