"""tessel-codegen: lower graph- or kernel-level IR to a target (OpenCL C kernels plus a host plan)."""

from __future__ import annotations

import sys
from typing import Any

import click
import numpy as np

from ..ir.core import Module
from ..ir.parser import parse_module
from ..ir.verifier import verify_or_raise
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
    check_bounds_option,
    debug_option,
    determinism_option,
    fail,
    handle_errors,
    load_plugins,
    load_tuning,
    lower_schedule,
    parse_shape_hints,
    read_input,
    remark_categories,
    shape_hint_option,
    split_chunks,
    tuning_options,
    version_option,
    weights_options,
    winograd_option,
)
from .validation import DEFAULT_TOLERANCE, OptionalValueCommand, tolerance_option

EPILOG = """\b
Examples:
  tessel-codegen --target=opencl model.tsl -o model.cl.tsl
  tessel-import m.onnx | tessel-opt -O1 | tessel-codegen --target=opencl |
      tessel-run --random-inputs --profile
  tessel-codegen --target=opencl --device=auto --elide-resources model.tsl | less
  tessel-codegen --validate model.opt.tsl -o model.cl.tsl
  tessel-codegen --tuning-records=model.tune.jsonl --remarks=tuning model.opt.tsl -o model.cl.tsl
  tessel-codegen --shape-hint x=1x3x224x224 dynamic.opt.tsl -o dynamic.cl.tsl
  tessel-codegen --build --time-build model.opt.tsl -o model.cl.tsl
"""


def codegen_device(device: str | None, tuning_records: str | None) -> tuple[Any, Any]:
    """(DeviceInfo, Tuning or None) for --device and --tuning-records: the device defaults to 'generic',
    or 'auto' with records (they are for the device they were measured on)."""
    info = device_for_codegen(device or ("auto" if tuning_records else "generic"))
    return info, load_tuning(tuning_records, info)


def memory_device(device: str | None, tuning_records: str | None) -> Any:
    """The pyopencl device a lowering is for, whose memory the lowered funcs must fit (None for the
    generic device: then only TESSEL_DEVICE_MEMORY, when set, gives limits; targets/opencl/memory.py)."""
    spec = device or ("auto" if tuning_records else "generic")
    if spec == "generic":
        return None
    from ..targets.opencl import device as dev

    return dev.pick_device(spec)  # (device_for_codegen has already reported a spec that names none)


def lower_with_remarks(module: Module, info: Any, no_winograd: bool, tuning: Any,
                       categories: frozenset[str], check_bounds: bool = False) -> None:
    """Lower `module` as the tools do and print the lowering's remarks of `categories` on stderr."""
    from ..targets.opencl.lower import lower_module

    said: list | None = [] if categories else None
    checks = {"check_bounds": True} if check_bounds else {}  # else $TESSEL_CHECK_BOUNDS decides
    lower_module(module, info, said, lower_schedule(no_winograd), tuning, **checks)
    for r in said or ():
        if r.category in categories:
            click.echo(r.text(), err=True)


def device_for_codegen(spec: str) -> object:
    """The DeviceInfo to compile for: 'generic' (deterministic, no OpenCL needed) or a real device."""
    from ..targets.opencl import device as dev

    if spec == "generic":
        return dev.DeviceInfo.generic()
    try:
        from ..targets.opencl.profile import compile_info

        return compile_info(dev.pick_device(spec), lambda text: sys.stderr.write(f"tessel: {text}\n"))
    except dev.NoOpenCL as e:
        raise fail(str(e)) from None
    except ValueError as e:
        raise fail(str(e), 2) from None


@click.command(
    cls=OptionalValueCommand, optional_values={"--validate": DEFAULT_TOLERANCE},
    epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100}
)
@version_option
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
    default=None,
    metavar="SPEC",
    help="Device to specialise kernels for: 'generic' (a PoCL-like CPU; output does not depend on "
    "this machine; the default), 'auto' (the first GPU, else the first device of the most compute "
    "units; the default with --tuning-records), an index from 'tessel-run --list-devices', or part of a "
    "device name. A real device's measured peaks (calibrated on its first use) feed the choices that weigh "
    "FLOPs against memory traffic, such as Winograd or not.",
)
@click.option(
    "--split-input-file",
    is_flag=True,
    help="Lower each '// -----' separated chunk on its own; print them separated the same way.",
)
@click.option(
    "--validate",
    metavar="[=RTOL,ATOL]",
    callback=tolerance_option,
    help="Check the lowering: run the input on the numpy reference and the lowered module on OpenCL "
    "(seeded random inputs) and fail when the results differ beyond tolerance (default 1e-3,1e-4).",
)
@click.option(
    "--remarks-missed",
    is_flag=True,
    help="Print a remark on stderr for each fused region no kernel template takes whole (reason "
    "unfused-region): it then runs as one launch per op, and the remark says why.",
)
@check_bounds_option
@click.option(
    "--load-plugin",
    multiple=True,
    metavar="FILE.py",
    help="Load a Python file before lowering: a plugin that registers or replaces kernel templates "
    "(the injected-bug plugins of tests/plugins/ that --check-bounds and --poison must catch).",
)
@shape_hint_option
@build_option
@time_build_option("tessel-codegen builds programs only with --build or --validate.")
@winograd_option
@tuning_options
@weights_options
@debug_option
@handle_errors
@determinism_option
def main(
    input: str,
    output: str | None,
    target: str,
    device: str | None,
    split_input_file: bool,
    validate: object,
    remarks_missed: bool,
    check_bounds: bool,
    load_plugin: tuple[str, ...],
    shape_hint: tuple[str, ...],
    build: str | None,
    time_build: bool,
    no_winograd: bool,
    tuning_records: str | None,
    remarks: str,
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

    A func with dynamic dims (`tensor<[N]x3x[H]x[W]xf32>`) is kept as it is, marked to be compiled per
    input size when it runs (each size once; program binaries cached on disk); --shape-hint lowers the
    sizes you expect ahead of time.
    """
    from ..targets.opencl.lower import is_lowered
    from ..targets.opencl.memory import check_memory
    from .opt import write_modules

    mark = build_mark()
    categories = remark_categories(remarks, remarks_missed)
    hints = parse_shape_hints(shape_hint)
    load_plugins(load_plugin)
    data, filename = read_input(input)
    info, tuning = codegen_device(device, tuning_records)
    limits_of = memory_device(device, tuning_records)
    build_on = build_device(device) if build else None  # no OpenCL: fail now, not after lowering
    modules = []
    chunks = split_chunks(data.decode("utf-8", "replace")) if split_input_file else [("", 0)]
    for chunk, offset in chunks:
        module = parse_module(
            chunk.encode("utf-8") if split_input_file else data, filename, line_offset=offset
        )
        verify_or_raise(module)
        if is_lowered(module):
            raise fail(f"'{filename}' is already lowered to a target (it holds a cl.program)")
        check = _reference(module) if validate is not None else None
        lower_with_remarks(module, info, no_winograd, tuning, categories, check_bounds)
        apply_shape_hints(module, hints, info, tuning)
        verify_or_raise(module)
        for func in module.funcs:  # a model too big for the device fails here, not at its first launch
            check_memory(func, limits_of)
        if check is not None:
            _check_lowering(module, *check, validate, device or "generic")
        modules.append(module)
    write_modules(modules, output, elide_resources, external_weights)
    if build:  # the output is complete: a failed build leaves it as it is
        build_and_report(modules, build_on, time_build, mark, build == "all")
    elif time_build:
        print_build_table(builds_since(mark), note="" if validate is not None else
                          "tessel-codegen builds no program without --build or --validate")


def _reference(module: Module) -> tuple[str, list[np.ndarray], list[np.ndarray]]:
    """--validate, before lowering: (func name, seeded inputs, the numpy reference's results)."""
    from ..debug.validate import make_inputs, run_reference, select_func

    func = select_func(module)
    arrays = make_inputs(func, None, 0)
    return func.name, arrays, run_reference(module, func, arrays, f"the input (func @{func.name})")


def _check_lowering(module: Module, name: str, arrays: list[np.ndarray], reference: list[np.ndarray],
                    tol: Any, device: str) -> None:
    """--validate, after lowering: run the lowered func on OpenCL ('generic' runs on the default
    device) and compare with the reference, as `tessel-run --check-against=numpy` does."""
    from ..debug.validate import mismatch_error
    from ..ir.interpreter import output_names
    from ..targets.opencl import device as dev
    from ..targets.opencl.dynamic import executable

    func = module.func(name)
    assert func is not None
    try:
        d = dev.pick_device(None if device == "generic" else device)
    except dev.NoOpenCL as e:
        raise fail(f"--validate runs the lowered module on OpenCL: {e}") from None
    results = executable(module, func, d).run(arrays)  # a dynamic func: compiled at the inputs' sizes
    error = mismatch_error(output_names(func), results, reference, tol,
                           "the lowered module does not match the numpy reference", func=func)
    if error is not None:
        raise error


if __name__ == "__main__":
    main()
