"""tessel-codegen: lower graph- or kernel-level IR to a target (OpenCL C kernels plus a host plan)."""

from __future__ import annotations

import click

from ..ir.parser import parse_module
from ..ir.verifier import verify_or_raise
from .common import debug_option, fail, handle_errors, read_input, split_chunks, weights_options

EPILOG = """\b
Examples:
  tessel-codegen --target=opencl model.tsl -o model.cl.tsl
  tessel-import m.onnx | tessel-opt -O1 | tessel-codegen --target=opencl |
      tessel-run --random-inputs --profile
  tessel-codegen --target=opencl --device=auto --elide-resources model.tsl | less
"""


def device_for_codegen(spec: str) -> object:
    """The DeviceInfo to compile for: 'generic' (deterministic, no OpenCL needed) or a real device."""
    from ..targets.opencl import device as dev

    if spec == "generic":
        return dev.DeviceInfo.generic()
    try:
        return dev.device_info(dev.pick_device(spec))
    except dev.NoOpenCL as e:
        raise fail(str(e)) from None
    except ValueError as e:
        raise fail(str(e), 2) from None


@click.command(
    epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100}
)
@click.argument("input", required=False, default="-", metavar="[INPUT]")
@click.option(
    "-o", "--output", metavar="FILE", help="Write the lowered IR here (atomically) instead of stdout."
)
@click.option(
    "--target",
    type=click.Choice(["opencl"]),
    default="opencl",
    show_default=True,
    help="The target to lower to.",
)
@click.option(
    "--device",
    default="generic",
    show_default=True,
    metavar="SPEC",
    help="Device to specialise kernels for: 'generic' (a PoCL-like CPU; output does not depend on "
    "this machine), 'auto' (the first GPU, else the first device), an index from "
    "'tessel-run --list-devices', or part of a device name.",
)
@click.option(
    "--split-input-file",
    is_flag=True,
    help="Lower each '// -----' separated chunk on its own; print them separated the same way.",
)
@weights_options
@debug_option
@handle_errors
def main(
    input: str,
    output: str | None,
    target: str,
    device: str,
    split_input_file: bool,
    elide_resources: bool,
    external_weights: str | None,
    debug: bool,
) -> None:
    """Lower a tessel IR module to target-level IR.

    Each op (or kernel region) becomes a `cl.launch` of an OpenCL C kernel from the op's template, with
    its global/local sizes and buffer bindings; weights a kernel wants in packed panels get a `pack` op
    evaluated once at load time; reshapes become `buf.view`s; a liveness-based memory plan assigns
    buffers (`buf.alloc`). The one `cl.program` holds every kernel's source, printed as readable C.
    Ops without a kernel are listed together in one error.
    """
    from ..targets.opencl.lower import is_lowered, lower_module
    from .opt import write_modules

    data, filename = read_input(input)
    info = device_for_codegen(device)
    modules = []
    chunks = split_chunks(data.decode("utf-8", "replace")) if split_input_file else [("", 0)]
    for chunk, offset in chunks:
        module = parse_module(
            chunk.encode("utf-8") if split_input_file else data, filename, line_offset=offset
        )
        verify_or_raise(module)
        if is_lowered(module):
            raise fail(f"'{filename}' is already lowered to a target (it holds a cl.program)")
        lower_module(module, info)  # type: ignore[arg-type]
        verify_or_raise(module)
        modules.append(module)
    write_modules(modules, output, elide_resources, external_weights)
