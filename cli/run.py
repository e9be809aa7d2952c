"""tessel-run: execute a .tsl module on a target and report or save its outputs."""

from __future__ import annotations

import io
import sys
import time
import zipfile

import click
import numpy as np

from ..ir.diagnostics import Diagnostic, DiagnosticError
from ..ir.parser import parse_module
from ..ir.verifier import verify_or_raise
from .common import atomic_output, debug_option, fail, handle_errors, read_input

EPILOG = """\b
Examples:
  tessel-run model.tsl --random-inputs --seed 1
  tessel-run model.tsl --inputs in.npz --outputs out.npz
  tessel-opt -O1 model.tsl | tessel-run --random-inputs
"""


def load_npz(path: str) -> dict[str, np.ndarray]:
    try:
        with open(path, "rb") as f:
            is_zip = zipfile.is_zipfile(f)
    except IsADirectoryError:
        raise fail(f"cannot read inputs '{path}': it is a directory") from None
    except OSError as e:
        raise fail(f"cannot read inputs '{path}': {e.strerror}") from None
    if not is_zip:  # np.load would return a .npy's array, or try to unpickle a text file
        raise fail(f"cannot read inputs '{path}': not a .npz file (write one with numpy.savez)")
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise fail(f"cannot read inputs '{path}': not a valid .npz file ({e})") from None


def summary_table(names: list[str], arrays: list[np.ndarray]) -> str:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, title=None)
    for col in ("output", "type", "min", "max", "mean", "checksum"):
        table.add_column(col, justify="left" if col in ("output", "type") else "right")
    from ..ir.types import TensorType

    for name, a in zip(names, arrays, strict=True):
        t = str(TensorType.of(a))
        if a.size == 0:
            table.add_row(name, t, "-", "-", "-", "-")
            continue
        f = a.astype(np.float64)
        table.add_row(name, t, f"{f.min():.6g}", f"{f.max():.6g}", f"{f.mean():.6g}", f"{f.sum():.6g}")
    buf = io.StringIO()
    Console(file=buf, width=120, force_terminal=sys.stdout.isatty(), highlight=False).print(table)
    return buf.getvalue()


@click.command(
    epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100}
)
@click.argument("input", required=False, default="-", metavar="[INPUT]")
@click.option("--target", type=click.Choice(["numpy"]), default="numpy", show_default=True,
              help="Where to run: numpy (the reference interpreter).")
@click.option("--func", "func_name", metavar="NAME", help="The func to run (default: @main, else the first).")
@click.option("--inputs", metavar="FILE.npz", help="Input arrays keyed by argument name.")
@click.option("--random-inputs", is_flag=True, help="Use seeded random inputs (floats in [-1, 1)).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for --random-inputs.")
@click.option(
    "--outputs", metavar="FILE.npz", help="Write the results here, keyed by result name (atomically)."
)
@click.option("--quiet", "-q", is_flag=True, help="Print no summary table.")
@debug_option
@handle_errors
def main(input: str, target: str, func_name: str | None, inputs: str | None, random_inputs: bool, seed: int,
         outputs: str | None, quiet: bool, debug: bool) -> None:
    """Run a tessel IR module and print a summary of its outputs.

    Reads INPUT (stdin when '-' or missing), verifies it, feeds the func its inputs (--inputs or
    --random-inputs), and prints one row per output (type, min, max, mean, checksum).
    """
    from ..targets.numpy.interpreter import check_inputs, output_names, run_func
    from ..targets.numpy.interpreter import random_inputs as make_random

    if inputs and random_inputs:
        raise fail("give either --inputs or --random-inputs, not both", 2)
    data, filename = read_input(input)
    module = parse_module(data, filename)
    verify_or_raise(module)
    if not module.funcs:
        raise fail(f"'{filename}' holds no func to run")
    func = module.func(func_name or "main") or (None if func_name else module.funcs[0])
    if func is None:
        raise fail(f"no func @{func_name} in '{filename}' (it has: "
                   + ", ".join("@" + f.name for f in module.funcs) + ")")
    if inputs:
        arrays = check_inputs(func, load_npz(inputs), f"inputs in '{inputs}'")
    elif random_inputs or not func.args:
        arrays = check_inputs(func, make_random(func, seed))
    else:
        raise DiagnosticError(Diagnostic("error", f"func @{func.name} takes {len(func.args)} inputs: "
                                         "give --inputs FILE.npz or --random-inputs"))
    t0 = time.perf_counter()
    results = run_func(module, func, arrays)
    elapsed = time.perf_counter() - t0
    names = output_names(func)
    if outputs:
        with atomic_output(outputs, "wb") as f:
            np.savez(f, **dict(zip(names, results, strict=True)))
    if not quiet:
        sys.stdout.write(summary_table(names, results))
        sys.stdout.write(f"ran @{func.name} on {target} in {elapsed * 1000:.2f} ms\n")
