"""tessel-tune on the light models and the zoo: tuned against untuned, in one process a model.

    .venv/bin/python bench/tune_bench.py [--suite light|zoo|all] [--models a,b] [--budget 60] [--json F]
                                         [--warm] [--device SPEC | --intel-opencl] [--device-info K=V,..]

For each model (a subprocess each): import and -O2 as bench.py does, tune for --budget seconds with the
records starting empty (bench/results/tuning/<model>.jsonl, rewritten), then lower the module twice, with
and without the records, load both (`auto` execution, settled), and time them in interleaved rounds with
onnxruntime in the same process: the figure is the tuned single-process median over the untuned one, with
the best rounds beside it. Prints a table (budget used, kernels tuned and improved, points measured and
left out by the cost model, speed-up) and writes JSON to bench/results/tune-<time>.json (or --json).
`--warm` builds and settles the untuned model before the tuning starts (as after a user's first runs;
without it, a model whose programs were never built spends the budget building them); `--device` picks
the OpenCL device as tessel-run's does; `--device-info key=value,...` lowers for other DeviceInfo fields
than the device's (tuning from another device's defaults, e.g. an AVX2 register model on an AVX-512
CPU); `--intel-opencl` tunes on Intel's CPU OpenCL runtime (bench/intel_opencl.py: an optional extra, a
second implementation the defaults were never fitted to).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench import RESULTS, suite_models  # noqa: E402


def as_info(info: Any, overrides: str) -> Any:
    """`info` with --device-info's `key=value,...` fields replaced (integers), e.g. the register model of
    an AVX2 CPU on an AVX-512 one: 'vector_width=8,vector_registers=16'."""
    from dataclasses import fields, replace

    names = {f.name for f in fields(info)}
    changes = {}
    for item in filter(None, overrides.split(",")):
        key, _, value = item.partition("=")
        if key not in names or not value.lstrip("-").isdigit():
            raise SystemExit(f"--device-info: '{item}' is not <DeviceInfo field>=<integer> "
                             f"({', '.join(sorted(names))})")
        changes[key] = int(value)
    return replace(info, **changes) if changes else info


def one(name: str, args: argparse.Namespace) -> dict:
    import numpy as np
    import onnxruntime as ort
    from common import optimize, ort_options
    from tessel.ir.parser import parse_module
    from tessel.ir.printer import to_text
    from tessel.targets.numpy.interpreter import input_names
    from tessel.targets.opencl import device as dev
    from tessel.targets.opencl.lower import lower_module
    from tessel.targets.opencl.records import Tuning, write_records
    from tessel.targets.opencl.runtime import Executable
    from tessel.targets.opencl.tuning.tuner import tune

    from bench import load_model

    model, feeds = load_model(name)
    data = model.SerializeToString()
    text = to_text(optimize(data, name, 2))
    device = dev.pick_device(args.device or None)
    info = as_info(dev.device_info(device), args.device_info)
    words = "".join(c if c.isalnum() else " " for c in f"{args.device} {args.device_info}".lower())
    tag = "-".join(words.split())
    out = RESULTS / "tuning" / (f"{name}.{tag}.jsonl" if tag else f"{name}.jsonl")
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.warm:  # the untuned program built and settled first, as for a user who has run the model
        from tessel.targets.opencl.tuning.tuner import baseline

        baseline(text, device, info, info.fingerprint, {})
    t0 = time.perf_counter()
    records, report = tune(text, device, args.budget, [], {}, lambda rs: write_records(str(out), rs),
                           info=info)
    tune_s = time.perf_counter() - t0
    write_records(str(out), records)
    exes = []
    for group in ([], records):
        module = lower_module(parse_module(text, name), info, None, {}, Tuning(group, info.fingerprint))
        func = module.func("main") or module.funcs[0]
        arrays = [feeds[n] for n in input_names(func)]
        exe = Executable(module, func, device)
        got = exe.run(arrays)
        exes.append((exe, arrays, got))
    sess = ort.InferenceSession(data, ort_options(), providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)
    correct = all(np.allclose(g, w, rtol=1e-3, atol=1e-4) for g, w in zip(exes[1][2], want, strict=True))
    for exe, arrays, _ in exes:
        exe.settle(arrays)
    runs: list[list[float]] = [[], [], []]
    rounds: list[list[float]] = [[], [], []]
    fns = [lambda e=e, a=a: e.run(a) for e, a, _ in exes] + [lambda: sess.run(None, feeds)]
    for r in range(args.rounds):
        for k in range(3):
            i = (k + r) % 3
            time.sleep(0.2)
            fns[i]()
            ts = []
            for _ in range(args.repeat):
                t1 = time.perf_counter()
                fns[i]()
                ts.append((time.perf_counter() - t1) * 1e3)
            runs[i] += ts
            rounds[i].append(statistics.median(ts))
    med = [statistics.median(x) for x in runs]
    # the kernels alone: each program profiled on the pool (no dispatch, no way of running), so the
    # schedules' effect shows apart from the execution record's and the ways' noise
    profs = [(Executable(e.module, e.func, device, profile=True, execution="pool"), a) for e, a, _ in exes]
    sums: list[list[float]] = [[], []]
    for r in range(12):  # interleaved rounds, the faster of two runs each (as the tuner compares)
        for k in range(2):
            i = (k + r) % 2
            prof, arrays = profs[i]
            best = math.inf
            for _ in range(2):
                _, events = prof.enqueue(arrays)
                best = min(best, sum(e.profile.end - e.profile.start for e in events) / 1e3)
            sums[i].append(best)
    kernel_us = [statistics.median(x) for x in sums]
    del profs
    best = [min(x) for x in rounds]
    return {"model": name, "device": dev.describe(device), "device_info": args.device_info,
            "budget_s": args.budget, "warm": args.warm, "tune_s": round(tune_s, 1), "kernels": report.kernels,
            "tunable": report.tunable, "tuned": report.tuned, "improved": report.improved,
            "measured": report.measured, "space_points": report.space_points, "saved": report.saved,
            "confirm": report.confirm, "confirm_speedup": round(report.speedup, 3),
            "execution": report.execution, "untuned_ms": round(med[0], 4), "tuned_ms": round(med[1], 4),
            "ort_ms": round(med[2], 4), "ratio": round(med[1] / med[0], 3),
            "best_ratio": round(best[1] / best[0], 3),
            "kernel_untuned_us": round(kernel_us[0], 1), "kernel_tuned_us": round(kernel_us[1], 1),
            "kernel_ratio": round(kernel_us[1] / kernel_us[0], 3),
            "tuned_vs_ort": round(med[1] / med[2], 3), "untuned_vs_ort": round(med[0] / med[2], 3),
            "correct": bool(correct), "untuned_way": exes[0][0].running_on,
            "tuned_way": exes[1][0].running_on,
            "rows": report.rows}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suite", choices=("light", "zoo", "all"), default="all")
    ap.add_argument("--models", default="")
    ap.add_argument("--budget", type=float, default=60.0)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--json", default="")
    ap.add_argument("--device", default="", help="OpenCL device spec (tessel-run --list-devices)")
    ap.add_argument("--device-info", default="",
                    help="lower for these DeviceInfo fields instead of the device's (key=value,...): "
                         "tuning from another device's defaults")
    ap.add_argument("--warm", action="store_true",
                    help="build and settle the untuned model before tuning (its programs in the caches, "
                         "as after a user's first runs): the budget then goes to tuning, not to cold builds")
    ap.add_argument("--intel-opencl", action="store_true",
                    help="tune on Intel's CPU OpenCL runtime (pip install -e '.[intel-opencl]')")
    ap.add_argument("--one", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.intel_opencl:
        from intel_opencl import register

        args.device = register()
    if args.one:
        print(json.dumps(one(args.one, args)))
        return 0
    names = args.models.split(",") if args.models else (
        suite_models("light") + suite_models("zoo") if args.suite == "all" else suite_models(args.suite))
    rows = []
    for name in names:
        cmd = [sys.executable, __file__, "--one", name, "--budget", str(args.budget), "--rounds",
               str(args.rounds), "--repeat", str(args.repeat), "--device", args.device,
               "--device-info", args.device_info] + (["--warm"] if args.warm else [])
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode:
            print(f"{name}: failed\n{p.stderr[-2000:]}", file=sys.stderr)
            continue
        row = json.loads(p.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(f"{name:20s} tuned/untuned {row['ratio']:.3f} (best {row['best_ratio']:.3f}, kernels "
              f"{row['kernel_ratio']:.3f}, {row['untuned_way']} -> {row['tuned_way']})  "
              f"{row['tuned']}/{row['tunable']} tuned, {row['improved']} improved, {row['measured']} of "
              f"{row['space_points']} points, {row['tune_s']:.0f} s; vs ort {row['untuned_vs_ort']:.2f} -> "
              f"{row['tuned_vs_ort']:.2f} {'' if row['correct'] else 'WRONG'}", flush=True)
    if rows:
        geo = math.exp(statistics.mean(math.log(r["ratio"]) for r in rows))
        geo_best = math.exp(statistics.mean(math.log(r["best_ratio"]) for r in rows))
        geo_kernel = math.exp(statistics.mean(math.log(r["kernel_ratio"]) for r in rows))
        print(f"geomean tuned/untuned {geo:.3f} (best rounds {geo_best:.3f}, kernel time {geo_kernel:.3f}) "
              f"over {len(rows)} models; {sum(r['measured'] for r in rows)} points measured of "
              f"{sum(r['space_points'] for r in rows)} in the tuned kernels' spaces")
        path = Path(args.json) if args.json else RESULTS / f"tune-{time.strftime('%Y%m%d-%H%M%S')}.json"
        from common import cpu_model

        path.write_text(json.dumps({"cpu": cpu_model(), "device": rows[0]["device"],
                                    "device_info": args.device_info, "budget_s": args.budget, "geomean": geo,
                                    "geomean_best": geo_best, "geomean_kernel": geo_kernel, "rows": rows},
                                   indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
