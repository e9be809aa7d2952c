"""The int8 contractions (`qconv2d`, `qmatmul`) against the float ones (`conv2d`, `matmul` / `gemm`) on the
same shapes: best-of-runs milliseconds and GOP/s of each, and the int8 speed-up.

    POCL_AFFINITY=1 .venv/bin/python bench/micro_int8.py [--runs 5] [--repeat 10] [name-filter]
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("POCL_AFFINITY", "1")  # before pyopencl is imported

import numpy as np  # noqa: E402
from tessel.targets.opencl.kernels.testing import run_op  # noqa: E402

rng = np.random.default_rng(0)


def f32(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def u8(*shape: int) -> np.ndarray:
    return rng.integers(0, 256, shape, dtype=np.uint8)


def i8(*shape: int) -> np.ndarray:
    return rng.integers(-127, 128, shape, dtype=np.int8)


def q_params(channels: int) -> list[np.ndarray]:
    """x zero point, w zero point (0), per-channel scale, y zero point, i32 bias."""
    return [np.array(128, np.uint8), np.array(0, np.int8), np.full(channels, 1e-4, np.float32),
            np.array(128, np.uint8), rng.integers(-1000, 1000, channels, dtype=np.int32)]


def conv(name: str, c: int, o: int, hw: int, k: int, s: int = 1, g: int = 1) -> tuple:
    p = k // 2
    ho = (hw + 2 * p - k) // s + 1
    ops = 2 * o * ho * ho * (c // g) * k * k
    attrs = {"strides": [s, s], "pads": [p] * 4, "groups": g}
    qx, qw = u8(1, c, hw, hw), i8(o, c // g, k, k)
    return (name, ("conv2d", [f32(1, c, hw, hw), f32(o, c // g, k, k), f32(o)], attrs),
            ("qconv2d", [qx, qw, *q_params(o)], attrs), ops)


def fc(name: str, m: int, k: int, n: int) -> tuple:
    qb = i8(k, n)
    return (name, ("matmul", [f32(m, k), f32(k, n)], {}),
            ("qmatmul", [u8(m, k), qb, *q_params(n)], {}), 2 * m * k * n)


CASES = [
    conv("conv 3x3 64->64 56^2", 64, 64, 56, 3),
    conv("conv 1x1 256->64 56^2", 256, 64, 56, 1),
    conv("conv 3x3 256->256 14^2", 256, 256, 14, 3),
    conv("conv 3x3 s2 128->128 28^2", 128, 128, 28, 3, 2),
    conv("dw 3x3 144ch 56^2", 144, 144, 56, 3, g=144),
    conv("dw 3x3 48ch 80^2", 48, 48, 80, 3, g=48),
    conv("dw 3x3 s2 96ch 80^2", 96, 96, 80, 3, 2, g=96),
    conv("dw 3x3 384ch 10^2", 384, 384, 10, 3, g=384),
    conv("dw 5x5 480ch 14^2", 480, 480, 14, 5, g=480),
    fc("fc 1x4096x4096", 1, 4096, 4096),
    fc("gemm 197x768x768", 197, 768, 768),
    fc("gemm 128x3072x768", 128, 3072, 768),
]


def best(op: tuple, runs: int, repeat: int) -> float:
    name, inputs, attrs = op
    weights = (False,) + (True,) * (len(inputs) - 1)  # constants, packed once at load as a model's are
    return min(run_op(name, inputs, attrs, repeat=repeat, constant=weights)[1] for _ in range(runs))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5, help="timed batches; the best median is reported")
    ap.add_argument("--repeat", type=int, default=10, help="launches per timed batch")
    ap.add_argument("filter", nargs="?", default="")
    args = ap.parse_args()
    print(f"{'case':28} {'f32 ms':>8} {'GFLOP/s':>8} {'int8 ms':>8} {'GOP/s':>8} {'int8 speed-up':>13}")
    for name, fop, qop, ops in CASES:
        if args.filter not in name:
            continue
        tf, tq = best(fop, args.runs, args.repeat), best(qop, args.runs, args.repeat)
        print(f"{name:28} {tf * 1e3:8.3f} {ops / tf / 1e9:8.1f} {tq * 1e3:8.3f} {ops / tq / 1e9:8.1f} "
              f"{tf / tq:13.2f}")


if __name__ == "__main__":
    main()
