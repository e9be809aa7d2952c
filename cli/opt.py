"""tessel-opt: run a pass pipeline over a .tsl module, like mlir-opt."""

from __future__ import annotations

import difflib
import io
import os
import sys
import time
from typing import Any

import click

from ..ir.core import Module
from ..ir.diagnostics import SOURCES, Diagnostic, DiagnosticError
from ..ir.parser import parse_module
from ..ir.printer import print_module
from ..ir.verifier import verify
from . import expected_diagnostics
from .common import (
    atomic_output,
    debug_option,
    determinism_option,
    fail,
    handle_errors,
    print_diagnostics,
    read_input,
    split_chunks,
    version_option,
    weights_options,
)
from .validation import (
    DEFAULT_TOLERANCE,
    Checks,
    OptionalValueCommand,
    check_validation_usage,
    replay_checks,
    report_miscompile,
    reproducer_header,
    run_bisect,
    tolerance_option,
)

EPILOG = """\b
Examples:
  tessel-opt -O1 model.tsl -o model.opt.tsl
  tessel-opt --pass-pipeline='canonicalize,fold-constants{size-limit=1024},cse' m.tsl
  tessel-opt -O1 --time-passes m.tsl | tessel-run --random-inputs
  tessel-opt --split-input-file --verify-diagnostics invalid.tsl
  tessel-opt -O2 --validate-each m.tsl -o m.opt.tsl
  tessel-opt -O2 --bisect m.tsl
"""


def _csv(values: tuple[str, ...]) -> set[str]:
    return {p.strip() for v in values for p in v.split(",") if p.strip()}


@click.command(
    cls=OptionalValueCommand, optional_values={"--validate-each": DEFAULT_TOLERANCE},
    epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100}
)
@version_option
@click.argument("input", required=False, default="-", metavar="[INPUT]")
@click.option("-o", "--output", metavar="FILE", help="Write the result here (atomically) instead of stdout.")
@click.option("-O", "opt_level", type=click.IntRange(0, 3), metavar="N",
              help="Run the named pipeline -O0..-O3 (see --print-pipeline).")
@click.option("--weight-precision", type=click.Choice(["f32", "f16", "bf16"]), default=None,
              help="With -O: store matmul and gemm weights in this precision (convert-precision before "
                   "fuse).")
@click.option("--pass-pipeline", metavar="PIPELINE",
              help="Passes to run, e.g. 'canonicalize,fold-constants{size-limit=1024},cse'.")
@click.option(
    "--print-pipeline", is_flag=True, help="Print the pipeline that would run (or every -O level) and exit."
)
@click.option("--list-passes", is_flag=True, help="List the registered passes with one line each, and exit.")
@click.option("--load-pass-plugin", multiple=True, metavar="FILE.py",
              help="Load a Python file that registers passes with tessel.passes.manager.register_pass.")
@click.option("--verify-each/--no-verify-each", default=True, show_default=True,
              help="Verify the IR after every pass; a pass that breaks it is an internal error.")
@click.option(
    "--print-ir-before", multiple=True, metavar="PASS", help="Print the IR before PASS (repeatable, or a,b)."
)
@click.option(
    "--print-ir-after", multiple=True, metavar="PASS", help="Print the IR after PASS (repeatable, or a,b)."
)
@click.option("--print-ir-before-all", is_flag=True, help="Print the IR before every pass.")
@click.option("--print-ir-after-all", is_flag=True, help="Print the IR after every pass.")
@click.option("--print-ir-after-change", is_flag=True, help="Print the IR after each pass that changed it.")
@click.option("--print-ir-tree-dir", metavar="DIR",
              help="Write the --print-ir-* dumps as files under DIR/<module>/NN_<pass>_<when>.tsl instead.")
@click.option("--time-passes", is_flag=True, help="Report the wall time of each pass on stderr.")
@click.option("--pass-statistics", is_flag=True, help="Report each pass's statistics on stderr.")
@click.option("--bisect-limit", type=click.IntRange(min=0), metavar="N",
              help="Run only the first N pass applications, printing which ran and which were skipped.")
@click.option("--crash-reproducer", metavar="FILE",
              help="Where a crashing pass, or one --validate-each or --bisect catches, writes its reproducer "
                   "(default: a temp file).")
@click.option("--run-reproducer", is_flag=True,
              help="Run the pipeline recorded in the input reproducer's header (and its --validate-each).")
@click.option("--validate-each", metavar="[=RTOL,ATOL]", callback=tolerance_option,
              help="Run the numpy reference on the input and after every pass; stop at the first pass whose "
                   "results move beyond tolerance (default 1e-3,1e-4): name it, the output and the op, "
                   "write a reproducer, exit status 1.")
@click.option("--inputs", metavar="FILE.npz",
              help="Inputs of --validate-each and --bisect, keyed by argument name (default: random ones).")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the random inputs of --validate-each and --bisect (floats in [-1, 1)).")
@click.option("--bisect", is_flag=True,
              help="Find the first bad pass application by binary search over --bisect-limit, print it and "
                   "write its reproducer (exit status 1; 0 when none is bad).")
@click.option("--bisect-check", type=click.Choice(["numeric", "crash"]), default="numeric", show_default=True,
              help="What --bisect calls bad: results beyond the --validate-each tolerance (numeric; a crash "
                   "counts too), or only a crash or invalid IR (crash).")
@click.option("--remarks", "remark_cats", multiple=True, metavar="CATEGORIES",
              help="Print a remark for each transformation of these categories (fusion, layout, algebraic, "
                   "pattern, memory, quantization, or all; comma-separated or repeated) on stderr.")
@click.option("--remarks-missed", is_flag=True,
              help="Also print each refusal with its reason code (of the --remarks categories, or of all).")
@click.option("--remarks-format", type=click.Choice(["text", "jsonl"]), default="text", show_default=True,
              help="Remarks as 'file:line:col: remark: [pass] kind reason: message (at locs)' lines or as "
                   "one JSON object per line.")
@click.option("--print-analysis", "analyses", multiple=True, metavar="NAME",
              type=click.Choice(["traffic", "cost", "liveness"]),
              help="After the pipeline, print an analysis of the result on stdout (instead of the IR): "
                   "traffic (bytes read and written per kernel), cost (FLOPs and intensity per kernel), "
                   "liveness (the buffer plan and its peak). Repeatable.")
@click.option("--emit-dot", "emit_dot", metavar="FILE.dot",
              help="Also write the result as a Graphviz graph: ops as nodes, kernel regions as clusters, "
                   "ONNX node names as tooltips ('-' for stdout instead of the IR).")
@click.option(
    "--split-input-file", is_flag=True, help="Treat '// -----' separated chunks as separate modules."
)
@click.option("--verify-diagnostics", is_flag=True,
              help="Check diagnostics against '// expected-error {{...}}' comments instead of printing them.")
@weights_options
@debug_option
@handle_errors
@determinism_option
def main(input: str, output: str | None, opt_level: int | None, weight_precision: str | None,
         pass_pipeline: str | None,
         print_pipeline: bool, list_passes: bool, load_pass_plugin: tuple[str, ...], verify_each: bool,
         print_ir_before: tuple[str, ...], print_ir_after: tuple[str, ...], print_ir_before_all: bool,
         print_ir_after_all: bool, print_ir_after_change: bool, print_ir_tree_dir: str | None,
         time_passes: bool, pass_statistics: bool, bisect_limit: int | None, crash_reproducer: str | None,
         run_reproducer: bool, validate_each: Any, inputs: str | None, seed: int, bisect: bool,
         bisect_check: str, remark_cats: tuple[str, ...], remarks_missed: bool, remarks_format: str,
         analyses: tuple[str, ...], emit_dot: str | None, split_input_file: bool, verify_diagnostics: bool,
         elide_resources: bool, external_weights: str | None, debug: bool) -> None:
    """Run a pass pipeline over a tessel IR module.

    Reads INPUT (a .tsl file, or stdin when INPUT is '-' or missing), parses and verifies it, runs the
    passes chosen with -O or --pass-pipeline (none by default: a round trip), and prints the result.
    Exit status: 0 ok, 1 bad input (file:line:col diagnostics on stderr), 2 usage, 3 internal error.
    """
    from ..debug.validate import Miscompile
    from ..passes.manager import Instrumentation, PassManager, get_pass, load_plugin, pass_names
    from ..passes.pipeline import O_LEVELS, level_pipeline, parse_pipeline, pipeline_spec
    from ..passes.remarks import CATEGORIES, RemarkFilter

    cats = _csv(remark_cats)
    unknown = sorted(cats - set(CATEGORIES) - {"all"})
    if unknown:
        choices = ", ".join(CATEGORIES)
        raise fail(f"--remarks: unknown category '{unknown[0]}' (choose from {choices}, all)", 2)
    remark_filter = RemarkFilter(frozenset(cats), remarks_missed, remarks_format)

    for plugin in load_pass_plugin:
        load_plugin(plugin)
    if list_passes:
        names = pass_names()
        width = max(len(n) for n in names)
        for n in names:
            cls = get_pass(n)
            sys.stdout.write(f"  {n:<{width}}  {cls.summary() if cls else ''}\n")
        return
    if opt_level is not None and pass_pipeline:
        raise fail("give either -O or --pass-pipeline, not both", 2)
    if run_reproducer and (opt_level is not None or pass_pipeline is not None):
        raise fail("--run-reproducer takes its pipeline from the reproducer; "
                   "give no -O or --pass-pipeline", 2)

    data, filename = b"", input
    if run_reproducer:
        data, filename = read_input(input)
        header = reproducer_header(data, filename)
        pass_pipeline = header["--pass-pipeline"]
        validate_each, seed, inputs = replay_checks(header, filename, validate_each, seed, inputs)
    check_validation_usage(validate_each, inputs, bisect, bisect_limit, split_input_file, verify_diagnostics)
    if weight_precision is not None and opt_level is None:
        raise fail("--weight-precision goes with -O (in a --pass-pipeline, name convert-precision)", 2)
    pipeline_text = (level_pipeline(opt_level, weight_precision or "f32") if opt_level is not None
                     else (pass_pipeline or ""))
    parse_pipeline(pipeline_text)  # report a bad pipeline before reading any IR (or waiting on stdin)
    for flag, names in (("--print-ir-before", print_ir_before), ("--print-ir-after", print_ir_after)):
        for name in sorted(_csv(names)):
            if get_pass(name) is None:
                close = difflib.get_close_matches(name, pass_names(), n=1)
                hint = f"; did you mean '{close[0]}'?" if close else "; see --list-passes"
                raise fail(f"{flag}: unknown pass '{name}'{hint}")

    if print_pipeline:
        if opt_level is None and pass_pipeline is None:
            for level, text in O_LEVELS.items():
                spec = pipeline_spec(parse_pipeline(text))
                sys.stdout.write(f"-O{level}: {spec or '(no passes)'}\n")
        else:
            sys.stdout.write(pipeline_spec(parse_pipeline(pipeline_text)) + "\n")
        return
    if not run_reproducer:
        data, filename = read_input(input)
    checks = Checks(validate_each, inputs, seed)
    if bisect:
        run_bisect(data, filename, pipeline_text, bisect_check, verify_each, checks, crash_reproducer)
        return

    inst = Instrumentation(
        verify_each=verify_each, print_before=_csv(print_ir_before), print_after=_csv(print_ir_after),
        print_before_all=print_ir_before_all, print_after_all=print_ir_after_all,
        print_after_change=print_ir_after_change, tree_dir=print_ir_tree_dir, time_passes=time_passes,
        statistics=pass_statistics, bisect_limit=bisect_limit, crash_reproducer=crash_reproducer)

    def emit(s: str) -> None:
        sys.stderr.write(s)

    text = data.decode("utf-8", "replace")
    chunks = split_chunks(text) if split_input_file else [(text, 0)]
    SOURCES.add(filename, text)
    failed = False
    results: list[Module | None] = []
    ledgers: list[str] = []
    for chunk, line_offset in chunks:
        produced: list[Diagnostic] = []
        module = None
        try:
            t0 = time.perf_counter()
            module = parse_module(chunk.encode("utf-8") if split_input_file else data, filename,
                                  line_offset=line_offset, register_source=False)
            t1 = time.perf_counter()
            errors = verify(module)
            if errors:
                raise DiagnosticError(errors)
            pm = PassManager(parse_pipeline(pipeline_text), inst, emit)
            ledger: list[tuple[str, int]] = []
            if "traffic" in analyses:
                from ..passes.analysis import total_traffic

                ledger.append(("(input)", total_traffic(module)))
                pm.after_pass = lambda p, m, ledger=ledger: ledger.append((p.spec(), total_traffic(m)))
            validator = checks.add_to(pm, module) if validate_each is not None else None
            pm.ctx.remarks_as_diagnostics = verify_diagnostics
            if remark_filter.active:
                pm.ctx.on_remark = lambda r: emit(remark_filter.render(r) + "\n") if remark_filter.wants(
                    r) else None
            pm.timings += [("(parse)", t1 - t0), ("(verify input)", time.perf_counter() - t1)]
            try:
                pm.run(module)
                if len(ledger) > 1:
                    ledgers.append(_ledger_text(module, ledger))
            except Miscompile as e:
                report_miscompile(validator, e)
                failed, module = True, None
            finally:
                produced.extend(pm.ctx.diagnostics)
                if time_passes:
                    emit(pm.timing_report(time.perf_counter() - t0))
                if pass_statistics:
                    emit(pm.statistics_report())
        except DiagnosticError as e:
            produced.extend(e.diagnostics)
            module = None
        if verify_diagnostics:
            problems = expected_diagnostics.check(
                expected_diagnostics.parse_expected(chunk, line_offset), produced, filename)
            if problems:
                failed = True
                sys.stderr.write("\n".join(problems) + "\n")
        else:
            errors_only = [d for d in produced if d.severity in ("error", "warning")]
            if errors_only:
                print_diagnostics(errors_only, filename)
            if any(d.severity == "error" for d in produced):
                failed = True
        results.append(module)

    done = [m for m in results if m is not None]
    if emit_dot and done and not failed:
        from ..passes.dot import module_dot

        with atomic_output(emit_dot) as out:
            for m in done:
                out.write(module_dot(m))
    if analyses and done:
        from ..passes.analysis import render_analysis

        with atomic_output(output) as out:
            for i, m in enumerate(done):
                for name in analyses:
                    out.write(render_analysis(name, m))
                    if name == "traffic" and i < len(ledgers):
                        out.write(ledgers[i])
    elif emit_dot == "-":
        pass
    elif done and not (failed and output not in (None, "-")):
        write_modules(results, output, elide_resources, external_weights)
    if failed:
        sys.exit(1)


def _ledger_text(module: Module, ledger: list[tuple[str, int]]) -> str:
    """The traffic ledger: total bytes the kernels move after each pass, and what each pass saved."""
    width = max(len(name) for name, _ in ledger)
    out = [f"traffic ledger @{module.name or 'module'} (bytes moved by all kernels after each pass)"]
    prev = ledger[0][1]
    for name, total in ledger:
        out.append(f"  {name:<{width}}  {total:>14}  saved {prev - total}")
        prev = total
    first, last = ledger[0][1], ledger[-1][1]
    pct = 100 * (first - last) / first if first else 0.0
    out.append(f"  total saved {first - last} of {first} ({pct:.1f}%)")
    return "\n".join(out) + "\n"


def write_modules(results: list[Module | None], output: str | None, elide: bool,
                  external: str | None) -> None:
    with atomic_output(output) as out:
        side = None
        try:
            if external:
                side = open(external + ".tmp", "wb")  # noqa: SIM115
                base = os.path.dirname(os.path.abspath(output)) if output not in (None, "-") else os.getcwd()
                ref = os.path.relpath(os.path.abspath(external), base)
            for i, m in enumerate(results):
                if i:
                    out.write("// -----\n")
                if m is None:
                    continue
                buf = out if len(results) == 1 else io.StringIO()
                print_module(m, buf, elide_resources=elide, external=(side, ref) if side else None)
                if buf is not out:
                    out.write(buf.getvalue())
            if side is not None:
                side.close()
                os.replace(external + ".tmp", external)  # type: ignore[operator]
                side = None
        except BrokenPipeError:
            raise  # stdout's reader went away (`| head`): handle_errors exits quietly
        except OSError as e:
            if external is None:
                raise  # atomic_output (or handle_errors, for stdout) names what could not be written
            raise fail(f"cannot write '{external or output}': {e.strerror}") from None
        finally:
            if side is not None:
                side.close()
                os.unlink(external + ".tmp")  # type: ignore[operator]
