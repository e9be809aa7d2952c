"""Kernel counts and the traffic ledger per light model, before and after -O2, against onnxruntime's
optimized graph (ORT_ENABLE_ALL, the node count of the graph it would run).

    .venv/bin/python bench/graph_stats.py [--models resnet50,squeezenet]

No model is run: it imports each seeded random-weight copy, counts kernels (passes/analysis.py: top-level
ops that run on the device) and sums the bytes they read and write at -O0 and after -O2, and asks
onnxruntime to write its optimized graph to count its nodes.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import onnx
from common import ort_options

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
MODELS = ("bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet",
          "squeezenet", "vgg19", "zfnet512")


def ort_nodes(data: bytes) -> int:
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as d:
        opts = ort_options(graph_optimization_level=ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
                           optimized_model_filepath=os.path.join(d, "opt.onnx"))
        ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
        return len(onnx.load(opts.optimized_model_filepath).graph.node)


def main() -> int:
    from tessel.frontends.onnx.importer import import_model
    from tessel.frontends.onnx.randomize import randomize_weights
    from tessel.passes.analysis import kernel_count, total_traffic
    from tessel.passes.manager import PassManager
    from tessel.passes.pipeline import O_LEVELS, parse_pipeline

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS))
    args = ap.parse_args()
    print(f"{'model':<14} {'ORT nodes':>9} {'-O0 kernels':>11} {'-O2 kernels':>11} {'-O0 MB moved':>12} "
          f"{'-O2 MB moved':>12} {'saved':>6} {'-O2 s':>6}")
    for name in args.models.split(","):
        data = randomize_weights(onnx.load(str(LIGHT / f"light_{name}.onnx")), seed=0).SerializeToString()
        module = import_model(data, f"{name}.onnx")
        k0, t0 = kernel_count(module), total_traffic(module)
        start = time.perf_counter()
        PassManager(parse_pipeline(O_LEVELS[2])).run(module)
        secs = time.perf_counter() - start
        k2, t2 = kernel_count(module), total_traffic(module)
        print(f"{name:<14} {ort_nodes(data):>9} {k0:>11} {k2:>11} {t0 / 1e6:>12.1f} {t2 / 1e6:>12.1f} "
              f"{100 * (t0 - t2) / t0:>5.1f}% {secs:>6.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
