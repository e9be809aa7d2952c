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
    dynamic: list[tuple[int, str]] = dataclasses.field(default_factory=list)  # the same, with symbolic dims
    skipped: list[str] = dataclasses.field(default_factory=list)  # e.g. "opencl: no platform"
    findings: list[Finding] = dataclasses.field(default_factory=list)


class Discard(Exception):
    """The oracle cannot judge this graph."""


def run_onnxruntime(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The oracle: onnxruntime's CPU provider with its graph optimizations off (its plain kernels)."""
    import onnxruntime as ort

    ort.set_default_logger_severity(3)  # no deprecation warnings (tf_half_pixel_for_nn) on stderr
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
    """None when `got` matches `want` (floats within tolerance, integers and booleans exactly); else what
    differs first."""
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
        if w.dtype.kind in "biu":  # integers and booleans: exactly
            bad = g != w
            if bad.any():
                idx = tuple(int(j) for j in np.argwhere(bad)[0])
                return (f"output {i}: {int(bad.sum())}/{w.size} values differ (exact {w.dtype}); first at "
                        f"{list(idx)}: {g[idx]!r} vs onnxruntime's {w[idx]!r}")
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


SECOND_OPINION_OPS = frozenset({"Resize"})
"""Ops where onnxruntime is known to depart from the ONNX spec in corners the generator may still reach
(Resize: output lengths of one, antialiased taps at the borders). A mismatch on a graph with one is
rechecked against onnx's reference evaluator: when that agrees with tessel and not with onnxruntime, the
graph is discarded (the oracles disagree), not failed."""


def oracles_disagree(case: GraphCase, got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> bool:
    """True when `case` has a SECOND_OPINION_OPS op and onnx's reference agrees with `got`, not `want`."""
    if not SECOND_OPINION_OPS & set(case.ops):
        return False
    try:
        from onnx.reference import ReferenceEvaluator

        ref = [np.asarray(r) for r in ReferenceEvaluator(case.model).run(None, case.feeds)]
    except Exception:  # the reference lacks a kernel or a mode (tf_half_pixel_for_nn after opset 18)
        return False
    return compare(ref, want) is not None and compare(got, ref) is None


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
            fail("import", None, None, diag_text(e))
            return out
        except Exception as e:
            fail("import", None, None, crash_text(e))
            return out
        out.imported = True
        try:
            _optimize(module, level)
        except Exception as e:
            text = diag_text(e) if isinstance(e, DiagnosticError) else crash_text(e)
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
                text = diag_text(err) if isinstance(err, DiagnosticError) else crash_text(err)
                if fail(stage, level, target, text):
                    return out
                continue
            diff = compare(got, want)
            if diff is not None and oracles_disagree(case, got, want):
                if out.findings:  # a failure found at another level or target stays; this pair is unjudged
                    continue
                return Outcome(status="discarded", reason="onnxruntime and onnx's reference disagree (tessel "
                               "agrees with the reference)")
            if diff is not None:
                if fail("mismatch", level, target, diff):
                    return out
            else:
                out.compared.append((level, target))
    if levels and out.status != "failed":
        _check_dynamic(case, max(levels), targets, want, args, out, fail)
    return out


DYNAMIC = "+dyn"
"""The suffix of a target's name in findings and counts for the graph imported with symbolic dims."""


def dynamic_copy(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with every graph input's dims symbolic (`d<input>_<axis>`): the same graph as exporters
    write it with dynamic dims, to run at the sizes of the same feeds."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    inits = {i.name for i in copy.graph.initializer}
    for k, vi in enumerate(v for v in copy.graph.input if v.name not in inits):
        for axis, d in enumerate(vi.type.tensor_type.shape.dim):
            d.ClearField("dim_value")
            d.dim_param = f"d{k}_{axis}"
    return copy


def _check_dynamic(case: GraphCase, level: int, targets: Sequence[str], want: Sequence[np.ndarray],
                   args: list[np.ndarray], out: Outcome, fail: Any) -> None:
    """The graph with its inputs' dims symbolic, compiled once at -O`level` and run at the feeds' sizes on
    each target: the dynamic import, the passes on symbolic dims and the specialization, against the same
    onnxruntime results. A graph tessel cannot import with symbolic dims is not a finding (that is a
    limit, which the static import above already checks the rest of)."""
    from tessel.frontends.onnx.importer import import_model
    from tessel.ir.diagnostics import DiagnosticError

    try:
        module = import_model(dynamic_copy(case.model).SerializeToString(), "fuzz.onnx")
        _optimize(module, level)
    except DiagnosticError:
        return
    except Exception as e:
        fail("import", level, "numpy" + DYNAMIC, crash_text(e))
        return
    for target in sorted(targets, key=TARGETS.index):
        if target == "opencl" and isinstance(opencl_device(), str):
            continue
        try:
            got = run_target(module, target)(args)
        except DiagnosticError as e:
            if "do not fit" in str(e) or "even at these sizes" in str(e):
                continue  # sizes the symbolic graph cannot take (a reshape's constant target): a limit
            fail("run", level, target + DYNAMIC, diag_text(e))
            return
        except Exception as e:
            err = e.__cause__ if isinstance(e, _LowerError) and e.__cause__ else e
            fail("run", level, target + DYNAMIC, crash_text(err))
            return
        diff = compare(got, want)
        if diff is not None and not oracles_disagree(case, got, want):
            fail("mismatch", level, target + DYNAMIC, diff)
            return
        if diff is None:
            out.dynamic.append((level, target + DYNAMIC))


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
    return opencl_executable(module, func).run


LOWER_OPTIONS: dict[str, Any] = {"check_bounds": True}
"""Keyword arguments of `lower_module` for every OpenCL run of the fuzzers: every kernel checks its
accesses (an out-of-bounds one raises a KernelFault, a failure of the graph)."""
EXECUTABLE_OPTIONS: dict[str, Any] = {"poison": True}
"""Keyword arguments of `Executable` for every OpenCL run of the fuzzers: the memory plan starts as
signalling NaNs each run, so a read of memory no kernel wrote changes the results."""


def opencl_executable(module: Any, func: Any) -> Any:
    """The one place the fuzzers lower a module and make its OpenCL executable: switch on bounds checks or
    poisoned memory for every fuzzed graph through LOWER_OPTIONS and EXECUTABLE_OPTIONS. A lowering error
    is raised as _LowerError (its cause the original)."""
    from tessel.targets.opencl.dynamic import executable
    from tessel.targets.opencl.lower import lower_module

    dev = opencl_device()
    assert not isinstance(dev, str)
    device, info = dev
    try:
        lower_module(module, info, **LOWER_OPTIONS)
    except Exception as e:
        raise _LowerError(str(e)) from e
    return executable(module, func, device, **EXECUTABLE_OPTIONS)


def _first_line(text: str) -> str:
    return text.strip().split("\n")[0][:300]


def diag_text(e: BaseException) -> str:
    from tessel.ir.diagnostics import DiagnosticError, render

    if isinstance(e, DiagnosticError):
        return "".join(render(d) for d in e.diagnostics).strip()
    return crash_text(e)


def crash_text(e: BaseException) -> str:
    from tessel.passes.manager import CompilerCrash

    if isinstance(e, CompilerCrash):
        tail = e.traceback.strip().split("\n")[-3:] if e.traceback else []
        return f"{e}" + ("\n" + "\n".join(tail) if tail else "")
    tb = traceback.format_exception(type(e), e, e.__traceback__)
    return f"{type(e).__name__}: {e}\n" + "".join(tb[-3:]).strip()
