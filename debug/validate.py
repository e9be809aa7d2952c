"""Translation validation: run the numpy reference before and after a transformation and compare.

A debugging tool, not a pass: it lives in debug/ and drives the pass manager from outside. The reference
interpreter (ir/interpreter.py) is the oracle (it runs every level of the IR, a `cl.launch` by its
reference body).
`tessel-opt --validate-each` keeps the input module's results on seeded random inputs (or given ones)
and, through the pass manager's `after_pass` hook, runs the module again after every pass: the first
pass whose results move beyond tolerance raises `Miscompile`, and the manager writes the reproducer (the
IR before that pass plus the one-pass pipeline). `--bisect` drives the same check over pipeline
prefixes (`bisect`), and `tessel-codegen --validate` and `tessel-run --check-against` compare across
lowering with `compare`. Nothing here prints; reports are Diagnostics.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..ir.core import Func, Module, Op
from ..ir.diagnostics import Diagnostic, DiagnosticError, format_loc
from ..ir.interpreter import check_inputs, output_names, random_inputs, run_block, run_func
from ..passes.manager import CompilerCrash, Instrumentation, Pass, PassCheckFailed, PassManager


@dataclass(frozen=True)
class Tolerance:
    """Results agree when |got - want| <= atol + rtol * |want| elementwise (numpy.isclose); integers and
    booleans must be equal."""

    rtol: float = 1e-3
    atol: float = 1e-4

    @classmethod
    def parse(cls, text: str) -> Tolerance:
        """`RTOL,ATOL` (two finite numbers >= 0); raises ValueError saying what is wrong."""
        parts = text.split(",")
        if len(parts) != 2:
            raise ValueError(f"expected RTOL,ATOL (two numbers, e.g. 1e-3,1e-4), got '{text}'")
        values = []
        for what, part in zip(("RTOL", "ATOL"), parts, strict=True):
            try:
                v = float(part)
            except ValueError:
                raise ValueError(f"{what} '{part.strip()}' is not a number") from None
            if not math.isfinite(v) or v < 0:
                raise ValueError(f"{what} must be a finite number >= 0, got '{part.strip()}'")
            values.append(v)
        return cls(values[0], values[1])

    def __str__(self) -> str:
        return f"{self.rtol:g},{self.atol:g}"

    def describe(self) -> str:
        return f"rtol {self.rtol:g}, atol {self.atol:g}"


@dataclass
class Divergence:
    """One output that differs: where its worst element is, and by how much."""

    index: int
    name: str
    shape_problem: str = ""  # set when the shapes differ (then the numbers below mean nothing)
    where: tuple[int, ...] = ()
    got: Any = None
    want: Any = None
    max_abs: float = 0.0
    max_rel: float = 0.0
    count: int = 0
    size: int = 0

    def describe(self, tol: Tolerance, against: str = "the reference", index: bool = True) -> str:
        what = f"output '{self.name}'" + (f" (result #{self.index})" if index else "")
        if self.shape_problem:
            return f"{what} {self.shape_problem}"
        return (f"{what} differs from {against} at {list(self.where)}: {_num(self.got)} vs "
                f"{_num(self.want)} (max abs error {self.max_abs:.3g}, max rel error {self.max_rel:.3g}; "
                f"{self.count} of {self.size} elements beyond {tol.describe()})")


def _num(x: Any) -> str:
    return f"{x:.6g}" if isinstance(x, float) else repr(x)


def compare_arrays(index: int, name: str, got: np.ndarray, want: np.ndarray, tol: Tolerance,
                   against: str = "the reference") -> Divergence | None:
    """How `got` differs from `want` beyond `tol`, or None when they agree."""
    g, w = np.asarray(got), np.asarray(want)
    if g.shape != w.shape:
        return Divergence(index, name, f"has shape {list(g.shape)}, {against} gives {list(w.shape)}")
    exact = g.dtype.kind in "biu" and w.dtype.kind in "biu"
    kind = np.complex128 if "c" in (g.dtype.kind, w.dtype.kind) else np.float64
    gf, wf = g.astype(kind), w.astype(kind)
    with np.errstate(all="ignore"):
        close = (g == w) if exact else np.isclose(gf, wf, rtol=tol.rtol, atol=tol.atol, equal_nan=True)
        if close.all():
            return None
        err = np.abs(gf - wf)
        err = np.where(np.isnan(gf) & np.isnan(wf), 0.0, np.nan_to_num(err, nan=np.inf))
        mag = np.abs(wf)
        rel = np.where(mag > 0, err / np.where(mag > 0, mag, 1.0), np.where(err > 0, np.inf, 0.0))
    worst = np.unravel_index(int(np.argmax(np.where(close, -1.0, err))), g.shape) if g.ndim else ()
    where = tuple(int(i) for i in worst)
    return Divergence(index, name, "", where, g[where].item(), w[where].item(), float(err.max()),
                      float(rel.max()), int((~close).sum()), int(close.size))


def compare(names: Sequence[str], got: Sequence[np.ndarray], want: Sequence[np.ndarray], tol: Tolerance,
            against: str = "the reference") -> list[Divergence]:
    """Every output of `got` that differs from `want` beyond `tol`, in result order."""
    out = []
    for i, (name, g, w) in enumerate(zip(names, got, want, strict=True)):
        d = compare_arrays(i, name, g, w, tol, against)
        if d is not None:
            out.append(d)
    return out


def mismatch_error(names: Sequence[str], got: Sequence[np.ndarray], want: Sequence[np.ndarray],
                   tol: Tolerance, what: str, against: str = "numpy", func: Func | None = None
                   ) -> DiagnosticError | None:
    """The error `what: output 'y' differs from numpy at [..]: ...` for results beyond `tol` (one note per
    further output; given `func`, a note naming the op that computes the first), or None when they agree.
    `tessel-run --check-against` and `tessel-codegen --validate` report with it."""
    bad = compare(names, got, want, tol, against)
    if not bad:
        return None
    d = Diagnostic("error", f"{what}: {bad[0].describe(tol, against, index=False)}")
    ret = func.return_op if func is not None else None
    producer = ret.operands[bad[0].index].op if ret is not None else None
    if producer is not None:
        d.note(f"output '{bad[0].name}' is computed by {describe_op(producer)}")
    for b in bad[1:]:
        d.note(b.describe(tol, against, index=False))
    return DiagnosticError(d)


# running the reference ---------------------------------------------------------------------------
def select_func(module: Module) -> Func:
    """The func validation runs: @main, else the first."""
    func = module.func("main") or (module.funcs[0] if module.funcs else None)
    if func is None:
        raise DiagnosticError(Diagnostic("error", "the module holds no func to validate"))
    return func


SIZE_CASES = ((16, 0), (19, 2))
"""The sizes a dynamic func is validated at: every symbol at the first value, then each symbol at its own
(the second value plus a step for each symbol in name order), so that distinct symbols differ; an
anonymous `?` dim gets the first value."""


def size_cases(func: Func) -> list[tuple[dict[str, int], dict[str, list[int]]]]:
    """For a func with dynamic dims: (symbol values, input shapes) for each of SIZE_CASES; [] if static."""
    from ..ir.interpreter import input_names
    from ..ir.specialize import evaluate_type, is_dynamic
    from ..ir.symbolic import symbols_of

    if not is_dynamic(func):
        return []
    names = sorted(symbols_of(d for a in func.args for d in a.type.shape))
    cases = []
    for base, step in SIZE_CASES:
        sizes = {n: base + step * k for k, n in enumerate(names)}
        shapes = {}
        for name, a in zip(input_names(func), func.args, strict=True):
            t = evaluate_type(a.type, sizes)
            shapes[name] = [base if d is None else int(d) for d in t.shape]
        cases.append((sizes, shapes))
    return cases


def make_inputs(func: Func, given: Mapping[str, np.ndarray] | None, seed: int,
                source: str = "inputs") -> list[np.ndarray]:
    """The func's inputs in argument order: `given` (checked against the signature), else seeded random
    ones (floats in [-1, 1), small ints); a dynamic func's at the first of its `size_cases`."""
    if given is None:
        cases = size_cases(func)
        given = random_inputs(func, seed, shapes=cases[0][1]) if cases else random_inputs(func, seed)
    return check_inputs(func, given, source)


def run_reference(module: Module, func: Func, arrays: list[np.ndarray], what: str) -> list[np.ndarray]:
    """`func`'s results on the numpy reference; a failure says it was the reference running `what`."""
    try:
        return run_func(module, func, arrays)
    except DiagnosticError as e:
        first = dataclasses.replace(
            e.diagnostics[0], message=f"the numpy reference cannot run {what}: {e.diagnostics[0].message}")
        raise DiagnosticError([first, *e.diagnostics[1:]]) from None


class _KeepAll(dict):
    """An interpreter environment that keeps every value: run_block frees a value after its last use by
    popping it, and tracing wants them all."""

    def pop(self, key: Any, default: Any = None) -> Any:
        return self.get(key, default)


def trace(module: Module, func: Func, arrays: list[np.ndarray]) -> dict[int, np.ndarray]:
    """Every top-level value of `func` (by id) on these inputs."""
    env = _KeepAll({id(v): a for v, a in zip(func.args, arrays, strict=True)})
    run_block(module, func.block, env)
    return env


def first_changed_op(before: Module, after: Module, func_name: str, arrays: list[np.ndarray],
                     tol: Tolerance) -> Op | None:
    """The first op of `after` (in program order) whose result differs from the op with the same
    location, result index and type in `before`: where a pass changed the numbers, as far as locations
    can tell. Constants are skipped (a changed constant shows at its first user); ops whose location is
    ambiguous (not as many in both modules) or new are not compared."""
    fb, fa = before.func(func_name), after.func(func_name)
    if fb is None or fa is None:
        return None
    from ..ir.specialize import is_dynamic, specialize

    if is_dynamic(fa) or is_dynamic(fb):  # compare the funcs specialized to these inputs' sizes, op for op
        shapes = [np.shape(a) for a in arrays]
        (mb, _), (ma, sa) = specialize(before, fb, shapes), specialize(after, fa, shapes)
        mb.funcs[0].name = ma.funcs[0].name = func_name
        found = first_changed_op(mb, ma, func_name, arrays, tol)
        return None if found is None else fa.block.ops[sa.block.ops.index(found)]
    gb, ga = _values_by_location(before, fb, arrays), _values_by_location(after, fa, arrays)
    seen: dict[_Key, int] = {}
    for op in fa.block.ops:
        for i in range(len(op.results)):
            key = _key(op, i)
            if key is None:
                continue
            k = seen[key] = seen.get(key, -1) + 1
            if len(gb.get(key, ())) != len(ga[key]):
                continue
            if compare_arrays(0, "", ga[key][k][1], gb[key][k][1], tol) is not None:
                return op
    return None


_Key = tuple[tuple[str, ...], int, str]


def _key(op: Op, index: int) -> _Key | None:
    if op.name == "const" or not op.loc:
        return None
    return (op.loc, index, str(op.results[index].type))


def _values_by_location(module: Module, func: Func, arrays: list[np.ndarray]
                        ) -> dict[_Key, list[tuple[Op, np.ndarray]]]:
    """Each non-constant top-level op's results keyed by (location, result index, type), in order."""
    env = trace(module, func, arrays)
    out: dict[_Key, list[tuple[Op, np.ndarray]]] = {}
    for op in func.block.ops:
        for i, r in enumerate(op.results):
            key = _key(op, i)
            if key is not None:
                out.setdefault(key, []).append((op, env[id(r)]))
    return out


def describe_op(op: Op) -> str:
    """`'conv2d' at loc("onnx:Conv_0") (m.tsl:12:10)`: the op, its ONNX nodes, where it was parsed."""
    where = f" ({op.pos.file}:{op.pos.line}:{op.pos.col})" if op.pos is not None else ""
    return f"'{op.name}' at {format_loc(op.loc)}{where}"


# --validate-each ---------------------------------------------------------------------------------
class Miscompile(PassCheckFailed):
    """A pass changed the results beyond tolerance (`divergences`), or left IR the reference cannot run
    (`problem`). The pass manager adds the pass and the reproducer."""

    def __init__(self, tol: Tolerance, divergences: list[Divergence], after: Module, func_name: str,
                 replay_flags: str, problem: str = ""):
        super().__init__(problem or divergences[0].describe(tol), replay_flags)
        self.tol, self.divergences, self.after, self.func_name = tol, divergences, after, func_name
        self.problem = problem


class Validator:
    """The reference results of the input module, and the check after each pass (an `after_pass` hook
    of the pass manager). `only_at=N` checks only after the Nth pass that runs (for bisection)."""

    def __init__(self, module: Module, tol: Tolerance, given: Mapping[str, np.ndarray] | None = None,
                 seed: int = 0, replay_flags: str = "", source: str = "inputs"):
        func = select_func(module)
        self.func_name = func.name
        self.tol = tol
        self.arrays = make_inputs(func, given, seed, source)
        self.names = output_names(func)
        self.reference = run_reference(module, func, self.arrays, f"the input (func @{func.name})")
        self.more: list[tuple[list[np.ndarray], list[np.ndarray]]] = []
        """A dynamic func's other sizes (size_cases): (inputs, reference results), checked after the first."""
        for _, shapes in size_cases(func)[1:] if given is None else []:
            arrays = check_inputs(func, random_inputs(func, seed + 1, shapes=shapes), source)
            with contextlib.suppress(DiagnosticError):  # a size the input cannot run is not a check
                self.more.append((arrays, run_func(module, func, arrays)))
        self.replay_flags = replay_flags
        self.only_at: int | None = None
        self.calls = 0

    def __call__(self, p: Pass, module: Module) -> None:
        self.calls += 1
        if self.only_at is None or self.calls == self.only_at:
            problem = self.check(module)
            if problem is not None:
                raise problem

    def check(self, module: Module) -> Miscompile | None:
        """None when `module` still computes the reference results within tolerance."""
        func = module.func(self.func_name)
        if func is None:
            return self._failed(module, f"func @{self.func_name} is gone")
        for arrays, reference in [(self.arrays, self.reference), *self.more]:
            try:
                results = run_func(module, func, arrays)
            except DiagnosticError as e:
                why = e.diagnostics[0].message
                return self._failed(module, f"the numpy reference cannot run the result: {why}")
            bad = compare(self.names, results, reference, self.tol, "the input module")
            if bad:
                if arrays is not self.arrays:  # localizing (first_changed_op) reruns these inputs
                    self.arrays, self.reference = arrays, reference
                return Miscompile(self.tol, bad, module, self.func_name, self.replay_flags)
        return None

    def _failed(self, module: Module, problem: str) -> Miscompile:
        return Miscompile(self.tol, [], module, self.func_name, self.replay_flags, problem)

    def report(self, e: Miscompile, before: Module | None) -> Diagnostic:
        """The error for a miscompile: the pass and its position in the pipeline, the first diverging
        output, where it is computed and (given the module before the pass) the first op whose value
        changed. Positioned at that op, or at the output's defining op."""
        head = f"pass ({e.pass_index}) '{e.pass_spec}'"
        if e.problem:
            return Diagnostic("error", f"{head} broke translation validation: {e.problem}")
        first = e.divergences[0]
        func = e.after.func(e.func_name)
        ret = func.return_op if func is not None else None
        defining = ret.operands[first.index].op if ret is not None else None
        changed = None
        if before is not None:
            with contextlib.suppress(DiagnosticError):  # localizing is a help; the report stands without it
                changed = first_changed_op(before, e.after, e.func_name, self.arrays, self.tol)
        at = changed or defining
        message = f"{head} changed the results: {first.describe(self.tol, 'the input module')}"
        d = Diagnostic("error", message, at.pos if at else None, at.loc if at else ())
        if changed is not None:
            d.note(f"the first value that changed is computed by {describe_op(changed)}")
        if defining is not None:
            d.note(f"output '{first.name}' is computed by {describe_op(defining)}")
        elif ret is not None:
            d.note(f"output '{first.name}' is the func's argument")
        for other in e.divergences[1:]:
            d.note("also: " + other.describe(self.tol, "the input module"))
        return d


# --bisect ----------------------------------------------------------------------------------------
def bisect(total: int, is_bad: Callable[[int], bool]) -> int | None:
    """The first pass application k in 1..total such that running the first k applications is bad,
    assuming running none is good and that once bad, longer prefixes stay bad; None when running all
    `total` is good. Calls `is_bad(total)` first, then binary-searches (about log2(total) calls)."""
    if total == 0 or not is_bad(total):
        return None
    good, bad = 0, total
    while bad - good > 1:
        mid = (good + bad) // 2
        if is_bad(mid):
            bad = mid
        else:
            good = mid
    return bad


@dataclass
class BisectResult:
    index: int  # the first bad pass application, 1-based
    spec: str  # that pass with its options
    failure: Miscompile | CompilerCrash  # from rerunning the first `index` applications; has the reproducer


def bisect_pipeline(load: Callable[[], Module], make_passes: Callable[[], list[Pass]],
                    validator: Validator | None, verify_each: bool, reproducer: str | None,
                    emit: Callable[[str], None]) -> BisectResult | None:
    """Find the first pass application after which the pipeline goes bad, with `--bisect-limit` runs on
    fresh copies of the input (`load()`, `make_passes()`): bad is a crash or invalid IR (CompilerCrash)
    or, given a `validator`, results beyond its tolerance after the last application that ran. Progress
    lines go to `emit`. The first bad application is run once more to write its reproducer (the IR
    before it, headed by it) to `reproducer` (None: a temp file). None when the whole pipeline is good."""

    def attempt(n: int, path: str | None) -> Miscompile | CompilerCrash | None:
        module = load()
        pm = PassManager(make_passes(), Instrumentation(verify_each=verify_each, bisect_limit=n,
                                                        crash_reproducer=path))
        if validator is not None:
            validator.only_at, validator.calls = n, 0
            pm.after_pass = validator
        try:
            pm.run(module)
        except (Miscompile, CompilerCrash) as e:
            return e
        return None

    def is_bad(n: int) -> bool:
        e = attempt(n, os.devnull)  # a reproducer for each try would litter
        emit(f"BISECT: trying limit {n} ... {'good' if e is None else 'bad (' + _why(e) + ')'}\n")
        return e is not None

    passes = make_passes()
    k = bisect(len(passes), is_bad)
    if k is None:
        return None
    failure = attempt(k, reproducer)
    assert failure is not None, "the first bad prefix went good when run again"
    return BisectResult(k, passes[k - 1].spec(), failure)


def _why(e: Miscompile | CompilerCrash) -> str:
    if isinstance(e, CompilerCrash):
        return f"pass '{e.pass_name}' {e.message.splitlines()[0]}"
    return e.problem or e.divergences[0].describe(e.tol, "the input module")
