"""The pass-level property: every registered pass, and every -O pipeline, keeps a valid module valid and
its numbers the same, checked after each pass the way `tessel-opt --validate-each` checks it.

`check_module` parses a module's text once per pass spec (`PASS_SPECS`: each builtin pass with its
defaults, plus option variants) and per pipeline (`PIPELINES`: -O1..-O3 and -O2 with f16 weights), runs
it under the pass manager with the verifier after every pass (`verify_each`) and `debug.validate`'s
`Validator` as the `after_pass` hook (the library side of --validate-each: the numpy reference's results
on seeded random inputs, compared after every pass), then prints the result, parses it back and prints
it again (the two texts must be the same). Test-only plugins (lit_tests/cli/Inputs/*.py) register
through `register_pass`, so only `BUILTIN_PASSES` is read.

A failure is a crash (CompilerCrash), invalid IR after a pass, a diagnostic error from a pass on a
valid module, a miscompile (results beyond the tolerance: `Miscompile`) or a printed result that does
not parse back to itself. Each comes with the reproducer the pass manager writes: the IR before the
failing pass, headed by `// tessel-reproducer: --pass-pipeline='PASS' [--validate-each=... --seed=N]`, so
`tessel-opt --run-reproducer FILE` replays it.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Sequence

from .property import crash_text, diag_text

SEED = 7
"""The seed of the validation inputs (random_inputs: floats in [-1, 1), ints in [0, 4), bools)."""

VARIANTS = ("propagate-layout{layout=nhwc}", "propagate-layout{block=8}", "fuse{recompute=true}",
            "fuse{max-ops=2}", "convert-precision{weights=bf16}",
            "fold-batchnorm{decompose-standalone=false}",
            "merge-sibling-matmuls{column-align=1}", "simplify-broadcasts{min-elements=1}",
            "fold-constants{size-limit=4}", "emulate-f16{types=f16,bf16}", "canonicalize{max-iterations=3}")
"""Option variants run besides each builtin pass's defaults (canonicalize with a limit stops part-way: what
it leaves must still be valid and compute the same)."""

DEFAULT_TOLERANCE = (1e-3, 1e-4)
"""rtol, atol: the --validate-each default."""
LOOSE = {"convert-precision": (2e-2, 2e-2), "emulate-f16": (2e-2, 2e-2), "-O2 f16": (2e-2, 2e-2)}
"""Tolerances of the passes that change precision on purpose: f16/bf16 weights, f16 math in f32; also
of every pass on a module with f16 values, where one rounding is 1e-3 relative and folding a scale into a
weight (fold-batchnorm) rounds differently. A wrong index or op still moves results by their own size."""
QDQ_TOLERANCE = 0.051
"""atol of fold-qdq and the pipelines that run it on a module with `quantize`: the integer product it
makes rounds exactly where the float one rounds near a half step, so a result may move by one step
(module_shape_ops.QDQ_STEP; the maker makes that result an output nothing else reads)."""
QDQ_PASSES = ("fold-qdq", "-O2", "-O3", "-O2 f16")


def tolerance(name: str, text: str) -> tuple[float, float]:
    """(rtol, atol) for pass spec or pipeline `name` on the module `text`."""
    rtol, atol = LOOSE.get(name, LOOSE.get(name.split("{")[0], DEFAULT_TOLERANCE))
    if "f16" in text:  # f16 and bf16
        rtol, atol = max(rtol, 2e-2), max(atol, 2e-2)
    if name in QDQ_PASSES and "quantize" in text:
        atol = max(atol, QDQ_TOLERANCE)
    return rtol, atol


def pass_specs() -> list[str]:
    """Every builtin pass (defaults) and the VARIANTS that parse (an option a pass lost is skipped)."""
    from tessel.passes.manager import BUILTIN_PASSES
    from tessel.passes.pipeline import parse_pipeline

    specs = sorted(BUILTIN_PASSES)
    for v in VARIANTS:
        try:
            parse_pipeline(v)
        except Exception:
            continue
        specs.append(v)
    return specs


def pipelines() -> dict[str, str]:
    from tessel.passes.pipeline import O_LEVELS, level_pipeline

    out = {f"-O{lv}": O_LEVELS[lv] for lv in (1, 2, 3)}
    out["-O2 f16"] = level_pipeline(2, "f16")
    return out


@dataclasses.dataclass
class ModuleFinding:
    spec: str  # the pass spec or pipeline name that failed
    stage: str  # crash | invalid | error | miscompile | roundtrip | input
    message: str
    reproducer: str = ""  # the IR before the failing pass with its replay header (or the module)
    failing_pass: str = ""  # within a pipeline, the pass that failed

    def __str__(self) -> str:
        at = f" (pass {self.failing_pass})" if self.failing_pass and self.failing_pass != self.spec else ""
        return f"[{self.stage} {self.spec}{at}] {self.message}"


@dataclasses.dataclass
class ModuleOutcome:
    ran: list[str] = dataclasses.field(default_factory=list)  # specs that ran without a finding
    changed: list[str] = dataclasses.field(default_factory=list)  # ... and changed the module
    findings: list[ModuleFinding] = dataclasses.field(default_factory=list)
    skipped: str = ""  # why the module could not be checked at all (the reference cannot run it)


def check_module(text: str, names: Sequence[str] | None = None, first_only: bool = False,
                 seed: int = SEED, tol: tuple[float, float] | None = None) -> ModuleOutcome:
    """Run pass specs and pipelines over `text` under verify-each and validation: `names` picks some
    (pass specs, any pipeline text, or the keys of `pipelines()`); default every pass spec and pipeline.
    `seed` and `tol` (rtol, atol; default `tolerance()` of each): the validation's (a replay: the
    reproducer header's)."""
    from tessel.debug.validate import Tolerance, Validator
    from tessel.ir.diagnostics import DiagnosticError
    from tessel.ir.parser import parse_module
    from tessel.ir.printer import to_text

    out = ModuleOutcome()
    named = pipelines()
    todo = [(n, named.get(n, n)) for n in (names if names is not None else pass_specs() + list(named))]
    try:
        original = parse_module(text, "fuzz.tsl", register_source=False)
    except DiagnosticError as e:
        out.findings.append(ModuleFinding("(parse)", "input", diag_text(e), text))
        return out
    before = to_text(original)  # what a pass that changes nothing leaves
    validators = {}
    for name, pipeline in todo:
        t = Tolerance(*(tol or tolerance(name, text)))
        if t not in validators:
            flags = f"--validate-each={t} --seed={seed}"
            try:
                validators[t] = Validator(original, t, None, seed, flags)
            except DiagnosticError as e:  # the reference cannot run the input: nothing to compare
                out.skipped = diag_text(e)
                return out
        finding = run_one(text, before, name, pipeline, validators[t])
        if finding.stage in ("changed", "unchanged"):
            out.ran.append(name)
            if finding.stage == "changed":
                out.changed.append(name)
            continue
        out.findings.append(finding)
        if first_only:
            break
    return out


def run_one(text: str, before: str, name: str, pipeline: str, validator: object) -> ModuleFinding:
    """One pass spec or pipeline over a fresh parse of `text` (`before`: its printed form); a finding, or a
    pseudo-finding of stage `changed` / `unchanged` when it went well."""
    from tessel.debug.validate import Miscompile
    from tessel.ir.diagnostics import DiagnosticError
    from tessel.ir.parser import parse_module
    from tessel.ir.printer import to_text
    from tessel.passes.manager import CompilerCrash, Instrumentation, PassManager
    from tessel.passes.pipeline import parse_pipeline

    module = parse_module(text, "fuzz.tsl", register_source=False)
    with tempfile.TemporaryDirectory(prefix="tessel-fuzz-") as tmp:
        path = os.path.join(tmp, "reproducer.tsl")
        pm = PassManager(parse_pipeline(pipeline), Instrumentation(verify_each=True, crash_reproducer=path))
        validator.calls = 0  # type: ignore[attr-defined]
        pm.after_pass = validator  # type: ignore[assignment]

        def reproducer() -> str:
            try:
                with open(path) as f:
                    return f.read()
            except OSError:
                return text

        try:
            pm.run(module)
        except Miscompile as e:
            repro = reproducer()
            report = _miscompile_text(validator, e, repro)
            return ModuleFinding(name, "miscompile", report, repro, e.pass_spec)
        except CompilerCrash as e:
            stage = "invalid" if "invalid IR" in e.message else "crash"
            return ModuleFinding(name, stage, crash_text(e), reproducer(), e.pass_name)
        except DiagnosticError as e:
            return ModuleFinding(name, "error", diag_text(e), text, pm.ctx.pass_name)
        except Exception as e:  # noqa: BLE001 - anything else out of the manager is a bug too
            return ModuleFinding(name, "crash", crash_text(e), text, pm.ctx.pass_name)
    after = to_text(module)
    try:
        again = to_text(parse_module(after, "after.tsl", register_source=False))
    except DiagnosticError as e:
        return ModuleFinding(name, "roundtrip", f"the result does not parse back: {diag_text(e)}", text)
    if again != after:
        lines, back = after.splitlines(), again.splitlines()
        first = next((i for i, (a, c) in enumerate(zip(lines, back, strict=False)) if a != c),
                     min(len(lines), len(back)))  # else the first line only one of them has
        at = repr(lines[first]) if first < len(lines) else f"printed again it has more: {back[first]!r}"
        return ModuleFinding(name, "roundtrip", f"print -> parse -> print differs at line {first + 1}: {at}",
                             text)
    return ModuleFinding(name, "changed" if after != before else "unchanged", "")


def _miscompile_text(validator: object, e: object, reproducer: str) -> str:
    """The validator's report, localized against the IR before the pass (the reproducer), as
    tessel-opt --validate-each reports it."""
    from tessel.ir.diagnostics import render
    from tessel.ir.parser import parse_module

    try:
        before = parse_module(reproducer, "reproducer.tsl", register_source=False)
    except Exception:  # noqa: BLE001 - the report then names no first changed op
        before = None
    try:
        d = validator.report(e, before)  # type: ignore[attr-defined]
        return render(d).strip()
    except Exception:  # noqa: BLE001 - the report is a help; the failure stands without it
        return str(e)


