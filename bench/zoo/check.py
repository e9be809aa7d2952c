"""Check tessel on the model zoo: import, -O2 and -O3, lower for OpenCL, run, compare with onnxruntime.

    .venv/bin/python bench/zoo/build.py && .venv/bin/python bench/zoo/check.py
    .venv/bin/python bench/zoo/check.py --only bert,gpt2 --levels 2 --dir /tmp/zoo

Prints one line per model and level: ok or FAIL with the max abs error (rtol 1e-3, atol 1e-4, as
bench.py), or ERROR with the stage (import, opt, lower, run) and the first line of the message; and once
per model onnxruntime's time on 2 threads (best of 3 rounds' medians). Exit status 1 if any line is not
ok. Needs no torch.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "2")

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import zoo  # noqa: E402
from common import ATOL, RTOL, ort_options  # noqa: E402


def ort_session(data: bytes):  # noqa: ANN201
    import onnxruntime as ort

    return ort.InferenceSession(data, ort_options(), providers=["CPUExecutionProvider"])


def median_ms(fn, rounds: int = 3, budget_s: float = 0.5, most: int = 30) -> float:  # noqa: ANN001
    """The best of `rounds` medians (as bench.py: this VM's speed drifts with other load); each round runs
    at least 3 and at most `most` times, stopping after `budget_s`."""
    fn()  # warm-up
    best = float("inf")
    for _ in range(rounds):
        times: list[float] = []
        start = time.perf_counter()
        while len(times) < most and (len(times) < 3 or time.perf_counter() - start < budget_s):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        best = min(best, statistics.median(times) * 1000)
    return best


def first_line(e: BaseException) -> str:
    """The message's first line, and for a tessel diagnostic its first note (the ONNX node or the pass)."""
    from tessel.ir.diagnostics import DiagnosticError

    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    if isinstance(e, DiagnosticError) and e.diagnostics and e.diagnostics[0].notes:
        text += f" (note: {e.diagnostics[0].notes[0].message.strip().splitlines()[0]})"
    return f"{type(e).__name__}: {text}"[:400]


def run_tessel(data: bytes, filename: str, level: int, feeds: dict[str, np.ndarray], device) -> list:  # noqa: ANN001
    """tessel's outputs, or raises RuntimeError('<stage>: ...') naming the stage that failed."""
    from tessel.frontends.onnx.importer import import_model
    from tessel.passes.manager import PassManager
    from tessel.passes.pipeline import O_LEVELS, parse_pipeline
    from tessel.targets.numpy.interpreter import input_names
    from tessel.targets.opencl import device as dev
    from tessel.targets.opencl.lower import lower_module
    from tessel.targets.opencl.runtime import Executable

    stage = "import"
    try:
        module = import_model(data, filename)
        stage = f"opt -O{level}"
        PassManager(parse_pipeline(O_LEVELS[level])).run(module)
        func = module.func("main") or module.funcs[0]
        arrays = [feeds[n] for n in input_names(func)]
        stage = "lower"
        lower_module(module, dev.device_info(device))
        exe = Executable(module, func, device)
        stage = "run"
        return exe.run(arrays)
    except Exception as e:  # one line per failure, the bench goes on
        raise RuntimeError(f"{stage}: {first_line(e)}") from e


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", type=Path, default=zoo.ZOO_DIR, help="where the .onnx files are")
    ap.add_argument("--only", default="", help="comma-separated model names (default: all)")
    ap.add_argument("--levels", default="2,3", help="comma-separated -O levels (default 2,3)")
    ap.add_argument("--device", default=None, help="OpenCL device, as bench.py --device")
    ap.add_argument("--no-time", action="store_true", help="skip timing onnxruntime")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")  # pyopencl's CompilerWarning
    from tessel.targets.opencl import device as dev

    device = dev.pick_device(args.device)
    names = [n for n in args.only.split(",") if n] or [s.name for s in zoo.SPECS]
    levels = [int(x) for x in args.levels.split(",") if x]
    bad = 0
    for name in names:
        try:
            path, feeds = zoo.load(name, args.dir)
        except FileNotFoundError as e:
            print(f"{name:20s} MISSING  {e}", flush=True)
            bad += 1
            continue
        data = path.read_bytes()
        sess = ort_session(data)
        want = sess.run(None, feeds)
        if not args.no_time:
            ms = median_ms(lambda s=sess, f=feeds: s.run(None, f))
            shapes = " ".join(f"{k}{list(v.shape)}" for k, v in feeds.items())
            print(f"{name:20s} ort      {ms:9.3f} ms  {shapes}", flush=True)
        for level in levels:
            t0 = time.perf_counter()
            try:
                got = run_tessel(data, str(path), level, feeds, device)
            except RuntimeError as e:
                bad += 1
                print(f"{name:20s} -O{level}      ERROR  {e}", flush=True)
                continue
            secs = time.perf_counter() - t0
            pairs = list(zip(got, want, strict=False))
            same = len(got) == len(want) and all(g.shape == w.shape for g, w in pairs)
            ok = same and all(np.allclose(g, w, rtol=RTOL, atol=ATOL) for g, w in pairs)
            err = max((float(np.abs(np.asarray(g, np.float64) - w).max()) for g, w in pairs
                       if g.shape == w.shape), default=float("nan"))
            scale = max(float(np.abs(w).max()) for w in want)
            bad += not ok
            print(f"{name:20s} -O{level}      {'ok  ' if ok else 'FAIL'}   max abs err {err:.2e}  "
                  f"(max |out| {scale:.2g}{'' if same else ', shapes differ'}; compile+run {secs:.1f}s)",
                  flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
