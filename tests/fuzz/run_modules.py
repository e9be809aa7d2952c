"""`make fuzz`'s pass-level part: random modules (modules.py) through every pass and -O pipeline under
verify-each and validation (module_check.py), in batches driven by hypothesis like the graphs.

A new failure is shrunk by hypothesis with the property narrowed to the pass or pipeline that failed
(at most `--shrink-seconds`), then saved under the run's folder as `module-N.tsl` (the pass manager's
reproducer: the IR before the failing pass, headed by the pass and the --validate-each flags, so
`tessel-opt --run-reproducer module-N.tsl` replays it), `module-N.input.tsl` (the whole module) and
`module-N.txt` (what failed and how to replay it). Later failures of the same pass and kind (for
crashes and errors, the same first line) count as repeats.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import time
from pathlib import Path
from typing import Any

from tests.fuzz.batch import find_and_shrink
from tests.fuzz.module_check import SEED, ModuleFinding, check_module, pass_specs, pipelines
from tests.fuzz.modules import ModuleCase, modules
from tests.fuzz.saved import Saved, normalize

BATCH = 10


@dataclasses.dataclass
class ModuleStats:
    built: int = 0
    skipped: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    generator_errors: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    per_pass: dict[str, collections.Counter] = dataclasses.field(
        default_factory=lambda: collections.defaultdict(collections.Counter))
    """pass spec or pipeline -> ran (validated after every pass), changed (the module), failed."""
    ops: collections.Counter = dataclasses.field(default_factory=collections.Counter)

    def record(self, case: ModuleCase, out: Any) -> None:
        self.built += 1
        self.ops.update(case.ops)
        if out.skipped:
            self.skipped[out.skipped.splitlines()[0][:150]] += 1
            return
        for name in out.ran:
            self.per_pass[name]["ran"] += 1
        for name in out.changed:
            self.per_pass[name]["changed"] += 1
        for f in out.findings:
            self.per_pass[f.spec]["failed"] += 1


def _key(f: ModuleFinding) -> str:
    return f.stage + ":" + normalize(f.message)


def module_batch(args: argparse.Namespace, run_seed: int, batch_seed: int, deadline: float, stats: Any,
                 findings: Any, progress: Any) -> None:
    """Up to BATCH modules (fewer when the time is nearly up); a new failure is shrunk and saved."""
    mstats: ModuleStats = stats.modules
    per = stats.module_seconds / mstats.built if mstats.built else 2.0
    size = max(1, min(BATCH, int((deadline - time.monotonic()) / max(per, 1e-3))))

    def first(case: ModuleCase) -> tuple[ModuleFinding, ModuleFinding] | None:
        out = check_module(case.text)
        mstats.record(case, out)
        progress.tick(stats)
        new = [f for f in out.findings if not _repeat(findings, f)]
        return (new[0], new[0]) if new else None

    def again(case: ModuleCase, focus: ModuleFinding) -> ModuleFinding | None:
        out = check_module(case.text, [focus.spec], first_only=True)
        return next((f for f in out.findings
                     if f.stage == focus.stage and f.failing_pass == focus.failing_pass), None)

    found = find_and_shrink(modules(max_steps=args.module_steps), size, batch_seed, deadline,
                            args.shrink_seconds, first, again, mstats.generator_errors)
    if found is not None:
        saved = save_module(findings, found.case, found.kept, run_seed, batch_seed)
        progress.note(f"new failure saved to {saved.path}: {saved.summary}")


def _repeat(findings: Any, f: ModuleFinding) -> bool:
    for s in findings.stats.saved:
        if s.kind == "module" and s.target == (f.failing_pass or f.spec) and s.key == _key(f):
            s.repeats += 1
            return True
    return False


def save_module(findings: Any, case: ModuleCase, f: ModuleFinding, run_seed: int, batch_seed: int) -> Any:
    out_dir: Path = findings.dir
    out_dir.mkdir(parents=True, exist_ok=True)
    n = sum(s.kind == "module" for s in findings.stats.saved) + 1
    base = out_dir / f"module-{n}"
    repro = f.reproducer
    if not repro.startswith("// tessel-reproducer:"):
        pipeline = pipelines().get(f.spec, f.spec)
        repro = f"// tessel-reproducer: --pass-pipeline='{pipeline}'\n{repro}"
    Path(f"{base}.tsl").write_text(repro)
    Path(f"{base}.input.tsl").write_text(case.text)
    lines = [f"tessel fuzz failure: {f.stage} in {f.spec}"
             + (f" (pass {f.failing_pass})" if f.failing_pass and f.failing_pass != f.spec else "")
             + f" (run seed {run_seed}, batch seed {batch_seed})", f"ops: {', '.join(case.ops)}", "",
             f.message, "",
             f"replay: .venv/bin/tessel-opt --run-reproducer {base}.tsl",
             f"        .venv/bin/python -m tests.fuzz.run --replay {base}.input.tsl   (every pass and "
             "pipeline)",
             "", "the module:", case.text]
    Path(f"{base}.txt").write_text("\n".join(lines) + "\n")
    summary = f"{f.stage} in {f.spec}: {f.message.strip().splitlines()[0][:200]}"
    saved = Saved("module", Path(f"{base}.tsl"), f.stage, f.failing_pass or f.spec, _key(f),
                  frozenset(case.ops), summary)
    findings.stats.saved.append(saved)
    return saved


def module_report(m: ModuleStats) -> list[str]:
    lines = [f"modules built: {m.built} ({sum(m.ops.values())} ops of {len(m.ops)} kinds); skipped "
             f"{sum(m.skipped.values())} (the reference cannot run them)"]
    for why, n in m.skipped.most_common(3):
        lines.append(f"  skipped {n}: {why}")
    for why, n in m.generator_errors.most_common():
        lines.append(f"  generator error {n}: {why}")
    names = pass_specs() + list(pipelines())
    width = max(len(n) for n in names)
    lines.append(f"{'pass / pipeline':<{width}}  {'validated':>9}  {'changed':>7}  {'failed':>6}")
    for name in names:
        c = m.per_pass.get(name, collections.Counter())
        lines.append(f"{name:<{width}}  {c['ran']:9d}  {c['changed']:7d}  {c['failed']:6d}")
    return lines


def replay_module(path: Path) -> int:
    """Check a saved module: a reproducer (checked as its header says: the pipeline, and the
    --validate-each tolerance and --seed it failed under) or a whole module (every pass and pipeline)."""
    from tessel.cli.validation import reproducer_header
    from tessel.debug.validate import Tolerance

    text = path.read_text()
    if text.startswith("// tessel-reproducer:"):
        flags = reproducer_header(text.encode(), str(path))
        tol = Tolerance.parse(flags["--validate-each"]) if "--validate-each" in flags else None
        out = check_module(text, [flags["--pass-pipeline"]], seed=int(flags.get("--seed", SEED)),
                           tol=(tol.rtol, tol.atol) if tol is not None else None)
    else:
        out = check_module(text)
    print(f"{path}: {len(out.ran)} passes and pipelines validated, {len(out.changed)} changed it"
          + (f"; skipped: {out.skipped}" if out.skipped else ""))
    for f in out.findings:
        print(str(f))
    return 1 if out.findings else 0
