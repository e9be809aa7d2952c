"""tessel-import: ONNX model -> graph-level tessel IR."""

from __future__ import annotations

import re
import zipfile
from typing import Any

import click

from .common import (
    debug_option,
    determinism_option,
    fail,
    handle_errors,
    read_input,
    version_option,
    weights_options,
)

EPILOG = """\b
Examples:
  tessel-import resnet50.onnx -o resnet50.tsl
  tessel-import bert.onnx --input-shape input_ids=1x128 --input-shape attention_mask=1x128
  tessel-import model.onnx --elide-resources | less
  tessel-import model.onnx | tessel-opt -O1 | tessel-run --random-inputs
  tessel-import reshape.onnx --constant-input shape=shape.npy | tessel-run --inputs data.npz
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


def _read_array(path: str, origin: str, npz: bool) -> Any:
    """np.load of a .npy (or, with `npz`, a .npz), failing with one line when it cannot be read."""
    try:
        with open(path, "rb") as f:
            head = f.read(6)
    except IsADirectoryError:
        raise fail(f"{origin}: cannot read '{path}': it is a directory") from None
    except OSError as e:
        raise fail(f"{origin}: cannot read '{path}': {e.strerror}") from None
    is_zip = head.startswith(b"PK")
    if npz and not is_zip:
        raise fail(f"{origin}: cannot read '{path}': not a .npz file (write one with numpy.savez)")
    if not npz and head != b"\x93NUMPY":
        also = "; a .npz goes to --constant-inputs" if is_zip else ""
        raise fail(f"{origin}: cannot read '{path}': not a .npy file (write one with numpy.save{also})")
    import numpy as np

    try:
        if not npz:
            return np.load(path, allow_pickle=False)
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        kind = ".npz" if npz else ".npy"
        raise fail(f"{origin}: cannot read '{path}': not a valid {kind} file ({e})") from None
    for k, v in arrays.items():  # np.load hands back a member without the .npy header as raw bytes
        if not isinstance(v, np.ndarray):
            raise fail(f"{origin}: cannot read '{path}': its member '{k}' is not a .npy array")
    return arrays


def read_constants(pairs: tuple[str, ...], npz: str | None,
                   shapes: dict[str, list[int]]) -> tuple[dict[str, Any], dict[str, str]]:
    """The arrays of --constant-input NAME=FILE.npy and --constant-inputs FILE.npz by input name, and where
    each came from (for the importer's messages). A name given twice, or with --input-shape, is a usage
    error; a file that cannot be read, exit 1."""
    files: dict[str, str] = {}
    for v in pairs:
        name, eq, path = v.partition("=")
        if not (eq and name and path):
            raise fail(f"--constant-input '{v}' is not NAME=FILE.npy (e.g. shape=shape.npy)", 2)
        if name in files:
            raise fail(f"--constant-input gives '{name}' twice ({files[name]} and {path}); give it once", 2)
        files[name] = path
    arrays: dict[str, Any] = {}
    origins: dict[str, str] = {}
    if npz:
        origin = f"--constant-inputs {npz}"
        arrays = _read_array(npz, origin, npz=True)
        both = [n for n in arrays if n in files]
        if both:
            raise fail(f"'{both[0]}' is given both by --constant-input {both[0]}={files[both[0]]} and by "
                       f"--constant-inputs {npz}; give it once", 2)
        origins = dict.fromkeys(arrays, origin)
    for name, path in files.items():
        origins[name] = f"--constant-input {name}={path}"
        arrays[name] = _read_array(path, origins[name], npz=False)
    shaped = [n for n in arrays if n in shapes]
    if shaped:
        raise fail(f"'{shaped[0]}' is given both by --input-shape and as a constant ({origins[shaped[0]]}); "
                   "a constant input's shape is its array's: drop the --input-shape", 2)
    return arrays, origins


@click.command(
    epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100}
)
@version_option
@click.argument("input", required=False, default="-", metavar="[MODEL.onnx]")
@click.option("-o", "--output", metavar="FILE", help="Write the IR here (atomically) instead of stdout.")
@click.option("--input-shape", "input_shape", multiple=True, metavar="NAME=DxD...",
              help="Fix the dims of a dynamic input (repeatable), e.g. input=1x3x224x224.")
@click.option("--constant-input", "constant_input", multiple=True, metavar="NAME=FILE.npy",
              help="Make graph input NAME a constant holding FILE.npy's array (repeatable): for an input "
              "tessel needs the value of at import (Reshape's shape, axes, pads, a Loop's trip count...). "
              "Its dtype and shape must fit the input's; the func no longer takes it.")
@click.option("--constant-inputs", "constant_inputs", metavar="FILE.npz",
              help="Make each graph input named in FILE.npz a constant holding its array (as "
              "--constant-input).")
@weights_options
@debug_option
@handle_errors
@determinism_option
def main(input: str, output: str | None, input_shape: tuple[str, ...], constant_input: tuple[str, ...],
         constant_inputs: str | None, elide_resources: bool, external_weights: str | None,
         debug: bool) -> None:
    """Import an ONNX model as graph-level tessel IR.

    Reads MODEL.onnx (stdin when '-' or missing), checks it, converts every node (listing all unsupported
    ops in one error), folds the shape subgraphs exporters emit, and prints the module. Each op keeps
    loc("onnx:<node name>"); func arguments and results keep the ONNX input and output names.
    Inputs given with --constant-input(s) become constants first, as the onnx.backend adapter bakes them.

    Dynamic dims stay dynamic: a dim_param names a symbol (`tensor<[batch]x3x[height]x[width]xf32>`), an
    unnamed, -1 or 0 dim gets one (`[x_2]`), and exporters' shape computations fold into symbolic sizes;
    --input-shape fixes an input's dims instead. An If, Loop or Scan that depends on the inputs becomes an
    `if`, `loop` or `scan` op (a note says which --constant-input would fold an If away).
    """
    from ..frontends.onnx.importer import import_model
    from .opt import write_modules

    shapes = parse_input_shapes(input_shape)
    constants, origins = read_constants(constant_input, constant_inputs, shapes)
    data, filename = read_input(input)
    module = import_model(data, filename, shapes, constants, origins)
    for note in module.notes:
        click.echo(f"{filename}: note: {note}", err=True)
    write_modules([module], output, elide_resources, external_weights)
