"""Cold and warm first runs: how long a user waits from `tessel.compile` to the first result.

    python bench/cold.py [--suite light,zoo,wild] [--models a,b] [--json FILE]

Each model runs in two fresh child processes sharing one new cache folder (TESSEL_CACHE_DIR and
POCL_CACHE_DIR point into it): the first finds the caches empty (cold), the second finds them filled by
the first (warm). Each times the phases a user's first call goes through: calibrate (the device's peaks,
measured inside the first compile that needs them on a machine: only a cold run of a model whose lowering
chooses by them pays it), then `tessel.compile`'s phases: cache
(reading the module from the compiled-module cache: warm runs), or import, opt, codegen (lowering to the
OpenCL module) and store (keeping it in that cache: cold runs); build (the programs built or loaded from
the cache, with their count and source size),
load (the rest of making the executable: weights, buffers, kernels) and the first `run` (on PoCL: each
kernel compiled at its first launch), then the worst and the median of the next 50 calls and the
programs built during them (`auto`'s other ways; it builds none that would not pay). Issue 38's goals:
cold <= 5 s, warm <= 1.5 s, no call over 3x the median. A benchmark, never a test."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


WILD = HERE / "wild"


def wild_models() -> list[str]:
    """The wild suite's models that bench/wild/fetch.py and reference.py have fetched and run."""
    sys.path.insert(0, str(WILD))
    from models import MODELS

    return [m.id for m in MODELS if (WILD / "models" / f"{m.id}.A.npz").exists()]


def load(name: str) -> tuple[bytes, dict]:
    """A model's ONNX bytes and inputs: a light or zoo model (bench.py), or a wild one at its size A
    (the inputs reference.py saved)."""
    import numpy as np

    import bench

    path = WILD / "models" / f"{name}.onnx"
    if path.exists():
        import onnx

        model = onnx.load(str(path))
        names = [i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
        data = np.load(WILD / "models" / f"{name}.A.npz")
        arrays = [data[k] for k in sorted(data.files) if k.startswith("in_")]
        return path.read_bytes(), dict(zip(names, arrays, strict=True))
    model, feeds = bench.load_model(name)
    return model.SerializeToString(), feeds


def child(name: str, repeat: int) -> dict:
    """Run in the child process: the phases of one model's first run, in seconds."""
    import tessel
    from tessel.targets.opencl import profile, runtime

    data, feeds = load(name)
    # a model file, as users compile one: the wild suite's own, the others written once into the folder
    # the two runs share (the warm run finds the file it compiled, by its path and stat)
    path = WILD / "models" / f"{name}.onnx"
    if not path.exists():
        path = Path(os.environ["TESSEL_CACHE_DIR"]).parent / f"{name}.onnx"
        if not path.exists():
            path.write_bytes(data)
    t = {}
    # the device's calibration happens inside the compile that first needs its peaks (once a machine;
    # a model whose lowering makes no choice by them never waits for it): timed apart, out of codegen
    measured = profile.calibrate
    spent = [0.0]
    own: list[dict] = []  # the calibration's own programs, out of the build column

    def timed(device: object, *args: object, **kwargs: object) -> object:
        t0 = time.perf_counter()
        mark = runtime.BUILD_LOG.mark()
        try:
            return measured(device, *args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - t0
            own.append(runtime.BUILD_LOG.summary(mark))

    profile.calibrate = timed
    mark = runtime.BUILD_LOG.mark()
    t0 = time.perf_counter()
    compiled = tessel.compile(path)  # as a user calls it: the compiled-module cache holds it when warm
    total = time.perf_counter() - t0
    t["calibrate"] = spent[0]
    for phase in ("cache", "import", "opt", "codegen", "store"):
        t[phase] = compiled.phases.get(phase, 0.0)
    t["codegen"] = max(0.0, t["codegen"] - spent[0])
    t["build"] = runtime.BUILD_LOG.summary(mark)["seconds"] - sum(s["seconds"] for s in own)
    t["load"] = max(0.0, total - sum(t[p] for p in ("calibrate", "cache", "import", "opt", "codegen", "store",
                                                    "build")))
    t0 = time.perf_counter()
    compiled.run(None, feeds)  # a model with dynamic dims is lowered and built for its size here
    t["first run"] = time.perf_counter() - t0
    t["total"] = sum(t.values())
    raw = runtime.BUILD_LOG.summary(mark)
    report = {key: raw[key] - sum(s[key] for s in own) for key in raw}
    calls = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        compiled.run(None, feeds)
        calls.append(time.perf_counter() - t0)
    later = runtime.BUILD_LOG.summary(mark)
    return {"phases": t, "programs": report["programs"], "source_kb": report["source_bytes"] / 1024,
            "misses": report["misses"], "later_builds": later["programs"] - raw["programs"],
            "later_build_s": later["seconds"] - raw["seconds"],
            "median_ms": statistics.median(calls) * 1000, "worst_ms": max(calls) * 1000}


def measure(name: str, repeat: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="tessel-cold-") as folder:
        env = dict(os.environ, TESSEL_CACHE_DIR=os.path.join(folder, "tessel"),
                   POCL_CACHE_DIR=os.path.join(folder, "pocl"))
        env.pop("POCL_AFFINITY", None)
        out = {}
        for kind in ("cold", "warm"):
            proc = subprocess.run([sys.executable, __file__, "--child", name, "--repeat", str(repeat)],
                                  env=env, capture_output=True, text=True)
            if proc.returncode:
                raise SystemExit(f"{name} ({kind}): {proc.stderr.strip()[-2000:]}")
            out[kind] = json.loads(proc.stdout.strip().splitlines()[-1])
        return out


PHASES = ("calibrate", "cache", "import", "opt", "codegen", "store", "build", "load", "first run", "total")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", default="light,zoo")
    ap.add_argument("--models", default="", help="comma-separated names (default: the suites' models)")
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--json", default="")
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.repeat)))
        return 0
    from common import cpu_model

    import bench

    names = [m for m in args.models.split(",") if m] or [
        n for s in args.suite.split(",") for n in (wild_models() if s == "wild" else bench.suite_models(s))]
    print(f"CPU: {cpu_model()}; seconds; cold = empty caches, warm = the cold run's caches")
    head = f"{'model':<18} {'kind':<5}" + "".join(f"{p:>10}" for p in PHASES) + \
        f"{'programs':>9}{'src KB':>8}{'median ms':>10}{'worst ms':>9}{'later builds':>13}"
    print(head)
    rows = {}
    for name in names:
        rows[name] = measure(name, args.repeat)
        for kind, r in rows[name].items():
            print(f"{name:<18} {kind:<5}" + "".join(f"{r['phases'][p]:>10.2f}" for p in PHASES)
                  + f"{r['programs']:>9}{r['source_kb']:>8.0f}{r['median_ms']:>10.2f}{r['worst_ms']:>9.2f}"
                  + f"{r['later_builds']:>6} {r['later_build_s']:>5.2f}s", flush=True)
    worst = {k: max(r[k]["phases"]["total"] for r in rows.values()) for k in ("cold", "warm")}
    ratio = max(r["warm"]["worst_ms"] / r["warm"]["median_ms"] for r in rows.values())
    print(f"worst total: cold {worst['cold']:.2f} s, warm {worst['warm']:.2f} s; worst call {ratio:.2f}x "
          "its median (warm)")
    if args.json:
        Path(args.json).write_text(json.dumps({"cpu": cpu_model(), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
