"""ONNX node conformance: the onnx package's node test cases through tessel's onnx.backend Backend.

    .venv/bin/python tests/conformance/conformance.py                  # run all 1884 cases, report
    .venv/bin/python tests/conformance/conformance.py -k conv -v       # a subset, with each failure
    .venv/bin/python tests/conformance/conformance.py --update         # rewrite the pass list and docs

Each case is classified as
- pass: every output has the expected shape, dtype and values (the case's rtol/atol, as onnx's runner);
- wrong: it ran, but an output differs;
- unsupported: the importer refused it for a known limitation (an unsupported op, attribute, element
  type or input form), decided from the diagnostic's text by `UNSUPPORTED`;
- error: anything else (an invalid op from a converter, an interpreter error, a crash, a timeout).

Cases run in worker processes forked from this one (`--jobs`, default 2), each under a timeout; a worker
that crashes or hangs is replaced and its case counted as an error, so one case can't end the run. The
report gives counts per op (the case's main op: its node's type, or for `*_expanded*` cases, the op of
the case they expand) and totals. `--update` writes tests/conformance/passing_<target>.txt (sorted case
names, which tests/conformance/test_conformance.py checks on every `make test`) and docs/op-support.md.
Without --update, cases in the pass list that no longer pass are regressions and the exit status is 1.

Collecting the cases costs ~7 s, so they are pickled once per onnx/numpy/protobuf version under
$TESSEL_CACHE_DIR (default ~/.cache/tessel) and reloaded in ~50 ms.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import fnmatch
import functools
import multiprocessing
import multiprocessing.connection
import os
import pickle
import re
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):  # run as a script: make the `tests` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.conformance.report import (  # noqa: E402
    STATUSES,
    Result,
    render_docs,
    short_message,
    text_report,
    totals,
)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DOCS = ROOT / "docs"
DEFAULT_TIMEOUT = 60.0

UNSUPPORTED = re.compile(
    r"unsupported|not supported|supported only|only supported|cannot represent|must be a constant"
    r"|dynamic dims|only known at run time|sequences and maps|not implemented|no OpenCL kernel"
    r"|\btessel (needs|imports|cannot|can only|only|does not)\b",
    re.I,
)
"""Diagnostic text that marks a known limitation rather than a bug."""


def pass_list_path(target: str) -> Path:
    return HERE / f"passing_{target}.txt"


def docs_path(target: str) -> Path:
    return DOCS / ("op-support.md" if target == "numpy" else f"op-support-{target}.md")


# --- the cases ------------------------------------------------------------------------------------------

def _cache_file() -> Path:
    import google.protobuf
    import onnx

    base = Path(os.environ.get("TESSEL_CACHE_DIR") or Path.home() / ".cache" / "tessel")
    key = (f"onnx{onnx.__version__}-np{np.__version__}-pb{google.protobuf.__version__}"
           f"-py{sys.version_info[0]}.{sys.version_info[1]}")
    return base / f"onnx-node-cases-{key}.pkl"


@functools.cache
def load_cases() -> dict[str, Any]:
    """All node test cases by name (onnx.backend.test.case.node.collect_testcases, cached on disk)."""
    path = _cache_file()
    with contextlib.suppress(Exception):
        with open(path, "rb") as f:
            cases = pickle.load(f)
        if isinstance(cases, dict) and cases:
            return cases
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from onnx.backend.test.case.node import collect_testcases

        cases = {c.name: c for c in collect_testcases()}
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".cases.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                pickle.dump(cases, f, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    return cases


# --- one case -----------------------------------------------------------------------------------------

def _diagnostic_text(e: BaseException) -> str:
    from tessel.ir.diagnostics import DiagnosticError, render

    if isinstance(e, DiagnosticError):
        return "".join(render(d) for d in e.diagnostics).strip()
    return f"{type(e).__name__}: {e}".strip()


def classify(e: BaseException) -> tuple[str, str]:
    """(status, message) for an exception raised while importing or running a case."""
    from tessel.ir.diagnostics import DiagnosticError

    text = _diagnostic_text(e)
    if isinstance(e, DiagnosticError) and UNSUPPORTED.search(text):
        return "unsupported", text
    return "error", text


def _as_array(x: Any) -> Any:
    import onnx

    if isinstance(x, onnx.TensorProto):
        return onnx.numpy_helper.to_array(x)
    if isinstance(x, list | tuple):
        return [_as_array(v) for v in x]
    return x if x is None else np.asarray(x)


def compare(expected: Sequence[Any], got: Sequence[Any], rtol: float, atol: float) -> str | None:
    """Why `got` differs from `expected` (onnx's runner's rules), or None when they match."""
    if len(got) != len(expected):
        return f"{len(got)} outputs, expected {len(expected)}"
    for i, (e, g) in enumerate(zip(expected, got, strict=True)):
        if isinstance(e, list) or e is None:
            return f"output {i}: expected a {'sequence' if e is not None else 'missing optional'} value"
        g = np.asarray(g)
        if g.shape != e.shape:
            return f"output {i}: shape {list(g.shape)}, expected {list(e.shape)}"
        if e.dtype == object:
            if not np.array_equal(g, e):
                return f"output {i}: values differ"
            continue
        if g.dtype != e.dtype:
            return f"output {i}: dtype {g.dtype}, expected {e.dtype}"
        if e.dtype.kind in "fc" or e.dtype.name.startswith(("bfloat", "float")):  # ml_dtypes floats too
            ef, gf = e.astype(np.float64), g.astype(np.float64)
            tol = max(rtol, 2**-6) if e.dtype.name == "bfloat16" else rtol  # two bfloat16 ulps, as onnx
            close = np.isclose(gf, ef, rtol=tol, atol=atol, equal_nan=True)
            if not close.all():
                bad = int(np.argmax(~close.reshape(-1)))
                diff = np.abs(gf - ef)
                worst = float(np.nanmax(np.where(close, 0, diff))) if diff.size else 0.0
                return (f"output {i}: {int((~close).sum())}/{close.size} values differ (max abs diff "
                        f"{worst:.3g}; first at {bad}: {gf.reshape(-1)[bad]!r} vs {ef.reshape(-1)[bad]!r})")
        elif not np.array_equal(g, e):
            bad = int(np.argmax((g != e).reshape(-1)))
            return (f"output {i}: {int((g != e).sum())}/{e.size} values differ (first at {bad}: "
                    f"{g.reshape(-1)[bad]!r} vs {e.reshape(-1)[bad]!r})")
    return None


def run_case(case: Any, target: str = "numpy", pipeline: str | None = None, roundtrip: bool = False,
             specialize: bool = True) -> Result:
    """Import and run one case; never raises (but a hang or a crash of the process is the caller's)."""
    from tessel.frontends.onnx.backend import TesselBackend

    t0 = time.perf_counter()
    rep = None
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            rep = TesselBackend.prepare(case.model, "CPU", target=target, pipeline=pipeline,
                                        roundtrip=roundtrip, filename=f"{case.name}.onnx",
                                        specialize=specialize)
            for inputs, outputs in case.data_sets:
                got = rep.run([_as_array(x) for x in inputs])
                why = compare([_as_array(x) for x in outputs], list(got), case.rtol, case.atol)
                if why is not None:
                    return Result(case.name, "wrong", why, time.perf_counter() - t0)
    except RecursionError as e:
        return Result(case.name, "error", f"RecursionError: {e}", time.perf_counter() - t0)
    except Exception as e:
        status, message = classify(e)
        return Result(case.name, status, message, time.perf_counter() - t0)
    baked = tuple(rep.specialized_inputs or ()) if rep is not None else ()
    return Result(case.name, "pass", "", time.perf_counter() - t0, baked)


# --- running many ---------------------------------------------------------------------------------------

@dataclasses.dataclass
class Options:
    target: str = "numpy"
    pipeline: str | None = None
    roundtrip: bool = False
    timeout: float = DEFAULT_TIMEOUT
    specialize: bool = True


def _worker(conn: multiprocessing.connection.Connection, opts: Options) -> None:
    warnings.simplefilter("ignore")
    cases = load_cases()  # forked after the parent loaded them: no work
    while True:
        name = conn.recv()
        if name is None:
            return
        conn.send(run_case(cases[name], opts.target, opts.pipeline, opts.roundtrip, opts.specialize))


class _Slot:
    def __init__(self, ctx: Any, opts: Options):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child, opts), daemon=True)
        self.proc.start()
        child.close()
        self.name: str | None = None
        self.started = 0.0

    def give(self, name: str) -> None:
        self.name, self.started = name, time.perf_counter()
        self.conn.send(name)

    def stop(self, kill: bool = False) -> None:
        if kill:
            self.proc.kill()
        else:
            with contextlib.suppress(OSError, BrokenPipeError):
                self.conn.send(None)
        self.proc.join(timeout=5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        self.conn.close()


def run_cases(names: Sequence[str], opts: Options, jobs: int = 2,
              on_result: Callable[[Result], None] | None = None) -> list[Result]:
    """Run `names` in `jobs` forked workers (in this process when jobs is 0), calling on_result(r)."""
    cases = load_cases()
    results: list[Result] = []

    def done(r: Result) -> None:
        results.append(r)
        if on_result is not None:
            on_result(r)

    if jobs <= 0:
        for n in names:
            done(run_case(cases[n], opts.target, opts.pipeline, opts.roundtrip, opts.specialize))
        return results
    ctx = multiprocessing.get_context("fork")
    todo = collections.deque(names)
    slots = [_Slot(ctx, opts) for _ in range(min(jobs, len(todo)))]
    try:
        for s in slots:
            if todo:
                s.give(todo.popleft())
        while any(s.name is not None for s in slots):
            busy = [s for s in slots if s.name is not None]
            ready = multiprocessing.connection.wait([s.conn for s in busy], timeout=0.25)
            for i, s in enumerate(slots):
                if s.name is None:
                    continue
                r: Result | None = None
                replace = False
                if s.conn in ready:
                    try:
                        r = s.conn.recv()
                    except (EOFError, OSError):
                        s.proc.join(timeout=5)
                        r = Result(s.name, "error", f"the worker died (exit code {s.proc.exitcode})",
                                   time.perf_counter() - s.started)
                        replace = True
                elif time.perf_counter() - s.started > opts.timeout:
                    r = Result(s.name, "error", f"timed out after {opts.timeout:g} s", opts.timeout)
                    replace = True
                if r is None:
                    continue
                done(r)
                if replace:
                    s.stop(kill=True)
                    s = slots[i] = _Slot(ctx, opts)
                s.name = None
                if todo:
                    s.give(todo.popleft())
    finally:
        for s in slots:
            s.stop(kill=s.name is not None)
    return results


def read_pass_list(target: str) -> list[str]:
    path = pass_list_path(target)
    if not path.exists():
        return []
    return [ln.strip() for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


# --- command line -------------------------------------------------------------------------------------

def select(names: Iterable[str], pattern: str | None) -> list[str]:
    """-k: case names containing any of the comma-separated words (or matching them as globs)."""
    names = list(names)
    if not pattern:
        return names
    words = [w.strip() for w in pattern.split(",") if w.strip()]
    return [n for n in names if any(w in n or fnmatch.fnmatchcase(n, w) for w in words)]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="numpy", help="target to run on (default numpy)")
    ap.add_argument("--update", action="store_true",
                    help="rewrite tests/conformance/passing_<target>.txt and docs/op-support.md")
    ap.add_argument("-j", "--jobs", type=int, default=2, help="worker processes (0: in this process)")
    ap.add_argument("-k", dest="filter", metavar="WORDS",
                    help="only cases whose name contains one of these comma-separated words or globs")
    ap.add_argument("--pipeline", help="a tessel-opt pipeline (or -O1..-O3) to run before executing")
    ap.add_argument("--roundtrip", action="store_true", help="print and reparse the IR before running")
    ap.add_argument("--no-specialize", dest="specialize", action="store_false",
                    help="don't bake shape-like inputs (axes, pads, ...) in as constants: refuse such cases")
    ap.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds per case (default 60)")
    ap.add_argument("-v", "--verbose", action="store_true", help="list every failing case and why")
    ap.add_argument("--slowest", type=int, default=5, help="show the N slowest cases (default 5)")
    args = ap.parse_args(argv)
    if args.update and (args.pipeline or args.roundtrip or not args.specialize):
        ap.error("--update records the plain target's results; drop --pipeline/--roundtrip/--no-specialize "
                 "(without --update they check the pass list still passes through them)")

    t0 = time.perf_counter()
    cases = load_cases()
    names = select(sorted(cases), args.filter)
    if not names:
        print(f"no case matches -k {args.filter!r}", file=sys.stderr)
        return 2
    opts = Options(args.target, args.pipeline, args.roundtrip, args.timeout, args.specialize)
    tty = sys.stderr.isatty()
    results: list[Result]
    if tty:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        counts: collections.Counter = collections.Counter()
        with Progress(TextColumn("conformance ({task.fields[target]})"), BarColumn(), MofNCompleteColumn(),
                      TextColumn("{task.fields[counts]}"), TimeRemainingColumn(),
                      console=Console(stderr=True), auto_refresh=False, transient=True) as progress:
            task = progress.add_task("cases", total=len(names), target=args.target, counts="")
            last = [0.0]

            def tick(r: Result) -> None:
                counts[r.status] += 1
                progress.update(task, advance=1, counts=" ".join(
                    f"{s} {counts[s]}" for s in STATUSES if counts[s]))
                now = time.perf_counter()
                if now - last[0] > 0.1:
                    progress.refresh()
                    last[0] = now

            results = run_cases(names, opts, args.jobs, tick)
    else:
        results = run_cases(names, opts, args.jobs)
    elapsed = time.perf_counter() - t0

    sys.stdout.write(text_report(results, cases, args.verbose))
    t = totals(results)
    n_special = sum(1 for r in results if r.specialized)
    print(f"\n{t['pass']} passed ({n_special} with inputs baked in as constants), {t['wrong']} wrong, "
          f"{t['unsupported']} unsupported, {t['error']} errors of {len(results)} cases on {args.target} "
          f"in {elapsed:.1f} s ({args.jobs} jobs)")
    if args.slowest > 0:
        slow = sorted(results, key=lambda r: -r.seconds)[: args.slowest]
        print("slowest: " + ", ".join(f"{r.name} {r.seconds:.2f} s" for r in slow))

    passing = {r.name for r in results if r.status == "pass"}
    ran = {r.name for r in results}
    before = set(read_pass_list(args.target))
    lost = sorted((before & ran) - passing)
    gained = sorted(passing - before)
    if gained:
        print(f"{len(gained)} case{'s' if len(gained) > 1 else ''} newly passing"
              + ("" if args.update else " (run with --update to record them)"))
    if lost:
        print(f"{len(lost)} case{'s' if len(lost) > 1 else ''} in {pass_list_path(args.target).name} "
              "no longer pass:")
        by_name = {r.name: r for r in results}
        for n in lost[:50]:
            print(f"  {n}: {by_name[n].status}: {short_message(by_name[n].message)}")
    if args.update:
        new = sorted((before - ran) | passing)
        _write(pass_list_path(args.target), "".join(f"{n}\n" for n in new))
        print(f"wrote {pass_list_path(args.target).relative_to(ROOT)} ({len(new)} cases)")
        if len(ran) == len(cases):
            path = docs_path(args.target)
            _write(path, render_docs(results, cases, args.target))
            print(f"wrote {path.relative_to(ROOT)}")
        else:
            print(f"-k ran {len(ran)} of {len(cases)} cases: {docs_path(args.target).name} left as it was")
        return 0
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
