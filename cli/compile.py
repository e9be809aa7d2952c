"""tessel compile: import (ONNX) or parse (.tsl), optimize with -O2 by default, and lower to OpenCL, in
one process: the three tools of a build script in one command."""

from __future__ import annotations

import sys

import click

from .common import (
    debug_option,
    fail,
    handle_errors,
    lower_schedule,
    read_input,
    weights_options,
    winograd_option,
)

EPILOG = """\b
Examples:
  tessel compile model.onnx -o model.cl.tsl
  tessel compile -O3 --remarks-missed model.onnx -o model.cl.tsl
  tessel compile --target=none model.onnx | tessel-run --random-inputs
  tessel compile model.onnx | tessel-run --random-inputs --profile
"""


@click.command(
    epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100}
)
@click.argument("input", required=False, default="-", metavar="[INPUT]")
@click.option("-o", "--output", metavar="FILE", help="Write the result here (atomically) instead of stdout.")
@click.option("-O", "opt_level", type=click.IntRange(0, 3), default=2, show_default=True, metavar="N",
              help="The optimization pipeline (tessel-opt --print-pipeline shows each level).")
@click.option("--target", type=click.Choice(["opencl", "none"]), default="opencl", show_default=True,
              help="Lower to OpenCL ('none': stop at the optimized graph/kernel-level IR).")
@click.option("--device", default="generic", show_default=True, metavar="SPEC",
              help="Device to specialise kernels for, as tessel-codegen --device.")
@click.option("--input-shape", "input_shape", multiple=True, metavar="NAME=DxD...",
              help="Make a dynamic ONNX input static (as tessel-import).")
@click.option("--remarks-missed", is_flag=True, help="Print every refused fusion or layout change on stderr.")
@winograd_option
@weights_options
@debug_option
@handle_errors
def main(input: str, output: str | None, opt_level: int, target: str, device: str,
         input_shape: tuple[str, ...], remarks_missed: bool, no_winograd: bool, elide_resources: bool,
         external_weights: str | None, debug: bool) -> None:
    """Compile an ONNX model (or a .tsl module) to OpenCL in one step.

    INPUT is a .onnx file (imported as tessel-import does) or a .tsl module ('-' or none reads stdin; ONNX
    is recognised by its bytes). Runs the -O pipeline (default -O2), then lowers as tessel-codegen does.
    Exit status: 0 ok, 1 bad input, 2 usage, 3 internal error.
    """
    from ..ir.parser import parse_module
    from ..ir.verifier import verify_or_raise
    from ..passes.manager import PassManager
    from ..passes.pipeline import O_LEVELS, parse_pipeline
    from ..passes.remarks import RemarkFilter
    from .codegen import device_for_codegen
    from .import_ import parse_input_shapes
    from .opt import write_modules

    data, filename = read_input(input)
    if not data:
        raise fail(f"'{filename}' is empty")
    if filename.endswith(".tsl") or data.lstrip()[:1] in (b"m", b"f", b"/", b"{"):
        module = parse_module(data, filename)
    else:
        from ..frontends.onnx.importer import import_model

        module = import_model(data, filename, parse_input_shapes(input_shape))
    verify_or_raise(module)
    pm = PassManager(parse_pipeline(O_LEVELS[opt_level]))
    if remarks_missed:
        remark_filter = RemarkFilter(frozenset(), True)
        pm.ctx.on_remark = lambda r: sys.stderr.write(remark_filter.render(r) + "\n") if remark_filter.wants(
            r) else None
    pm.run(module)
    if target == "opencl":
        from ..targets.opencl.lower import lower_module

        lower_module(module, device_for_codegen(device), None,  # type: ignore[arg-type]
                     lower_schedule(no_winograd))
        verify_or_raise(module)
    write_modules([module], output, elide_resources, external_weights)
