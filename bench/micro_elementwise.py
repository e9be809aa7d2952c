"""Elementwise kernel bandwidth: the 64 MiB f32 add (16M elements, two inputs, one output).

    python bench/micro_elementwise.py [--mib 64] [--runs 5] [--repeat 10] [--op add] [--vector N] [--local N]

Prints GB/s counted as 3 x the tensor's bytes moved per launch, best of `runs` medians of `repeat` timed
launches (design target: >= 25 GB/s from DRAM on the 2-core EPYC, PoCL ~33). A benchmark, never a test:
the machine is shared, so take the best and flag a 2x spread.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("POCL_AFFINITY", "1")  # before pyopencl is imported (DESIGN.md §5)

import numpy as np  # noqa: E402
from tessel.targets.opencl.kernels.testing import run_op  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=64, help="size of each tensor")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--op", default="add", help="a binary elementwise op on f32")
    ap.add_argument("--vector", type=int, default=None, help="schedule override: vector width")
    ap.add_argument("--local", type=int, default=None, help="schedule override: work-group size")
    args = ap.parse_args()
    n = args.mib * 2**20 // 4
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(n, dtype=np.float32) for _ in range(2))
    schedule = {k: v for k, v in (("vector", args.vector), ("local", args.local)) if v is not None}
    moved = 3 * a.nbytes
    rates = []
    for _ in range(args.runs):
        (out,), seconds = run_op(args.op, [a, b], schedule=schedule, repeat=args.repeat)
        rates.append(moved / seconds / 1e9)
    if args.op == "add":
        np.testing.assert_array_equal(out, a + b)
    flag = "  (2x spread: the machine was busy)" if max(rates) > 2 * min(rates) else ""
    print(f"{args.op} f32 {args.mib} MiB x2 -> {args.mib} MiB: best {max(rates):.1f} GB/s, "
          f"runs {', '.join(f'{r:.1f}' for r in rates)}{flag}")


if __name__ == "__main__":
    main()
