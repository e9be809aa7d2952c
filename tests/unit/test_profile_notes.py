"""--profile's notes on kernels under LOW_PEAK of their roofline bound (profile.why_low): each says why as
far as the launches tell."""

from __future__ import annotations

from tessel.targets.opencl.profile import KernelRow, Peaks, why_low

PEAKS = Peaks(gflops=300.0, gbps=30.0, launch_us=5.0)


def row(name: str, ms: float, flops: int, nbytes: int, helper: bool = False, groups: int = 64,
        launches: int = 1) -> KernelRow:
    return KernelRow(name, launches, ms, flops, nbytes, ["conv2d"], [], helper, groups, (4, 1, 1))


def test_a_kernel_near_its_bound_gets_no_note() -> None:
    assert why_low(row("k1_conv2d", 1.0, int(200e6), int(1e6)), PEAKS, 2) == ""  # 200 of 300 GFLOP/s


def test_a_helper_moves_data_for_its_op() -> None:
    note = why_low(row("k2_conv2d", 1.0, 0, int(3e6), helper=True), PEAKS, 2)  # 3 GB/s of 30
    assert note.startswith("moves data for its conv2d (a repack or a transform") and "3.0 GB/s" in note


def test_a_short_launch_is_the_dispatch() -> None:
    note = why_low(row("k3_conv2d", 0.008, 1000, int(1e4)), PEAKS, 2)
    assert note == "8.0 us a launch, where the pool's dispatch costs ~5 us"


def test_too_few_work_groups_for_the_cores() -> None:
    note = why_low(row("k4_conv2d", 1.0, int(20e6), int(1e5), groups=1), PEAKS, 2)
    assert note == "1 work-group of (4, 1, 1) for 2 cores"


def test_otherwise_the_shape_has_no_fitted_kernel() -> None:
    note = why_low(row("k5_conv2d", 1.0, int(20e6), int(1e5)), PEAKS, 2)
    assert note.startswith("compute-bound conv2d at 7% of the roofline with 64 work-groups of (4, 1, 1)")
