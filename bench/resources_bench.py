"""Resources throughput and memory: parse and print a module with large weights.

    python bench/resources_bench.py [--mb 500]

Prints MB/s of weights for parse and print, and the peak resident memory of a child process that
parses and prints a module of --mb MB of weights, as a multiple of the weights' size (goal: <= ~3x).
Results go to bench/results/resources.json. A benchmark, never a test: timings on a shared machine vary.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np
from tessel.ir.attributes import ResourceAttr
from tessel.ir.core import Func, Module, Op
from tessel.ir.parser import parse_module
from tessel.ir.printer import print_module
from tessel.ir.types import TensorType


def make_module(path: str, mb: int) -> None:
    """A module with `mb` MB of f32 weights in 16 MB tensors, written straight to `path`."""
    rng = np.random.default_rng(0)
    m = Module(name="weights")
    f = Func.new("main", [], [], [])
    chunk = 4 << 20  # f32 elements per tensor (16 MB)
    n = max(1, mb // 16)
    outs = []
    for i in range(n):
        t = TensorType((chunk,), "f32")
        name = m.resources.add_array(f"w{i}", rng.standard_normal(chunk, dtype=np.float32))
        op = Op("const", [], [t], {"value": ResourceAttr(name, t)})
        f.block.append(op)
        outs.append(op.result)
    f.block.append(Op("return", outs))
    f.result_types = [v.type for v in outs]
    f.result_attrs = [{} for _ in outs]
    m.funcs.append(f)
    with open(path, "w") as out:
        print_module(m, out)


def child(path: str) -> None:
    """Parse and print `path` (to /dev/null); report timings and peak RSS as JSON on stdout."""
    t0 = time.perf_counter()
    with open(path, "rb") as fh:
        data = fh.read()
    m = parse_module(data, path)
    del data
    t1 = time.perf_counter()
    with open(os.devnull, "w") as out:
        print_module(m, out)
    t2 = time.perf_counter()
    weights = sum(r.nbytes for r in m.resources)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"weights_bytes": weights, "parse_s": t1 - t0, "print_s": t2 - t1, "peak_rss": rss}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=int, default=500)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child)
        return
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "weights.tsl")
        make_module(path, args.mb)
        r = json.loads(subprocess.run([sys.executable, __file__, "--child", path], check=True,
                                      capture_output=True, text=True).stdout)
    mb = r["weights_bytes"] / 1e6
    result = {
        "weights_mb": round(mb, 1),
        "parse_mb_per_s": round(mb / r["parse_s"], 1),
        "print_mb_per_s": round(mb / r["print_s"], 1),
        "peak_rss_mb": round(r["peak_rss"] / 1e6, 1),
        "peak_over_weights": round(r["peak_rss"] / r["weights_bytes"], 2),
    }
    print(f"resources: {result['weights_mb']} MB of weights | parse {result['parse_mb_per_s']} MB/s | "
          f"print {result['print_mb_per_s']} MB/s | peak RSS {result['peak_rss_mb']} MB "
          f"({result['peak_over_weights']}x the weights)")
    os.makedirs(os.path.join(os.path.dirname(__file__), "results"), exist_ok=True)
    with open(os.path.join(os.path.dirname(__file__), "results", "resources.json"), "w") as f:
        json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
