"""`make bench-checked`: every light model, the transformer encoder, the zoo and the pytorch-converted models
of the onnx package compiled twice in one process, plain and with `--check-bounds --poison`, each run
against onnxruntime; prints whether each ran clean (no out-of-bounds access, results within tolerance
of onnxruntime, and the checked results identical to the plain ones) and what the checks cost: load
time (program build) and single-process run medians, interleaved.

    .venv/bin/python bench/checked.py [--models resnet50,squeezenet] [--repeat 10] [--json FILE]
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from common import ATOL, RTOL, ort_options  # noqa: E402

from bench import MODELS, TRANSFORMER, load_model, suite_models  # noqa: E402

NODE = Path(onnx.__file__).parent / "backend" / "test" / "data"
PYTORCH = sorted(p for p in (NODE / "pytorch-converted").glob("*") if (p / "model.onnx").exists())


def pytorch_model(name: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    from onnx import numpy_helper

    case = NODE / "pytorch-converted" / name
    model = onnx.load(str(case / "model.onnx"))
    files = sorted((case / "test_data_set_0").glob("input_*.pb"), key=lambda f: int(f.stem.split("_")[-1]))
    inits = {i.name for i in model.graph.initializer}
    names = [vi.name for vi in model.graph.input if vi.name not in inits]
    return model, {n: numpy_helper.to_array(onnx.load_tensor(str(f)))
                   for n, f in zip(names, files, strict=True)}


def compiled(model: onnx.ModelProto, feeds: dict[str, np.ndarray], checked: bool):  # noqa: ANN201
    """tessel.compile at -O2 on the default device, with the checks on or off (their environment
    switches, which the lowering and the runtime read)."""
    import tessel

    keys = ("TESSEL_CHECK_BOUNDS", "TESSEL_POISON")
    old = {k: os.environ.get(k) for k in keys}
    for k in keys:
        os.environ[k] = "1" if checked else "0"
    try:
        t0 = time.perf_counter()
        m = tessel.compile(model)
        m.run(None, feeds)  # the first run builds PoCL's kernels for their sizes
        return m, time.perf_counter() - t0
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def check_model(name: str, model: onnx.ModelProto, feeds: dict[str, np.ndarray], repeat: int) -> dict:
    import onnxruntime as ort

    row: dict = {"model": name}
    try:
        want = ort.InferenceSession(model.SerializeToString(), ort_options(),
                                    providers=["CPUExecutionProvider"]).run(None, feeds)
        plain, plain_s = compiled(model, feeds, False)
        checked, checked_s = compiled(model, feeds, True)
        got = plain.run(None, feeds)
        got_checked = checked.run(None, feeds)  # raises a KernelFault on an out-of-bounds access
    except Exception as e:  # noqa: BLE001 - a row per model, whatever went wrong
        row.update(clean=False, error=f"{type(e).__name__}: {str(e).splitlines()[0][:300]}")
        return row
    same = all(np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
               for a, b in zip(got, got_checked, strict=True))
    err = max(float(np.max(np.abs(np.asarray(g, np.float64) - np.asarray(w, np.float64))
                       / (np.abs(np.asarray(w, np.float64)) + 1e-3))) if np.asarray(w).size else 0.0
              for g, w in zip(got_checked, want, strict=True))
    times: dict[str, list[float]] = {"plain": [], "checked": []}
    for _ in range(repeat):  # interleaved: the machine's noise hits both alike
        for key, m in (("plain", plain), ("checked", checked)):
            t0 = time.perf_counter()
            m.run(None, feeds)
            times[key].append((time.perf_counter() - t0) * 1000)
    p, c = statistics.median(times["plain"]), statistics.median(times["checked"])
    close = all(np.allclose(g, w, rtol=RTOL, atol=ATOL) for g, w in zip(got_checked, want, strict=True))
    row.update(clean=same and close, same_as_plain=same, close_to_ort=close, max_rel_vs_ort=err,
               plain_ms=p, checked_ms=c, slowdown=c / p, plain_load_s=plain_s, checked_load_s=checked_s,
               load_ratio=checked_s / plain_s)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="", help="comma-separated names (default: light, zoo, pytorch)")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--json", default="", help="write the rows here")
    args = ap.parse_args()
    names = args.models.split(",") if args.models else [
        *MODELS, TRANSFORMER, *suite_models("zoo"), *(f"pytorch/{p.name}" for p in PYTORCH)]
    rows = []
    for name in names:
        try:
            pt = name.startswith("pytorch/")
            model, feeds = pytorch_model(name.split("/", 1)[1]) if pt else load_model(name)
        except Exception as e:  # noqa: BLE001 - a zoo model not built
            rows.append({"model": name, "clean": False, "error": f"cannot load: {e}"})
            print(f"{name}: cannot load ({e})", flush=True)
            continue
        row = check_model(name, model, feeds, args.repeat)
        rows.append(row)
        if "error" in row:
            print(f"{name}: NOT CLEAN: {row['error']}", flush=True)
        else:
            verdict = "clean" if row["clean"] else "NOT CLEAN"
            print(f"{name}: {verdict} (same as plain: {row['same_as_plain']}, "
                  f"within rtol {RTOL:g} atol {ATOL:g} of onnxruntime: {row['close_to_ort']}, "
                  f"max rel {row['max_rel_vs_ort']:.2g}); run {row['plain_ms']:.2f} -> "
                  f"{row['checked_ms']:.2f} ms ({row['slowdown']:.2f}x), load {row['plain_load_s']:.1f} -> "
                  f"{row['checked_load_s']:.1f} s", flush=True)
    ok = [r for r in rows if "slowdown" in r]
    if ok:
        geo = float(np.exp(np.mean([np.log(r["slowdown"]) for r in ok])))
        load = float(np.exp(np.mean([np.log(r["load_ratio"]) for r in ok])))
        print(f"{sum(r['clean'] for r in rows)} of {len(rows)} models clean; checked runs take {geo:.2f}x "
              f"the plain median (geomean), loads {load:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0 if all(r["clean"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
