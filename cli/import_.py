"""tessel-import: ONNX model -> graph-level tessel IR."""

from __future__ import annotations

import re

import click

from .common import debug_option, determinism_option, fail, handle_errors, read_input, weights_options

EPILOG = """\b
Examples:
  tessel-import resnet50.onnx -o resnet50.tsl
  tessel-import bert.onnx --input-shape input_ids=1x128 --input-shape attention_mask=1x128
  tessel-import model.onnx --elide-resources | less
  tessel-import model.onnx | tessel-opt -O1 | tessel-run --random-inputs
"""
_SHAPE = re.compile(r"^(.+)=(\d+(?:x\d+)*|scalar)$")


def parse_input_shapes(values: tuple[str, ...]) -> dict[str, list[int]]:
    shapes: dict[str, list[int]] = {}
    for v in values:
        m = _SHAPE.match(v)
        if not m:
            raise fail(f"--input-shape '{v}' is not NAME=DxDx... (e.g. input=1x3x224x224)", 2)
        shapes[m.group(1)] = [] if m.group(2) == "scalar" else [int(d) for d in m.group(2).split("x")]
    return shapes


@click.command(
    epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100}
)
@click.argument("input", required=False, default="-", metavar="[MODEL.onnx]")
@click.option("-o", "--output", metavar="FILE", help="Write the IR here (atomically) instead of stdout.")
@click.option("--input-shape", "input_shape", multiple=True, metavar="NAME=DxD...",
              help="Fix the dims of a dynamic input (repeatable), e.g. input=1x3x224x224.")
@weights_options
@debug_option
@handle_errors
@determinism_option
def main(input: str, output: str | None, input_shape: tuple[str, ...], elide_resources: bool,
         external_weights: str | None, debug: bool) -> None:
    """Import an ONNX model as graph-level tessel IR.

    Reads MODEL.onnx (stdin when '-' or missing), checks it, converts every node (listing all unsupported
    ops in one error), folds the shape subgraphs exporters emit, and prints the module. Each op keeps
    loc("onnx:<node name>"); func arguments and results keep the ONNX input and output names.
    """
    from ..frontends.onnx.importer import import_model
    from .opt import write_modules

    shapes = parse_input_shapes(input_shape)
    data, filename = read_input(input)
    write_modules([import_model(data, filename, shapes)], output, elide_resources, external_weights)
