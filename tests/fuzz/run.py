"""`make fuzz`: the graph property and the parser fuzzer for a time budget, with fresh seeds.

    .venv/bin/python -m tests.fuzz.run --seconds 600             # FUZZ_SECONDS=600 make fuzz
    .venv/bin/python -m tests.fuzz.run --seed 1234 --seconds 60  # replay a run (same code, same seed)
    .venv/bin/python -m tests.fuzz.run --replay fuzz-results/<run>/graph-1.onnx

Graphs come from graphs.py's strategy, in batches driven by hypothesis with seeds derived from the run's
seed (printed first, so a run can be replayed). Each graph is checked by property.py's `check_graph` at
every level on every target. A new failure is shrunk by hypothesis (the property narrowed to the level
and target that failed, at most `--shrink-seconds`) and saved under `--out` as `graph-N.onnx` (the
model), `graph-N.npz` (its inputs) and `graph-N.txt` (what failed, the replay command and the graph in
ONNX's text form, ready to paste into tests/fuzz/test_regressions.py). Later failures that look like a
saved one (same stage and target, and for mismatches a superset of its ops) are counted as repeats.
`--parser-share` of the time goes to mutated `.tsl` texts (mutate.py); a parser failure is shrunk by
deleting lines and characters and saved as `parser-N.tsl` + `.txt`. `--module-share` goes to random
modules run through every pass and -O pipeline under verify-each and validation (run_modules.py; saved
as `module-N.tsl`, a `tessel-opt --run-reproducer` reproducer, with `.input.tsl` and `.txt`).

At the end it prints how many graphs it generated, imported, compiled and compared per level and
target, how many were discarded and why, the same per generator, the modules validated, changed and
failed per pass and pipeline, the parser texts, and every failure. Exit status 1 when it found a new
failure.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import collections  # noqa: E402
import dataclasses  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script: `python tests/fuzz/run.py`
    sys.path.insert(0, str(ROOT))

from tests.fuzz.batch import find_and_shrink  # noqa: E402
from tests.fuzz.graphs import GraphCase, default_feeds, graphs  # noqa: E402
from tests.fuzz.mutate import check_parse, corpus, mutate  # noqa: E402
from tests.fuzz.property import (  # noqa: E402
    DYNAMIC,
    LEVELS,
    TARGETS,
    Finding,
    Outcome,
    check_graph,
    opencl_device,
)
from tests.fuzz.reduce_graph import reduce_case  # noqa: E402
from tests.fuzz.run_modules import ModuleStats, module_batch, module_report, replay_module  # noqa: E402
from tests.fuzz.saved import Saved, normalize  # noqa: E402

BATCH = 20


@dataclasses.dataclass
class Stats:
    generated: int = 0
    imported: int = 0
    generator_errors: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    discarded: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    compiled: collections.Counter = dataclasses.field(default_factory=collections.Counter)  # level
    compared: collections.Counter = dataclasses.field(default_factory=collections.Counter)  # (level, target)
    failed: collections.Counter = dataclasses.field(default_factory=collections.Counter)  # (level, target)
    skipped: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    mutants: int = 0
    accepted: int = 0
    parser_seconds: float = 0.0
    graph_seconds: float = 0.0
    module_seconds: float = 0.0
    saved: list[Saved] = dataclasses.field(default_factory=list)
    per_generator: dict[str, collections.Counter] = dataclasses.field(
        default_factory=lambda: collections.defaultdict(collections.Counter))
    """generator -> counts of the graphs it helped make: generated, discarded, compiled (levels), compared
    (level x target matches), failed."""
    modules: ModuleStats = dataclasses.field(default_factory=ModuleStats)

    def record(self, out: Outcome, generators: Sequence[str] = ()) -> None:
        self.generated += 1
        for g in generators:
            c = self.per_generator[g]
            c["generated"] += 1
            c["discarded"] += out.status == "discarded"
            c["compiled"] += len(out.compiled)
            c["compared"] += len(out.compared) + len(out.dynamic)
            c["failed"] += bool(out.findings)
        if out.status == "discarded":
            why = re.sub(r"Name:'[^']*' |\[ONNXRuntimeError\] : \d+ : |Non-zero status code returned ", "",
                         out.reason)
            self.discarded[why[:200]] += 1
            return
        self.imported += out.imported
        self.compiled.update(out.compiled)
        self.compared.update(out.compared + out.dynamic)
        self.skipped.update(out.skipped)
        for f in out.findings:
            self.failed[(f.level, f.target)] += 1


class Findings:
    """Saved failures, and whether a new one repeats one of them."""

    def __init__(self, out_dir: Path, stats: Stats):
        self.dir = out_dir
        self.stats = stats

    def known(self, f: Finding, ops: set[str]) -> Saved | None:
        for s in self.stats.saved:
            if s.kind != "graph" or s.stage != f.stage or s.target != f.target:
                continue
            if (s.ops <= ops) if f.stage == "mismatch" else s.key == normalize(f.message):
                return s
        return None

    def save_graph(self, case: GraphCase, out: Outcome, run_seed: int, batch_seed: int) -> Saved:
        self.dir.mkdir(parents=True, exist_ok=True)
        n = sum(s.kind == "graph" for s in self.stats.saved) + 1
        base = self.dir / f"graph-{n}"
        onnx.save(case.model, f"{base}.onnx")
        np.savez(f"{base}.npz", **case.feeds)  # type: ignore[arg-type]
        f = out.findings[0]
        lines = [f"tessel fuzz failure: {f.stage} at {f.where()} (run seed {run_seed}, batch seed "
                 f"{batch_seed})",
                 f"ops: {', '.join(case.ops)}; opset {case.opset}; inputs "
                 + ", ".join(f"{k}: {list(v.shape)}" for k, v in case.feeds.items()), "",
                 *[str(g) for g in out.findings], "",
                 f"replay: .venv/bin/python -m tests.fuzz.run --replay {base}.onnx", "",
                 "the graph (onnx.parser.parse_model reads this back; paste it into test_regressions.py):",
                 onnx.printer.to_text(case.model)]
        Path(f"{base}.txt").write_text("\n".join(lines) + "\n")
        ops = frozenset(case.ops) - {"Constant"}
        saved = Saved("graph", Path(f"{base}.onnx"), f.stage, f.target, normalize(f.message), ops,
                      f"{f.stage} at {f.where()}: {f.message.splitlines()[0][:200]} [{', '.join(case.ops)}]")
        self.stats.saved.append(saved)
        return saved

    def save_parser(self, data: bytes, problem: str) -> Saved:
        self.dir.mkdir(parents=True, exist_ok=True)
        n = sum(s.kind == "parser" for s in self.stats.saved) + 1
        base = self.dir / f"parser-{n}"
        Path(f"{base}.tsl").write_bytes(data)
        Path(f"{base}.txt").write_text(f"tessel fuzz parser failure: {problem}\n\nreplay: "
                                       f".venv/bin/tessel-opt --pass-pipeline= {base}.tsl\n")
        saved = Saved("parser", Path(f"{base}.tsl"), "parse", None, normalize(problem), frozenset(),
                      problem.splitlines()[0][:200])
        self.stats.saved.append(saved)
        return saved


# graphs ------------------------------------------------------------------------------------------------
def graph_batch(args: argparse.Namespace, run_seed: int, batch_seed: int, deadline: float,
                stats: Stats, findings: Findings, progress: Progress) -> None:
    per_graph = stats.graph_seconds / stats.generated if stats.generated else 1.0
    size = max(1, min(BATCH, int((deadline - time.monotonic()) / max(per_graph, 1e-3))))

    def first(case: GraphCase) -> tuple[Finding, Outcome] | None:
        out = check_graph(case, args.levels, args.targets)
        stats.record(out, case.generators)
        progress.tick(stats)
        new = []
        for f in out.findings:
            s = findings.known(f, set(case.ops))
            if s is None:
                new.append(f)
            else:
                s.repeats += 1
        return (new[0], out) if new else None

    def again(case: GraphCase, focus: Finding) -> Outcome | None:
        levels = [focus.level if focus.level is not None else 0]
        out = check_graph(case, levels, [focus.target.removesuffix(DYNAMIC)] if focus.target else [],
                          first_only=True)
        return out if any(f.stage == focus.stage for f in out.findings) else None

    found = find_and_shrink(graphs(max_steps=args.max_steps), size, batch_seed, deadline, args.shrink_seconds,
                            first, again, stats.generator_errors)
    if found is None:
        return

    def still_fails(c: GraphCase) -> bool:  # reduce_graph's property: found keeps the smallest failure
        o = again(c, found.focus)
        if o is not None:
            found.case, found.kept = c, o
        return o is not None

    left = args.shrink_seconds - (time.monotonic() - found.since)
    reduce_case(found.case, still_fails, seconds=max(left, 10.0))
    saved = findings.save_graph(found.case, found.kept, run_seed, batch_seed)
    progress.note(f"new failure saved to {saved.path}: {saved.summary}")


# the parser ----------------------------------------------------------------------------------------------
def parser_round(rnd: random.Random, seconds: float, stats: Stats, findings: Findings,
                 progress: Progress) -> None:
    texts = corpus()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        data = mutate(rnd.choice(texts), rnd, rnd.choice([1, 1, 2, 3, 5]))
        stats.mutants += 1
        problem = check_parse(data)
        if problem is None:
            continue
        key = normalize(problem)
        old = next((s for s in stats.saved if s.kind == "parser" and s.key == key), None)
        if old is not None:
            old.repeats += 1
            continue
        small = shrink_text(data, lambda d, k=key: (p := check_parse(d)) is not None and normalize(p) == k)
        saved = findings.save_parser(small, check_parse(small) or problem)
        progress.note(f"new parser failure saved to {saved.path}: {saved.summary}")


def shrink_text(data: bytes, bad: object, seconds: float = 20.0) -> bytes:
    """Delete lines, then runs of characters, while `bad(data)` stays true (ddmin-like, time-bounded)."""
    assert callable(bad)
    end = time.monotonic() + seconds
    for sep in (b"\n", None):
        size = max(len(data.split(b"\n")) // 2, 1) if sep else max(len(data) // 2, 1)
        while size >= 1 and time.monotonic() < end:
            parts = data.split(b"\n") if sep else [bytes([c]) for c in data]
            i, changed = 0, False
            while i < len(parts) and time.monotonic() < end:
                cand = (sep or b"").join(parts[:i] + parts[i + size:])
                if bad(cand):
                    parts = parts[:i] + parts[i + size:]
                    data, changed = cand, True
                else:
                    i += size
            if not changed:
                size //= 2
    return data


# reporting -----------------------------------------------------------------------------------------------
class Progress:
    """One status line: rewritten in place on a terminal, printed every 30 s otherwise."""

    def __init__(self, budget: float, start: float):
        self.budget, self.start = budget, start
        self.tty = sys.stderr.isatty()
        self.last = 0.0

    def line(self, stats: Stats) -> str:
        compared = sum(stats.compared.values())
        new = len(stats.saved)
        repeats = sum(s.repeats for s in stats.saved)
        return (f"[{time.monotonic() - self.start:4.0f}/{self.budget:.0f} s] graphs {stats.generated} "
                f"(discarded {sum(stats.discarded.values())}, comparisons {compared}) | modules "
                f"{stats.modules.built} | parser mutants {stats.mutants} | failures {new} new, {repeats} "
                f"repeats")

    def tick(self, stats: Stats, force: bool = False) -> None:
        now = time.monotonic()
        if self.tty and (force or now - self.last > 0.5):
            sys.stderr.write("\r" + self.line(stats) + "\x1b[K")
            sys.stderr.flush()
            self.last = now
        elif not self.tty and now - self.last > 30:
            sys.stderr.write(self.line(stats) + "\n")
            sys.stderr.flush()
            self.last = now

    def note(self, text: str) -> None:
        sys.stderr.write(("\r\x1b[K" if self.tty else "") + text + "\n")
        sys.stderr.flush()


def report(stats: Stats, args: argparse.Namespace, seed: int, elapsed: float, out_dir: Path) -> str:
    lines = [f"tessel fuzz: seed {seed}, {elapsed:.0f} s (graphs {stats.graph_seconds:.0f} s, modules "
             f"{stats.module_seconds:.0f} s, parser {stats.parser_seconds:.0f} s); replay with --seed {seed}",
             ""]
    n_disc = sum(stats.discarded.values())
    lines.append(f"graphs generated: {stats.generated}; discarded {n_disc} (the oracle could not judge "
                 f"them); imported {stats.imported} of the {stats.generated - n_disc} left")
    for why, n in stats.discarded.most_common():
        lines.append(f"  discarded {n:5d}: {why}")
    for why, n in stats.generator_errors.most_common():
        lines.append(f"  generator error {n}: {why}")
    for why, n in stats.skipped.most_common(3):
        lines.append(f"  skipped {n}: {why}")
    columns = [*args.targets, *(t + DYNAMIC for t in args.targets)]  # +dyn: imported with symbolic dims
    lines += ["", "level  compiled  " + "  ".join(f"{t:>18}" for t in columns)]
    for lv in args.levels:
        cells = [f"{stats.compared[(lv, t)]:6d} ok {stats.failed[(lv, t)]:3d} failed" for t in columns]
        lines.append(f"-O{lv}    {stats.compiled[lv]:8d}  " + "  ".join(f"{c:>18}" for c in cells))
    lines.append(f"comparisons with onnxruntime that matched: {sum(stats.compared.values())}")
    lines += ["", "per generator: graphs it helped make, discarded, levels compiled, (level, target) "
              "comparisons matched, failed"]
    lines.append(f"{'generator':<18} {'graphs':>7} {'discarded':>9} {'compiled':>8} {'compared':>8} "
                 f"{'failed':>6}")
    for name in sorted(stats.per_generator, key=lambda n: (-stats.per_generator[n]["generated"], n)):
        c = stats.per_generator[name]
        lines.append(f"{name:<18} {c['generated']:7d} {c['discarded']:9d} {c['compiled']:8d} "
                     f"{c['compared']:8d} {c['failed']:6d}")
    lines += ["", *module_report(stats.modules)]
    lines += ["", f"parser: {stats.mutants} mutated .tsl texts"]
    graph_saved = [s for s in stats.saved if s.kind == "graph"]
    module_saved = [s for s in stats.saved if s.kind == "module"]
    parser_saved = [s for s in stats.saved if s.kind == "parser"]
    lines += ["", f"failures: {len(graph_saved)} graph, {len(module_saved)} module, {len(parser_saved)} "
              "parser"
              + (f" (saved under {out_dir})" if stats.saved else "")]
    for s in stats.saved:
        lines.append(f"  {s.path.name}: {s.summary} (+{s.repeats} repeats)")
    return "\n".join(lines)


def replay(path: Path, args: argparse.Namespace) -> int:
    if path.suffix == ".tsl":
        return replay_module(path)
    model = onnx.load(str(path))
    npz = path.with_suffix(".npz")
    inits = {i.name for i in model.graph.initializer}
    names = [vi.name for vi in model.graph.input if vi.name not in inits]
    if npz.exists():
        with np.load(npz) as z:
            feeds = {k: z[k] for k in names}
    else:
        feeds = default_feeds(model)
    case = GraphCase(model, feeds, [n.op_type for n in model.graph.node])
    out = check_graph(case, args.levels, args.targets)
    print(f"{path}: {out.status}{' (' + out.reason + ')' if out.reason else ''}; matched "
          + ", ".join(f"-O{lv} {t}" for lv, t in out.compared + out.dynamic))
    for f in out.findings:
        print(str(f))
    return 1 if out.findings else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=float(os.environ.get("FUZZ_SECONDS", 300)),
                    help="time budget (default $FUZZ_SECONDS or 300)")
    ap.add_argument("--seed", type=int, default=None, help="the run's seed (default: random, printed)")
    ap.add_argument("--out", type=Path, default=ROOT / "fuzz-results", help="where failures go")
    ap.add_argument("--targets", default=",".join(TARGETS), help="comma list of numpy, opencl")
    ap.add_argument("--levels", default=",".join(map(str, LEVELS)), help="comma list of -O levels")
    ap.add_argument("--parser-share", type=float, default=0.1, help="share of the time for the parser")
    ap.add_argument("--module-share", type=float, default=0.2,
                    help="share of the time for random modules through every pass (module_check.py)")
    ap.add_argument("--module-steps", type=int, default=12, help="maker steps per module")
    ap.add_argument("--max-steps", type=int, default=12, help="generator steps per graph")
    ap.add_argument("--shrink-seconds", type=float, default=90.0, help="time to shrink one failure")
    ap.add_argument("--replay", type=Path, help="check one saved graph (.onnx, inputs from its .npz) or "
                    "module (.tsl: a reproducer's pipeline with the tolerance and seed of its header, else "
                    "every pass and pipeline)")
    args = ap.parse_args(argv)
    args.targets = [t for t in args.targets.split(",") if t]
    args.levels = [int(x) for x in args.levels.split(",") if x]
    if "opencl" in args.targets and isinstance(opencl_device(), str):
        print(f"note: no OpenCL ({opencl_device()}); fuzzing numpy only", file=sys.stderr)
        args.targets = [t for t in args.targets if t != "opencl"]
    if args.replay:
        return replay(args.replay, args)

    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    start = time.monotonic()
    out_dir = args.out / f"{time.strftime('%Y%m%d-%H%M%S')}-seed{seed}"
    print(f"tessel fuzz: seed {seed}, {args.seconds:.0f} s, levels {args.levels}, targets {args.targets} "
          f"(replay with --seed {seed})", file=sys.stderr)
    stats = Stats()
    findings = Findings(out_dir, stats)
    progress = Progress(args.seconds, start)
    deadline = start + args.seconds
    rnd = random.Random(seed)
    corpus()  # build the parser corpus before the clock matters
    batch = module_batches = 0
    while time.monotonic() < deadline:
        t0 = time.monotonic()
        slice_end = min(deadline, t0 + max(15.0, args.seconds / 12))  # the other parts get their turn
        graph_batch(args, seed, (seed * 1_000_003 + batch) % 2**32, slice_end, stats, findings, progress)
        spent = time.monotonic() - t0
        stats.graph_seconds += spent
        p_share, m_share = (min(max(x, 0.0), 0.95) for x in (args.parser_share, args.module_share))
        g_share = max(1 - p_share - m_share, 0.05)
        parser_time = min(spent * p_share / g_share, max(deadline - time.monotonic(), 0.0))
        t1 = time.monotonic()
        parser_round(rnd, parser_time, stats, findings, progress)
        stats.parser_seconds += time.monotonic() - t1
        while (m_share > 0 and time.monotonic() < deadline
               and stats.module_seconds < (stats.graph_seconds / g_share) * m_share):
            t2 = time.monotonic()
            module_batch(args, seed, (seed * 1_000_033 + module_batches) % 2**32, deadline, stats, findings,
                         progress)  # each batch its own seed: a slice may run several
            module_batches += 1
            stats.module_seconds += time.monotonic() - t2
        batch += 1
        progress.tick(stats, force=True)
    if progress.tty:
        sys.stderr.write("\n")
    print(report(stats, args, seed, time.monotonic() - start, out_dir))
    return 1 if stats.saved else 0


if __name__ == "__main__":
    sys.exit(main())
