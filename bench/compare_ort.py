"""Where tessel loses to onnxruntime, kernel by kernel: both profiled on one model in one process.

    .venv/bin/python bench/compare_ort.py mobilenet_v2            # a zoo model (bench/zoo)
    .venv/bin/python bench/compare_ort.py path/to/model.onnx -O3 --top 15

tessel runs the model as `make bench` does (-O2, lowered for the device, `auto` execution settled) with
profiling: each kernel's time, by OpenCL events or, under cooperative execution, its span inside the
persistent kernels. onnxruntime (2 threads, its default optimizations) runs with its profiler on: each
node's kernel time. A tessel kernel is matched to the onnxruntime nodes of the ONNX nodes it came from
(onnxruntime keeps a fused node under the name of the node it fused into). Rows are sorted by what tessel
spends beyond onnxruntime; the medians of 20 runs after warm-up. Seeded random weights for the light
models' constant fills are not made here: use a zoo model or a model with real weights.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import onnx
from common import optimize, ort_options, profiled_twin

ZOO = Path(__file__).resolve().parent / "zoo"


def load(spec: str) -> tuple[bytes, dict[str, np.ndarray], str]:
    if spec.endswith(".onnx"):
        model = onnx.load(spec)
        rng = np.random.default_rng(0)
        feeds = {}
        for i in model.graph.input:
            if any(i.name == t.name for t in model.graph.initializer):
                continue
            shape = [d.dim_value or 1 for d in i.type.tensor_type.shape.dim]
            dtype = onnx.helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type)
            feeds[i.name] = rng.standard_normal(shape).astype(dtype)
        return model.SerializeToString(), feeds, Path(spec).stem
    sys.path.insert(0, str(ZOO))
    import zoo

    path, feeds = zoo.load(spec)
    return path.read_bytes(), feeds, spec


def ort_node_us(data: bytes, feeds: dict[str, np.ndarray], runs: int) -> tuple[dict[str, float], float]:
    """Median kernel time per onnxruntime node (µs) and the median run (ms)."""
    import time

    import onnxruntime as ort

    sess = ort.InferenceSession(data, ort_options(enable_profiling=True), providers=["CPUExecutionProvider"])
    for _ in range(5):
        sess.run(None, feeds)
    walls = []
    for _ in range(runs):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        walls.append(time.perf_counter() - t0)
    path = sess.end_profiling()
    events = json.loads(Path(path).read_text())
    os.unlink(path)
    per: dict[str, list[float]] = defaultdict(list)
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            per[e["name"].removesuffix("_kernel_time")].append(float(e["dur"]))
    # the warm-up runs are in the profile too: keep each node's last `runs` times
    return {k: statistics.median(v[-runs:]) for k, v in per.items()}, statistics.median(walls) * 1e3


def tessel_rows(data: bytes, feeds: dict[str, np.ndarray], name: str, level: int, runs: int):  # noqa: ANN201
    from tessel.targets.numpy.interpreter import input_names
    from tessel.targets.opencl import device as dev
    from tessel.targets.opencl.lower import lower_module
    from tessel.targets.opencl.profile import kernel_rows
    from tessel.targets.opencl.runtime import Executable

    module = optimize(data, name, level)
    func = module.func("main") or module.funcs[0]
    device = dev.pick_device()
    lower_module(module, dev.device_info(device))
    arrays = [feeds[n] for n in input_names(func)]
    exe = Executable(module, func, device)
    exe.run(arrays)
    exe.settle(arrays)
    prof = profiled_twin(exe)
    _, stats = prof.measure(arrays, runs)
    return kernel_rows(prof, stats), statistics.median(stats.seconds) * 1e3, exe.running_on


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="a zoo model's name, or an .onnx file")
    ap.add_argument("-O", dest="level", type=int, default=2, choices=range(4))
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--top", type=int, default=20, help="rows to print")
    args = ap.parse_args()
    data, feeds, name = load(args.model)
    ort_us, ort_ms = ort_node_us(data, feeds, args.runs)
    rows, tessel_ms, execution = tessel_rows(data, feeds, name, args.level, args.runs)
    # onnxruntime renames what it rewrites: a fused or NCHWc node keeps a node's or an output's name,
    # with a suffix; match both
    graph = onnx.load_from_string(data).graph
    names: dict[str, str] = {}
    for node in graph.node:
        for key in (node.name, *node.output):
            names.setdefault(key, node.name)
    theirs_by_node: dict[str, list[str]] = defaultdict(list)
    for key in ort_us:
        base = key.split("/")[0]  # node_silu_3/QuickGeluFusion/
        for suffix in ("_nchwc", "_token"):
            base = base.split(suffix)[0] if suffix in base and base.split(suffix)[0] in names else base
        if base in names:
            theirs_by_node[names[base]].append(key)
    out = []
    seen: set[str] = set()
    for r in rows:
        nodes = [k for n in r.locs for k in theirs_by_node.get(n, []) if k not in seen]
        seen.update(nodes)
        theirs = sum(ort_us[n] for n in nodes) / 1e3
        out.append((r.ms - theirs, r, theirs, nodes))
    out.sort(key=lambda t: -t[0])
    print(f"{name}: tessel {tessel_ms:.3f} ms ({execution}), onnxruntime {ort_ms:.3f} ms; kernel sums "
          f"{sum(r.ms for r in rows):.3f} vs {sum(ort_us.values()) / 1e3:.3f} ms")
    print(f"{'tessel kernel':34s} {'tessel ms':>9s} {'ort ms':>8s} {'diff':>8s}  onnx nodes")
    left = sorted(((ort_us[k] / 1e3, k) for k in ort_us if k not in seen), reverse=True)
    print(f"onnxruntime nodes matching no tessel kernel: {sum(t for t, _ in left):.3f} ms ("
          + ", ".join(f"{k} {t:.3f}" for t, k in left[:4]) + (", ..." if len(left) > 4 else "") + ")")
    for diff, r, theirs, nodes in out[: args.top]:
        locs = ", ".join(r.locs[:3]) + (f" (+{len(r.locs) - 3})" if len(r.locs) > 3 else "")
        print(f"{r.name[:34]:34s} {r.ms:9.3f} {theirs:8.3f} {diff:+8.3f}  {locs}"
              + ("" if nodes else "  [no onnxruntime node of that name]"))


if __name__ == "__main__":
    main()
