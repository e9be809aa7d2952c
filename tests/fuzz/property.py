"""The fuzzing property: a valid ONNX graph that onnxruntime runs must import into tessel, compile at
-O0..-O3, and give onnxruntime's numbers on the numpy interpreter and on OpenCL.

`check_graph` returns an `Outcome` instead of raising, so the pytest property (which asserts) and the
`make fuzz` driver (which counts and saves) share it. A graph is *discarded*, not failed, when the
oracle cannot judge it: onnxruntime rejects it or its outputs are not finite.

Tolerance: rtol 1e-3 and atol 1e-4 scaled by the largest magnitude of the expected output
(`atol * max(1, max|expected|)`). float32 rounding in sums (MatMul, Conv, ReduceSum) is relative to the
size of the terms, not of the result, so an output entry near zero that cancels large terms carries an
absolute error proportional to them; the output's largest entry is the available proxy. A real
miscompile (a wrong index, op or broadcast) moves values by their own magnitude, far beyond this.
"""

from __future__ import annotations

import dataclasses
import functools
import traceback
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx

from .graphs import GraphCase

LEVELS = (0, 1, 2, 3)
TARGETS = ("numpy", "opencl")
RTOL = 1e-3
ATOL = 1e-4


@dataclasses.dataclass
class Finding:
    """One way tessel got a graph wrong."""

    stage: str  # import | optimize | run | lower | mismatch
    level: int | None
    target: str | None
    message: str

    def where(self) -> str:
        parts = [f"-O{self.level}" if self.level is not None else "", self.target or ""]
        return " ".join(p for p in parts if p) or "import"

    def __str__(self) -> str:
        return f"[{self.stage} {self.where()}] {self.message}"


@dataclasses.dataclass
class Outcome:
    status: str = "ok"  # ok | discarded | failed
    reason: str = ""  # why it was discarded
    imported: bool = False
    compiled: list[int] = dataclasses.field(default_factory=list)  # levels whose pipeline ran cleanly
    compared: list[tuple[int, str]] = dataclasses.field(default_factory=list)  # (level, target) that matched
    skipped: list[str] = dataclasses.field(default_factory=list)  # e.g. "opencl: no platform"
    findings: list[Finding] = dataclasses.field(default_factory=list)


class Discard(Exception):
    """The oracle cannot judge this graph."""


def run_onnxruntime(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The oracle: onnxruntime's CPU provider with its graph optimizations off (its plain kernels)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 4
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        outs = [np.asarray(o) for o in sess.run(None, feeds)]
    except Exception as e:  # ORT raises its own exception types (Fail, InvalidArgument, NotImplemented...)
        raise Discard(f"onnxruntime rejects it: {type(e).__name__}: {_first_line(str(e))}") from None
    if not all(np.all(np.isfinite(o)) for o in outs if o.dtype.kind == "f"):
        raise Discard("onnxruntime's outputs are not finite")
    return outs


def compare(got: Sequence[np.ndarray], want: Sequence[np.ndarray], rtol: float = RTOL,
            atol: float = ATOL) -> str | None:
    """None when `got` matches `want`; else what differs first."""
    if len(got) != len(want):
        return f"{len(got)} outputs, onnxruntime has {len(want)}"
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        g = np.asarray(g)
        if g.shape != w.shape:
            return f"output {i}: shape {list(g.shape)}, onnxruntime's is {list(w.shape)}"
        if g.dtype != w.dtype:
            return f"output {i}: dtype {g.dtype}, onnxruntime's is {w.dtype}"
        if w.size == 0:
            continue
        tol = atol * max(1.0, float(np.max(np.abs(w))))
        bad = ~np.isclose(g, w, rtol=rtol, atol=tol)
        if bad.any():
            idx = tuple(int(j) for j in np.argwhere(bad)[0])
            diff = float(np.max(np.abs(g.astype(np.float64) - w)))
            return (f"output {i}: {int(bad.sum())}/{w.size} values differ (max abs diff {diff:.3g}, atol "
                    f"{tol:.3g}); first at {list(idx)}: {g[idx]!r} vs onnxruntime's {w[idx]!r}")
    return None


@functools.lru_cache(maxsize=1)
def opencl_device() -> tuple[Any, Any] | str:
    """(device, DeviceInfo) for the default OpenCL device, or why there is none."""
    from tessel.targets.opencl import device as dev

    reason = dev.opencl_available()
    if reason is not None:
        return reason
    d = dev.pick_device()
    return d, dev.device_info(d)


def check_graph(case: GraphCase, levels: Sequence[int] = LEVELS, targets: Sequence[str] = TARGETS,
                first_only: bool = False) -> Outcome:
    """Import, compile at each level, run on each target and compare with onnxruntime.
    `first_only` stops at the first finding (hypothesis shrinking wants one failure, fast)."""
    from tessel.frontends.onnx.importer import import_model
    from tessel.ir.diagnostics import DiagnosticError

    out = Outcome()
    try:
        want = run_onnxruntime(case.model, case.feeds)
    except Discard as e:
        return Outcome(status="discarded", reason=str(e))
    data = case.model.SerializeToString()
    args = [case.feeds[vi.name] for vi in case.model.graph.input if vi.name in case.feeds]

    def fail(stage: str, level: int | None, target: str | None, message: str) -> bool:
        out.findings.append(Finding(stage, level, target, message))
        out.status = "failed"
        return first_only

    for level in levels:
        try:
            module = import_model(data, "fuzz.onnx")
        except DiagnosticError as e:
            fail("import", None, None, _diag_text(e))
            return out
        except Exception as e:
            fail("import", None, None, _crash_text(e))
            return out
        out.imported = True
        try:
            _optimize(module, level)
        except Exception as e:
            text = _diag_text(e) if isinstance(e, DiagnosticError) else _crash_text(e)
            if fail("optimize", level, None, text):
                return out
            continue
        out.compiled.append(level)
        for target in sorted(targets, key=TARGETS.index):  # numpy first: lowering rewrites the module
            if target == "opencl":
                dev = opencl_device()
                if isinstance(dev, str):
                    out.skipped.append(f"opencl: {dev}")
                    continue
            try:
                got = run_target(module, target)(args)
            except Exception as e:
                stage = "lower" if isinstance(e, _LowerError) else "run"
                err = e.__cause__ if isinstance(e, _LowerError) and e.__cause__ else e
                text = _diag_text(err) if isinstance(err, DiagnosticError) else _crash_text(err)
                if fail(stage, level, target, text):
                    return out
                continue
            diff = compare(got, want)
            if diff is not None:
                if fail("mismatch", level, target, diff):
                    return out
            else:
                out.compared.append((level, target))
    return out


def _optimize(module: Any, level: int) -> None:
    from tessel.ir.diagnostics import Diagnostic, DiagnosticError
    from tessel.ir.verifier import verify
    from tessel.passes.manager import PassManager
    from tessel.passes.pipeline import O_LEVELS, parse_pipeline

    PassManager(parse_pipeline(O_LEVELS[level])).run(module)
    errors = verify(module)
    if errors:
        raise DiagnosticError([Diagnostic("error", "invalid IR after the pipeline"), *errors])


class _LowerError(Exception):
    pass


def run_target(module: Any, target: str) -> Any:
    """A callable running the module's main func on `target` (lowering it first for OpenCL)."""
    func = module.funcs[0]
    if target == "numpy":
        from tessel.ir.interpreter import run_func

        return lambda args: run_func(module, func, list(args))
    from tessel.targets.opencl.lower import lower_module
    from tessel.targets.opencl.runtime import Executable

    dev = opencl_device()
    assert not isinstance(dev, str)
    device, info = dev
    try:
        lower_module(module, info)
    except Exception as e:
        raise _LowerError(str(e)) from e
    exe = Executable(module, func, device)
    return exe.run


def _first_line(text: str) -> str:
    return text.strip().split("\n")[0][:300]


def _diag_text(e: BaseException) -> str:
    from tessel.ir.diagnostics import DiagnosticError, render

    if isinstance(e, DiagnosticError):
        return "".join(render(d) for d in e.diagnostics).strip()
    return _crash_text(e)


def _crash_text(e: BaseException) -> str:
    from tessel.passes.manager import CompilerCrash

    if isinstance(e, CompilerCrash):
        tail = e.traceback.strip().split("\n")[-3:] if e.traceback else []
        return f"{e}" + ("\n" + "\n".join(tail) if tail else "")
    tb = traceback.format_exception(type(e), e, e.__traceback__)
    return f"{type(e).__name__}: {e}\n" + "".join(tb[-3:]).strip()
