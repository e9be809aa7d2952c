"""Quantized copies of the wild suite (`make bench-wild-quant`): each model quantized the usual ways by
onnxruntime's quantization tool, compiled by tessel and compared with onnxruntime running the same
quantized model.

    .venv/bin/python bench/wild/quantized.py [--models a,b] [--how qdq,qoperator,dynamic] [--json F]

For each model with float32 inputs only, at its size A (the dynamic dims fixed to it): `qdq` and
`qoperator` are quant_pre_process then quantize_static (per channel, uint8 activations, int8 weights)
calibrated on the size-A input and seven noisy copies of it; `dynamic` is quantize_dynamic (int8
weights). tessel compiles the quantized model (`tessel.compile`, -O2, OpenCL) and runs it on the size-A
input; the table gives, per output, the largest |tessel - onnxruntime| over the output's range, the share
of equal elements, and the same for onnxruntime's own run with its graph optimizations off (the QDQ
float semantics) against its optimized run: a deep int8 model can differ from itself that much. A model
that onnxruntime's tool cannot quantize is reported as such. JSON in bench/results/wild-quant-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from common import cpu_model, write_atomic  # noqa: E402
from models import WildModel, select  # noqa: E402
from run import first_line  # noqa: E402

RESULTS = HERE.parent / "results"
HOWS = ("qdq", "qoperator", "dynamic")


def fixed(model: Any, feeds: dict[str, np.ndarray]) -> Any:
    """`model` with its inputs' dims set to the feeds' shapes, at opset 13 or later (per-channel
    DequantizeLinear needs its axis)."""
    import onnx

    for i in model.graph.input:
        if i.name in feeds:
            for dim, n in zip(i.type.tensor_type.shape.dim, feeds[i.name].shape, strict=True):
                dim.ClearField("dim_param")
                dim.dim_value = n
    if next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1) < 13:
        from onnx import version_converter

        model = version_converter.convert_version(model, 13)
        model.ir_version = max(model.ir_version, 7)
    return onnx.shape_inference.infer_shapes(model)


def quantized(model: Any, how: str, feeds: dict[str, np.ndarray], tmp: Path) -> Any:
    """`model` through onnxruntime's quantization tool, calibrated on `feeds` and noisy copies of them."""
    import onnx
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    src, dst = tmp / f"{how}.f32.onnx", tmp / f"{how}.int8.onnx"
    onnx.save(model, src)
    if how == "dynamic":
        quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8)
        return onnx.load(dst)
    pre = tmp / f"{how}.pre.onnx"
    quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)
    rng = np.random.default_rng(0)
    batches = [feeds] + [{k: (v + rng.normal(0, 0.05 * (float(v.std()) or 1.0), v.shape)).astype(v.dtype)
                          for k, v in feeds.items()} for _ in range(7)]

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.data = iter(batches)

        def get_next(self) -> dict | None:
            return next(self.data, None)

    fmt = QuantFormat.QDQ if how == "qdq" else QuantFormat.QOperator
    quantize_static(str(pre), str(dst), Reader(), quant_format=fmt, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    return onnx.load(dst)


def difference(got: list[Any], want: list[Any]) -> tuple[float, float]:
    """(largest |got - want| over the output's range, share of equal elements), the worst output."""
    worst, equal = 0.0, 1.0
    for g, w in zip(got, want, strict=True):
        g, w = np.asarray(g).astype(np.float64), np.asarray(w).astype(np.float64)
        span = float(w.max() - w.min()) if w.size else 0.0
        worst = max(worst, float(np.abs(g - w).max(initial=0.0)) / (span or 1.0))
        equal = min(equal, float(np.mean(g == w)) if w.size else 1.0)
    return worst, equal


def one(model: WildModel, path: Path, how: str) -> dict[str, Any]:
    import onnx
    import onnxruntime as ort
    import tessel

    ref = np.load(path.with_name(f"{model.id}.A.npz"))
    m = onnx.load(path)
    inits = {i.name for i in m.graph.initializer}
    names = [i.name for i in m.graph.input if i.name not in inits]
    feeds = {n: ref[f"in_{k}"] for k, n in enumerate(names)}
    if any(v.dtype != np.float32 for v in feeds.values()):
        return {"how": how, "skipped": "an input is not float32"}
    rec: dict[str, Any] = {"how": how}
    with tempfile.TemporaryDirectory() as tmp:
        try:
            q = quantized(fixed(m, feeds), how, feeds, Path(tmp))
        except Exception as e:  # noqa: BLE001 - the tool's own failure, reported as such
            return {"how": how, "skipped": f"onnxruntime's tool: {first_line(e)}"}
    rec["ops"] = sorted({n.op_type for n in q.graph.node if n.domain == "com.microsoft"
                         or "Quant" in n.op_type or "Integer" in n.op_type})
    want = ort.InferenceSession(q.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    plain = ort.InferenceSession(q.SerializeToString(), so,
                                 providers=["CPUExecutionProvider"]).run(None, feeds)
    rec["ort_self"], rec["ort_self_equal"] = difference(plain, want)
    t0 = time.time()
    try:
        compiled = tessel.compile(q)
        got = compiled.run(None, feeds)
    except Exception as e:  # noqa: BLE001 - a model tessel cannot compile or run: recorded
        rec["error"] = first_line(e)
        return rec
    rec["seconds"] = round(time.time() - t0, 1)
    rec["diff"], rec["equal"] = difference(got, want)
    return rec


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", help="comma-separated ids (default: all)")
    parser.add_argument("--how", default=",".join(HOWS), help=f"comma-separated, of {', '.join(HOWS)}")
    parser.add_argument("--json", help="where to write the results (default "
                                       "bench/results/wild-quant-<time>.json)")
    args = parser.parse_args(argv)
    hows = [h for h in args.how.split(",") if h]
    bad = [h for h in hows if h not in HOWS]
    if bad:
        parser.error(f"--how takes {', '.join(HOWS)}, got {', '.join(bad)}")

    import onnxruntime as ort
    from fetch import fetch_one
    from reference import build

    records = []
    for model in select(args.models):
        try:
            path = fetch_one(model)
            build(model)
        except Exception as e:  # noqa: BLE001 - a model we could not even prepare
            records.append({"id": model.id, "error": f"not prepared: {first_line(e)}", "runs": []})
            continue
        runs = []
        for how in hows:
            print(f"{model.id} {how} ...", file=sys.stderr, flush=True)
            runs.append(one(model, path, how))
        records.append({"id": model.id, "family": model.family, "runs": runs})

    print(f"{'model':18s} {'how':10s} {'tessel vs ort':>14s} {'equal':>7s} {'ort unfused vs ort':>19s}  note")
    for rec in records:
        for r in rec.get("runs", []):
            if "diff" in r:
                print(f"{rec['id']:18s} {r['how']:10s} {r['diff']:14.4f} {r['equal']:7.3f} "
                      f"{r['ort_self']:19.4f}  {', '.join(r['ops'])[:60]}")
            else:
                print(f"{rec['id']:18s} {r['how']:10s} {'-':>14s} {'-':>7s} {'-':>19s}  "
                      f"{r.get('skipped') or r.get('error')}")
        if "error" in rec:
            print(f"{rec['id']:18s} {rec['error']}")

    result = {"suite": "wild-quant", "time": time.strftime("%Y-%m-%d %H:%M:%S"), "cpu": cpu_model(),
              "cores": os.cpu_count(), "python": platform.python_version(), "onnxruntime": ort.__version__,
              "models": records}
    out = Path(args.json) if args.json else RESULTS / f"wild-quant-{time.strftime('%Y%m%d-%H%M%S')}.json"
    write_atomic(out, json.dumps(result, indent=1).encode())
    print(f"\nJSON: {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
