"""`make bench`: tessel on OpenCL and on numpy against onnxruntime (2 threads): the light table and the zoo
table, each with its geomean (DESIGN §8).

    .venv/bin/python bench/bench.py                       # light models, transformer, zoo, microbenchmarks
    .venv/bin/python bench/bench.py --suite zoo           # `make bench-zoo`: the zoo alone
    .venv/bin/python bench/bench.py --models resnet50,gpt2 --rounds 5 --repeat 20

For each of the onnx package's light models (a seeded random-weight copy, batch 1) it compiles it as a user
does, `tessel.compile(model, opt_level=2)` (import, -O2, lowering for OpenCL, load; the compile time and
first run are reported separately), then times tessel and onnxruntime in alternating rounds, each through
its Python API (`CompiledModel.run(None, feeds)` against `InferenceSession.run(None, feeds)`): each round is
the median of --repeat runs after a warm-up. The executable's own loop (`Executable.run` on the arrays, what
`tessel-run --repeat` times) runs in the same rounds: the "exe ms" column. Each model
runs in --processes fresh processes, one after the other, and the table shows, for each runtime, the
best round of any process (DESIGN §9: this VM sometimes drops to one-thread speed for a while, and one
process can run 20-30% slower than the next for its whole life, for tessel and onnxruntime alike; a
round or process over 2x the best is flagged as an outlier). The JSON keeps every process's best.
Beside the best, each process reports its single-process medians: every timed run of tessel and of
onnxruntime in that process (after warm-up, and after tessel's `auto` execution has settled), the median
of each; the table shows the process whose median ratio is the median of the processes'. The overhead
column is what launches, wake-ups, waits and copies cost a run: the median over profiled runs on the same
execution of each run's wall time minus its kernels' summed time (profiling events; under cooperative
execution each kernel's span in the persistent kernels, read from the cycle counter), and its share of
those runs' median wall.
The zoo (bench/zoo/, built by `bench/zoo/build.py` with the `bench` extra; models a user would bring:
torchvision and transformers definitions, seeded random weights) is its own table and geomean.
tessel-numpy is timed with fewer runs, in the first process only. Outputs are checked against onnxruntime
(rtol 1e-3, atol 1e-4). The BERT-style encoder of tests/models/transformer.py (`--models transformer`) runs
the same way (-O2 recognizes its attention, LayerNorm and GELU); its ratio is printed apart from the light
models' geomean. Then two microbenchmarks: SGEMM 1024^3 (the matmul kernel's time from profiling events)
and a 64 MiB f32 add (three streams). Results go to bench/results/<date>.json and latest.json.
"""

from __future__ import annotations

import os

# POCL_AFFINITY stays PoCL's default (off): workers pinned one a core make cooperative execution bimodal
# (the worker that takes the pool's work-group may share the calling thread's core; docs/opencl.md)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "2")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402

MODELS = (
    "alexnet",
    "densenet121",
    "inception_v1",
    "inception_v2",
    "resnet50",
    "shufflenet",
    "squeezenet",
    "vgg19",
    "zfnet512",
)
FILES = {"alexnet": "bvlc_alexnet"}
LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
TRANSFORMER = "transformer"
"""The BERT-style encoder of tests/models/transformer.py (2 layers, hidden 128, 4 heads, seq 64, ffn 512):
benchmarked after the light models, its ratio reported apart from their geomean."""
RESULTS = Path(__file__).resolve().parent / "results"
ZOO = Path(__file__).resolve().parent / "zoo"
SUITES = ("light", "zoo")


if str(Path(__file__).resolve().parent) not in sys.path:  # common.py (bench/ is not a package)
    sys.path.insert(0, str(Path(__file__).resolve().parent))


def zoo_module():  # noqa: ANN201
    """bench/zoo/zoo.py (numpy only; bench/ is not a package)."""
    if str(ZOO) not in sys.path:
        sys.path.insert(0, str(ZOO))
    import zoo

    return zoo


def suite_models(suite: str) -> list[str]:
    if suite == "light":
        return [*MODELS, TRANSFORMER]
    return [s.name for s in zoo_module().SPECS]


def suite_of(name: str) -> str:
    return "light" if name in (*MODELS, TRANSFORMER) else "zoo"


def timed_pair(fa, fb, repeat: int, sink_a: list[float], sink_b: list[float]) -> float:  # noqa: ANN001
    """`fa` and `fb` run alternately, `repeat` times each after one warm-up of each (neither always runs
    first after a pause); every run's ms goes to its sink. Returns `fa`'s median ms."""
    fa()
    fb()
    times_a = []
    for _ in range(repeat):
        for fn, times in ((fa, times_a), (fb, sink_b)):
            t0 = time.perf_counter()
            fn()
            ms = (time.perf_counter() - t0) * 1000
            times.append(ms)
    sink_a.extend(times_a)
    return statistics.median(times_a)


def timed_median(fn, repeat: int, sink: list[float] | None = None) -> float:  # noqa: ANN001
    """Median ms of `repeat` runs after one warm-up; every run's ms also goes to `sink`."""
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    if sink is not None:
        sink.extend(t * 1000 for t in times)
    return statistics.median(times) * 1000


def transformer_model() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    root = str(Path(__file__).resolve().parent.parent)
    if root not in sys.path:
        sys.path.insert(0, root)
    from tests.models.transformer import build_encoder, encoder_inputs

    model = build_encoder(layers=2, hidden=128, heads=4, seq=64, ffn=512, seed=0)
    return model, encoder_inputs(model)


def load_model(name: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A benchmarked model and its inputs: the transformer encoder, a zoo model, or a light model with
    seeded random weights (its bundled ones are constant fills) and seeded inputs."""
    from tessel.frontends.onnx.randomize import randomize_weights

    if name == TRANSFORMER:
        return transformer_model()
    if suite_of(name) == "zoo":
        path, feeds = zoo_module().load(name)
        return onnx.load(str(path)), feeds
    model = randomize_weights(onnx.load(str(LIGHT / f"light_{FILES.get(name, name)}.onnx")), seed=0)
    inits = {i.name for i in model.graph.initializer}
    rng = np.random.default_rng(7)
    feeds = {
        vi.name: rng.standard_normal([d.dim_value for d in vi.type.tensor_type.shape.dim]).astype(np.float32)
        for vi in model.graph.input
        if vi.name not in inits
    }
    return model, feeds


def bench_model(name: str, args: argparse.Namespace) -> dict:
    import onnxruntime as ort
    import tessel
    from common import ATOL, RTOL, openvino_model, ort_options, profiled_twin
    from tessel.targets.numpy.interpreter import input_names, run_func

    model, feeds = load_model(name)
    data = model.SerializeToString()
    sess = ort.InferenceSession(data, ort_options(), providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)
    ov = openvino_model(data)  # None without the bench extra
    # tessel as users call it: tessel.compile(...).run(None, feeds), like InferenceSession.run
    t0 = time.perf_counter()
    compiled = tessel.compile(data, opt_level=args.level, device=args.device)
    import_ms = (time.perf_counter() - t0) * 1000
    got = compiled.run(None, feeds)
    compile_ms = (time.perf_counter() - t0) * 1000
    exe = compiled._exe  # the executable the API runs: its own loop is the CLI's --repeat figure
    module = compiled.modules["optimized"]
    func = module.func("main") or module.funcs[0]
    arrays = [feeds[n] for n in input_names(func)]
    correct = all(np.allclose(g, w, rtol=RTOL, atol=ATOL) for g, w in zip(got, want, strict=True))
    max_err = max(float(np.abs(g.astype(np.float64) - w).max(initial=0.0))
                  for g, w in zip(got, want, strict=True))
    exe.settle(arrays)  # `auto` execution chooses the pool or the inline device before anything is timed
    cl_rounds, ort_rounds = [], []
    cl_runs: list[float] = []
    exe_runs: list[float] = []
    ort_runs: list[float] = []
    ov_runs: list[float] = []
    for _ in range(args.rounds):
        time.sleep(0.3)  # let the other runtime's worker threads stop spinning before timing
        cl_rounds.append(timed_pair(lambda: compiled.run(None, feeds), lambda: exe.run(arrays), args.repeat,
                                    cl_runs, exe_runs))
        time.sleep(0.3)
        ort_rounds.append(timed_median(lambda: sess.run(None, feeds), args.repeat, ort_runs))
        if ov is not None:
            time.sleep(0.3)
            timed_median(lambda: ov(feeds), args.repeat, ov_runs)
    # the overhead column: in each profiled run on the same execution, its wall minus its kernels' summed
    # time (two medians taken minutes apart, or over two executables, differ by this VM's noise alone)
    prof = profiled_twin(exe)
    _, pstats = prof.measure(arrays, args.repeat)
    run_kernel_ms = [sum(ts[r] for ts in pstats.kernel_ns.values()) / 1e6 for r in range(len(pstats.seconds))]
    kernel_ms = statistics.median(run_kernel_ms)
    overhead_ms = statistics.median(w * 1e3 - k for w, k in zip(pstats.seconds, run_kernel_ms, strict=True))
    overhead_share = overhead_ms / (statistics.median(pstats.seconds) * 1e3)
    del prof
    median_cl, median_ort = statistics.median(cl_runs), statistics.median(ort_runs)
    median_exe = statistics.median(exe_runs)
    median_ov = statistics.median(ov_runs) if ov_runs else None
    numpy_ms = None
    if not args.no_numpy:  # last: OpenBLAS threads spin after numpy's GEMMs and would slow the others
        numpy_ms = timed_median(lambda: run_func(module, func, arrays), args.numpy_repeat)
    cl_ms, ort_ms = min(cl_rounds), min(ort_rounds)
    outliers = sum(t > 2 * cl_ms for t in cl_rounds) + sum(t > 2 * ort_ms for t in ort_rounds)
    return {
        "model": name,
        "tessel_opencl_ms": round(cl_ms, 3),
        "tessel_numpy_ms": numpy_ms and round(numpy_ms, 3),
        "onnxruntime_ms": round(ort_ms, 3),
        "ratio": round(cl_ms / ort_ms, 3),
        "median_opencl_ms": round(median_cl, 4),
        "median_ort_ms": round(median_ort, 4),
        "median_ratio": round(median_cl / median_ort, 3),
        "median_executable_ms": round(median_exe, 4),
        "median_openvino_ms": median_ov and round(median_ov, 4),
        "median_ratio_openvino": median_ov and round(median_cl / median_ov, 3),
        "kernel_ms": round(kernel_ms, 4),
        "overhead_ms": round(overhead_ms, 4),
        "overhead_share": round(overhead_share, 4),
        "execution": exe.running_on,
        "execution_note": exe.adapt_note,
        "kernels": sum(1 for s in exe.steps if all(s.global_size)),
        "peak_bytes": exe.peak_bytes,
        "weight_bytes": exe.weight_bytes,
        "import_opt_ms": round(import_ms, 1),
        "compile_load_ms": round(compile_ms, 1),
        "correct": bool(correct),
        "max_abs_err": max_err,
        "rounds_opencl_ms": [round(t, 3) for t in cl_rounds],
        "rounds_ort_ms": [round(t, 3) for t in ort_rounds],
        "outlier_rounds": outliers,
    }


def micro(args: argparse.Namespace) -> dict:
    from tessel.ir.parser import parse_module
    from tessel.targets.opencl import device as dev
    from tessel.targets.opencl.lower import lower_module
    from tessel.targets.opencl.runtime import Executable

    device = dev.pick_device(args.device)
    info = dev.device_info(device)
    rng = np.random.default_rng(0)

    def kernel_ms(text: str, inputs: list[np.ndarray], op: str) -> float:
        m = parse_module(text, "<micro>")
        lower_module(m, info)
        exe = Executable(m, m.funcs[0], device, profile=True)
        best = math.inf
        for _ in range(args.rounds):
            _, stats = exe.measure(inputs, args.repeat)
            steps = [i for i, s in enumerate(exe.steps) if s.op == op]
            runs = len(stats.seconds)
            best = min(
                best, statistics.median(sum(stats.kernel_ns[i][r] for i in steps) for r in range(runs))
            )
        return best / 1e6

    n = 1024
    t = f"tensor<{n}x{n}xf32>"
    gemm = (
        f"module @sgemm {{\n  func @main(%a: {t}, %b: {t}) -> {t} {{\n"
        f"    %0 = matmul %a, %b : ({t}, {t}) -> {t}\n    return %0 : {t}\n  }}\n}}\n"
    )
    a, b = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
    gemm_ms = kernel_ms(gemm, [a, b], "matmul")
    m = 16 << 20
    v = f"tensor<{m}xf32>"
    add = (
        f"module @add {{\n  func @main(%a: {v}, %b: {v}) -> {v} {{\n"
        f"    %0 = add %a, %b : ({v}, {v}) -> {v}\n    return %0 : {v}\n  }}\n}}\n"
    )
    x, y = (rng.standard_normal(m, dtype=np.float32) for _ in range(2))
    add_ms = kernel_ms(add, [x, y], "add")
    return {
        "sgemm_1024_ms": round(gemm_ms, 3),
        "sgemm_1024_gflops": round(2 * n**3 / gemm_ms / 1e6, 1),
        "add_64mib_ms": round(add_ms, 3),
        "add_64mib_gbps": round(3 * 4 * m / add_ms / 1e6, 1),
    }


def bench_in_processes(name: str, args: argparse.Namespace) -> dict:
    """bench_model in --processes fresh child processes (numpy only in the first); merged by merge_rows."""
    rows = []
    for p in range(args.processes):
        cmd = [sys.executable, __file__, "--child", name, "-O", str(args.level), "--repeat",
               str(args.repeat), "--rounds", str(args.rounds), "--numpy-repeat", str(args.numpy_repeat),
               "--device", args.device]
        if args.no_numpy or p or suite_of(name) == "zoo":  # the zoo: tessel and ort only
            cmd.append("--no-numpy")
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode:
            tail = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
            return {"model": name, "error": f"process {p + 1}: {tail}"}
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        if "error" in rows[-1]:
            return rows[-1]
    return merge_rows(rows)


def merge_rows(rows: list[dict]) -> dict:
    """One row from each process's: per runtime, the best of all processes' best rounds; the first
    process's compile time and numpy time (its caches were the coldest, as a user's first run)."""
    cl = [r["tessel_opencl_ms"] for r in rows]
    ort = [r["onnxruntime_ms"] for r in rows]
    out = dict(rows[0])
    out["tessel_opencl_ms"], out["onnxruntime_ms"] = min(cl), min(ort)
    out["ratio"] = round(min(cl) / min(ort), 3)
    out["correct"] = all(r["correct"] for r in rows)
    out["max_abs_err"] = max(r["max_abs_err"] for r in rows)
    out["processes_opencl_ms"], out["processes_ort_ms"] = cl, ort
    if all("median_ratio" in r for r in rows):  # the process of the median single-process ratio
        mid = sorted(rows, key=lambda r: r["median_ratio"])[(len(rows) - 1) // 2]
        for key in ("median_opencl_ms", "median_ort_ms", "median_ratio", "kernel_ms", "overhead_ms",
                    "overhead_share", "execution", "execution_note"):
            out[key] = mid[key]
        out["processes_median_ratio"] = [r["median_ratio"] for r in rows]
    out["rounds_opencl_ms"] = [t for r in rows for t in r["rounds_opencl_ms"]]
    out["rounds_ort_ms"] = [t for r in rows for t in r["rounds_ort_ms"]]
    out["outlier_rounds"] = sum(t > 2 * min(cl) for t in out["rounds_opencl_ms"]) + sum(
        t > 2 * min(ort) for t in out["rounds_ort_ms"])
    return out


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def render_table(title: str, rows: list[dict]) -> str:
    import io

    from rich import box
    from rich.console import Console
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, title=title)
    for col in (
        "model",
        "tessel ms",
        "exe ms",
        "ort ms",
        "ratio",
        "ov ms",
        "vs ov",
        "best ratio",
        "overhead",
        "kernels",
        "execution",
        "tessel-numpy ms",
        "peak memory",
        "compile s",
        "correct",
    ):
        table.add_column(col, justify="left" if col in ("model", "execution") else "right")
    for r in rows:
        if "error" in r:
            table.add_row(r["model"], "error", *[""] * 13, r["error"][:60])
            continue
        flag = " *" if r["outlier_rounds"] else ""
        share = r["overhead_share"]
        table.add_row(
            r["model"],
            f"{r['median_opencl_ms']:.3f}",
            f"{r['median_executable_ms']:.3f}" if "median_executable_ms" in r else "-",
            f"{r['median_ort_ms']:.3f}",
            f"{r['median_ratio']:.2f}x",
            "-" if not r.get("median_openvino_ms") else f"{r['median_openvino_ms']:.3f}",
            "-" if not r.get("median_ratio_openvino") else f"{r['median_ratio_openvino']:.2f}x",
            f"{r['ratio']:.2f}x{flag}",
            f"{r['overhead_ms']:.3f} ({100 * share:.0f}%)",
            str(r["kernels"]),
            r["execution"],
            "-" if r["tessel_numpy_ms"] is None else f"{r['tessel_numpy_ms']:.1f}",
            f"{r['peak_bytes'] / 2**20:.1f} MiB",
            f"{r['compile_load_ms'] / 1000:.1f}",
            "yes" if r["correct"] else f"NO ({r['max_abs_err']:.1e})",
        )
    buf = io.StringIO()
    Console(file=buf, width=200, force_terminal=sys.stdout.isatty(), highlight=False).print(table)
    ok = [r for r in rows if "ratio" in r and r["model"] != TRANSFORMER]
    if ok:
        worst = max(ok, key=lambda r: r["median_ratio"])
        buf.write(
            f"geomean tessel-opencl / onnxruntime over {len(ok)} models: "
            f"{geomean([r['median_ratio'] for r in ok]):.2f}x by single-process medians "
            f"(worst {worst['model']} {worst['median_ratio']:.2f}x), "
            f"{geomean([r['ratio'] for r in ok]):.2f}x by each runtime's best round\n"
        )
        vs_ov = [r["median_ratio_openvino"] for r in ok if r.get("median_ratio_openvino")]
        if vs_ov:
            buf.write(f"geomean tessel-opencl / OpenVINO CPU (f32, latency hint, same threads) over "
                      f"{len(vs_ov)} models: {geomean(vs_ov):.2f}x by single-process medians\n")
    tf = next((r for r in rows if r["model"] == TRANSFORMER and "ratio" in r), None)
    if tf:
        buf.write(f"transformer encoder (not in the geomean): {tf['median_ratio']:.2f}x onnxruntime "
                  f"(best rounds {tf['ratio']:.2f}x)\n")
    return buf.getvalue()


def render(rows: list[dict], mic: dict | None, processes: int = 1) -> str:
    out = []
    head = (f"single-process medians (ort in the same process, 2 threads); best ratio: each runtime's best "
            f"round over {processes} processes")
    for suite in SUITES:
        part = [r for r in rows if suite_of(r["model"]) == suite]
        if part:
            out.append(render_table(f"{suite} models: {head}", part))
    if any(r.get("outlier_rounds") for r in rows if "ratio" in r):
        out.append("* some rounds took over 2x the best round (the machine slowed down): see the JSON\n")
    if mic:
        out.append(
            f"SGEMM 1024^3: {mic['sgemm_1024_gflops']:.1f} GFLOP/s ({mic['sgemm_1024_ms']:.2f} ms); "
            f"64 MiB f32 add: {mic['add_64mib_gbps']:.1f} GB/s ({mic['add_64mib_ms']:.2f} ms)\n"
        )
    return "".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suite", default="light,zoo",
                    help="comma-separated suites: light (the onnx package's light models and the "
                    "transformer encoder), zoo (bench/zoo)")
    ap.add_argument("--models", default=None,
                    help=f"comma-separated model names instead of the suites: light models, '{TRANSFORMER}' "
                    "for the encoder, zoo models")
    ap.add_argument("-O", dest="level", type=int, default=2, choices=range(4),
                    help="the optimization level the models are compiled at (default 2)")
    ap.add_argument("--repeat", type=int, default=10, help="timed runs per round (median)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per model and process")
    ap.add_argument("--processes", type=int, default=3,
                    help="fresh processes per model; each runtime's best round of any is reported")
    ap.add_argument("--child", help=argparse.SUPPRESS)  # one model in this process, its row as JSON on stdout
    ap.add_argument("--numpy-repeat", type=int, default=2, help="timed runs of the numpy target")
    ap.add_argument("--no-numpy", action="store_true", help="skip the numpy target")
    ap.add_argument("--no-micro", action="store_true", help="skip the microbenchmarks")
    ap.add_argument("--device", default="auto", help="OpenCL device (as tessel-run --device)")
    ap.add_argument("--intel-opencl", action="store_true",
                    help="run on Intel's CPU OpenCL runtime (bench/intel_opencl.py; "
                         "pip install -e '.[intel-opencl]')")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    if args.intel_opencl:
        from intel_opencl import register

        args.device = register()
    if args.processes < 1:
        ap.error("--processes must be at least 1")
    if args.child:
        try:
            row = bench_model(args.child, args)
        except Exception as e:  # one model's failure is a row, not the end of the run
            row = {"model": args.child, "error": f"{type(e).__name__}: {e}"}
        sys.stdout.write(json.dumps(row) + "\n")
        return 0
    suites = [x for x in args.suite.split(",") if x]
    if any(x not in SUITES for x in suites):
        ap.error(f"--suite takes {', '.join(SUITES)}")
    names = args.models.split(",") if args.models else [n for x in suites for n in suite_models(x)]
    missing = [n for n in names if suite_of(n) == "zoo" and n not in suite_models("zoo")]
    if missing:
        ap.error(f"unknown models: {', '.join(missing)}")
    zoo_names = [n for n in names if suite_of(n) == "zoo"]
    if zoo_names:
        absent = [n for n in zoo_names if not (zoo_module().ZOO_DIR / f"{n}.onnx").exists()]
        if absent:
            sys.stderr.write("bench: building the zoo (bench/zoo/build.py) ...\n")
            built = subprocess.run([sys.executable, str(ZOO / "build.py"), "--only", ",".join(absent)])
            if built.returncode:
                sys.stderr.write("bench: the zoo did not build (it needs the bench extra: "
                                 "pip install -e '.[bench]'); its rows are errors\n")
    rows = []
    for name in names:
        sys.stderr.write(f"bench: {name} ({args.processes} processes) ...\n")
        rows.append(bench_in_processes(name, args))
    mic = None if args.no_micro else micro(args)
    sys.stdout.write(render(rows, mic, args.processes))
    from common import cpu_model
    from tessel.targets.opencl import device as dev

    result = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "device": dev.describe(dev.pick_device(args.device)),
        "cpu": cpu_model(),
        "rows": rows,
        "micro": mic,
        "args": vars(args),
    }
    RESULTS.mkdir(exist_ok=True)
    for path in [
        RESULTS / f"{time.strftime('%Y%m%d-%H%M%S')}.json",
        RESULTS / "latest.json",
        *([Path(args.json)] if args.json else []),
    ]:
        path.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if all(r.get("correct") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
