"""tessel compile: import (ONNX) or parse (.tsl), optimize with -O2 by default, and lower to OpenCL, in
one process: the three tools of a build script in one command."""

from __future__ import annotations

import sys
from typing import Any

import click

from .build_report import (
    build_and_report,
    build_device,
    build_mark,
    build_option,
    builds_since,
    print_build_table,
    time_build_option,
)
from .common import (
    apply_shape_hints,
    debug_option,
    fail,
    handle_errors,
    lower_schedule,
    parse_shape_hints,
    read_input,
    remark_categories,
    shape_hint_option,
    tuning_options,
    version_option,
    weights_options,
    winograd_option,
)

EPILOG = """\b
Examples:
  tessel compile model.onnx -o model.cl.tsl
  tessel compile -O3 --remarks-missed model.onnx -o model.cl.tsl
  tessel compile --target=none model.onnx | tessel-run --random-inputs
  tessel compile model.onnx | tessel-run --random-inputs --profile
  tessel compile --shape-hint x=1x3x640x640 detector.onnx -o detector.cl.tsl
  tessel compile --build --time-build model.onnx -o model.cl.tsl
  tessel tune model.onnx -o model.tune.jsonl && tessel compile --tuning-records=model.tune.jsonl model.onnx
"""


@click.command(
    epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100}
)
@version_option
@click.argument("input", required=False, default="-", metavar="[INPUT]")
@click.option("-o", "--output", metavar="FILE", help="Write the result here (atomically) instead of stdout.")
@click.option("-O", "opt_level", type=click.IntRange(0, 3), default=2, show_default=True, metavar="N",
              help="The optimization pipeline (tessel-opt --print-pipeline shows each level).")
@click.option("--target", type=click.Choice(["opencl", "none"]), default="opencl", show_default=True,
              help="Lower to OpenCL ('none': stop at the optimized graph/kernel-level IR).")
@click.option("--device", default=None, metavar="SPEC",
              help="Device to specialise kernels for, as tessel-codegen --device (default 'generic', "
              "'auto' with --tuning-records).")
@click.option("--input-shape", "input_shape", multiple=True, metavar="NAME=DxD...",
              help="Make a dynamic ONNX input static (as tessel-import).")
@click.option("--remarks-missed", is_flag=True, help="Print every refused fusion or layout change on stderr.")
@click.option("--weight-precision", type=click.Choice(["f32", "f16", "bf16"]), default="f32",
              show_default=True,
              help="Store matmul and gemm weights in this precision (convert-precision: half the bytes for "
                   "bandwidth-bound fully connected layers; results change by about 1e-3 relative).")
@shape_hint_option
@build_option
@time_build_option("tessel compile builds programs only with --build.")
@winograd_option
@tuning_options
@weights_options
@debug_option
@handle_errors
def main(input: str, output: str | None, opt_level: int, target: str, device: str | None,
         input_shape: tuple[str, ...], remarks_missed: bool, weight_precision: str,
         shape_hint: tuple[str, ...], build: str | None, time_build: bool,
         no_winograd: bool,
         tuning_records: str | None,
         remarks: str, elide_resources: bool, external_weights: str | None, debug: bool) -> None:
    """Compile an ONNX model (or a .tsl module) to OpenCL in one step.

    INPUT is a .onnx file (imported as tessel-import does) or a .tsl module ('-' or none reads stdin; ONNX
    is recognised by its bytes). Runs the -O pipeline (default -O2), then lowers as tessel-codegen does.
    Exit status: 0 ok, 1 bad input, 2 usage, 3 internal error.
    """
    from ..ir.verifier import verify_or_raise
    from ..passes.remarks import CATEGORIES
    from .codegen import codegen_device, lower_with_remarks
    from .opt import write_modules

    mark = build_mark()
    if build and target != "opencl":
        raise fail("--build needs --target=opencl (--target=none leaves no program to build)", 2)
    build_on = build_device(device) if build else None  # no OpenCL: fail now, not after compiling
    categories = remark_categories(remarks, extra=tuple(c for c in CATEGORIES if c != "fusion"))
    info, tuning = codegen_device(device, tuning_records) if target == "opencl" else (None, None)
    hints = parse_shape_hints(shape_hint)
    module, _ = load_model(input, input_shape)
    from ..targets.opencl.lower import is_lowered

    if is_lowered(module):  # as tessel-codegen refuses it: its kernels are compiled already
        name = "<stdin>" if input in (None, "-") else input
        raise fail(f"'{name}' is already lowered to a target (it holds a cl.program): run it with "
                   "tessel-run, or compile the IR it came from")
    for note in getattr(module, "notes", ()):
        click.echo(f"note: {note}", err=True)
    optimize(module, opt_level, remarks_missed, weight_precision, categories)
    if target == "opencl":
        from ..ir.specialize import is_dynamic
        from ..passes.pipeline import level_pipeline
        from ..targets.opencl.dynamic import mark_dynamic

        for func in module.funcs:  # each size of a dynamic func runs this -O level when it is compiled
            if is_dynamic(func):
                mark_dynamic(module, func, level_pipeline(opt_level, weight_precision),
                             lower_schedule(no_winograd))
        lower_with_remarks(module, info, no_winograd, tuning, categories)
        apply_shape_hints(module, hints, info, tuning)
        verify_or_raise(module)
    write_modules([module], output, elide_resources, external_weights)
    if build:  # the output is complete: a failed build leaves it as it is
        build_and_report([module], build_on, time_build, mark, build == "all")
    elif time_build:
        print_build_table(builds_since(mark), note="tessel compile builds no program without --build")


def load_model(input: str, input_shape: tuple[str, ...]) -> tuple[Any, bool]:
    """The module of INPUT, verified, and whether it was ONNX: a .onnx file imported (its bytes tell), a
    .tsl module parsed (tessel.api.import_model_source, as tessel.compile does)."""
    from ..api import import_model_source, is_tsl
    from .import_ import parse_input_shapes

    data, filename = read_input(input)
    if not data:
        raise fail(f"'{filename}' is empty")
    onnx = not is_tsl(data, filename)
    return import_model_source(data, parse_input_shapes(input_shape) if onnx else None, filename), onnx


def optimize(module: Any, opt_level: int, remarks_missed: bool = False, weights: str = "f32",
             categories: frozenset[str] = frozenset()) -> None:
    """Run the -O pipeline on `module` in place (`weights`: the matmul / gemm weight precision); the
    passes' remarks of `categories` are printed, and with --remarks-missed every refusal."""
    from .. import api
    from ..passes.remarks import RemarkFilter

    cats = frozenset(categories - {"tuning"})
    on_remark = None
    if remarks_missed or cats:
        remark_filter = RemarkFilter(cats, remarks_missed)

        def on_remark(r: Any) -> None:
            if remark_filter.wants(r):
                sys.stderr.write(remark_filter.render(r) + "\n")
    api.optimize(module, opt_level, weights, on_remark)
