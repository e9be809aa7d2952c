"""GFLOP/s of the OpenCL gemm and conv templates on the shapes DESIGN §5 measures (best of several runs).

    POCL_AFFINITY=1 .venv/bin/python bench/micro_gemm_conv.py [--runs 5] [--repeat 10] [name-filter]
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("POCL_AFFINITY", "1")  # before pyopencl is imported

import numpy as np  # noqa: E402
from tessel.targets.opencl.kernels.testing import run_op  # noqa: E402

rng = np.random.default_rng(0)


def arr(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def conv(name: str, n: int, c: int, o: int, hw: int, k: int, s: int = 1, p: int | None = None, g: int = 1):
    p = k // 2 if p is None else p
    ho = (hw + 2 * p - k) // s + 1
    flops = 2 * n * o * ho * ho * (c // g) * k * k
    attrs = {"strides": [s, s], "pads": [p] * 4, "groups": g}
    return name, "conv2d", [arr(n, c, hw, hw), arr(o, c // g, k, k), arr(o)], attrs, flops


CASES = [
    ("sgemm 1024^3", "matmul", [arr(1024, 1024), arr(1024, 1024)], {}, 2 * 1024**3),
    ("sgemm 3136x64x576", "matmul", [arr(3136, 576), arr(576, 64)], {}, 2 * 3136 * 64 * 576),
    ("sgemm 49x512x4608", "matmul", [arr(49, 4608), arr(4608, 512)], {}, 2 * 49 * 512 * 4608),
    ("sgemm 32x256x1024 (rows 4 KiB apart)", "matmul", [arr(32, 1024), arr(1024, 256)], {},
     2 * 32 * 256 * 1024),
    ("sgemm 24x1024x4096 (small A, long K)", "matmul", [arr(24, 4096), arr(4096, 1024)], {},
     2 * 24 * 1024 * 4096),
    ("sgemm 32x2048x128 (wide-N head)", "matmul", [arr(32, 128), arr(128, 2048)], {}, 2 * 32 * 2048 * 128),
    ("gemv fc 1x9216x4096", "gemm", [arr(1, 9216), arr(4096, 9216), arr(4096)], {"trans_b": True},
     2 * 9216 * 4096),
    conv("conv 3x3 64->64 56^2", 1, 64, 64, 56, 3),
    conv("conv 1x1 256->64 56^2", 1, 256, 64, 56, 1),
    conv("conv 3x3 256->256 14^2", 1, 256, 256, 14, 3),
    conv("conv 7x7 s2 3->64 224^2", 1, 3, 64, 224, 7, 2, 3),
    conv("conv 11x11 s4 3->64 224^2", 1, 3, 64, 224, 11, 4, 2),
    conv("conv 3x3 512->512 14^2", 1, 512, 512, 14, 3),
    conv("conv 1x1 g3 240->240 28^2", 1, 240, 240, 28, 1, g=3),
    conv("dw 3x3 144ch 56^2", 1, 144, 144, 56, 3, g=144),
    conv("dw 3x3 s2 144ch 56^2", 1, 144, 144, 56, 3, 2, g=144),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5, help="timed batches; the best median is reported")
    ap.add_argument("--repeat", type=int, default=10, help="launches per timed batch")
    ap.add_argument("filter", nargs="?", default="")
    args = ap.parse_args()
    print(f"{'case':28} {'best ms':>9} {'GFLOP/s':>8} {'worst/best':>10}")
    for name, op, inputs, attrs, flops in CASES:
        if args.filter not in name:
            continue
        weights = (False,) + (True,) * (len(inputs) - 1)  # constants, packed once at load as a model's are
        times = [run_op(op, inputs, attrs, repeat=args.repeat, constant=weights)[1] for _ in range(args.runs)]
        best = min(times)
        flag = "  (noisy: > 2x)" if max(times) > 2 * best else ""
        print(f"{name:28} {best * 1e3:9.3f} {flops / best / 1e9:8.1f} {max(times) / best:10.2f}{flag}")


if __name__ == "__main__":
    main()
