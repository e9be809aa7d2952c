"""What tessel-opt's --validate-each, --bisect and --run-reproducer (and tessel-codegen's --validate) share:
options that take a value only as `--opt=VALUE`, the tolerance option, the reproducer header, the checks
and the reports. The comparison itself is debug/validate.py."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import sys
import time
from typing import Any

import click

from ..ir.core import Module
from ..ir.diagnostics import DiagnosticError
from ..ir.parser import parse_module
from ..ir.verifier import verify_or_raise
from .common import fail, print_diagnostics, reproducer_message, tool_name

_HEADER = re.compile(r"^// tessel-reproducer:(.*)$", re.M)
_HEADER_FLAGS = ("--pass-pipeline", "--validate-each", "--seed", "--inputs")
DEFAULT_TOLERANCE = "1e-3,1e-4"


class OptionalValueCommand(click.Command):
    """A command whose `optional_values` options take a value only as `--opt=VALUE`: alone, they mean
    their default value, and the next word stays an argument (`--validate-each m.tsl` reads m.tsl)."""

    def __init__(self, *args: Any, optional_values: dict[str, str] | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.optional_values = optional_values or {}

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        end = args.index("--") if "--" in args else len(args)
        args = [f"{a}={self.optional_values[a]}" if i < end and a in self.optional_values else a
                for i, a in enumerate(args)]
        return super().parse_args(ctx, args)


def tolerance_option(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    """Click callback: `RTOL,ATOL` as a debug.validate.Tolerance (None when the option is not given)."""
    if value is None:
        return None
    from ..debug.validate import Tolerance

    try:
        return Tolerance.parse(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None



def reproducer_header(data: bytes, filename: str) -> dict[str, str]:
    """The flags of a reproducer's first line, `// tessel-reproducer: --pass-pipeline='...'` and, for a
    miscompile, `--validate-each=RTOL,ATOL [--seed=N] [--inputs=FILE.npz]`."""
    m = _HEADER.search(data[:4096].decode("utf-8", "replace"))
    try:
        words = shlex.split(m.group(1)) if m else []
    except ValueError as e:
        raise fail(f"'{filename}': malformed reproducer header ({e})") from None
    flags: dict[str, str] = {}
    for word in words:
        key, eq, value = word.partition("=")
        if key not in _HEADER_FLAGS or not eq:
            raise fail(f"'{filename}': unknown flag '{word}' in the reproducer header "
                       f"(it may hold {', '.join(f + '=...' for f in _HEADER_FLAGS)})")
        flags[key] = value
    if "--pass-pipeline" not in flags:
        raise fail(f"'{filename}' has no '// tessel-reproducer: --pass-pipeline=...' header")
    return flags


def replay_checks(header: dict[str, str], filename: str, validate_each: Any, seed: int,
                   inputs: str | None) -> tuple[Any, int, str | None]:
    """--validate-each, --seed and --inputs for --run-reproducer: the header's, unless given."""
    from click.core import ParameterSource

    from ..debug.validate import Tolerance

    try:
        if validate_each is None and "--validate-each" in header:
            validate_each = Tolerance.parse(header["--validate-each"])
        ctx = click.get_current_context()
        if "--seed" in header and ctx.get_parameter_source("seed") is ParameterSource.DEFAULT:
            seed = int(header["--seed"])
    except ValueError as e:
        raise fail(f"'{filename}': bad value in the reproducer header: {e}") from None
    return validate_each, seed, inputs or header.get("--inputs")


def check_validation_usage(validate_each: Any, inputs: str | None, bisect: bool, bisect_limit: int | None,
                            split_input_file: bool, verify_diagnostics: bool) -> None:
    if inputs and validate_each is None and not bisect:
        raise fail("--inputs is for --validate-each and --bisect", 2)
    if bisect:
        combined = {"--bisect-limit": bisect_limit is not None, "--split-input-file": split_input_file,
                    "--verify-diagnostics": verify_diagnostics}
        for flag, given in combined.items():
            if given:
                raise fail(f"--bisect cannot be combined with {flag}", 2)


class Checks:
    """What --validate-each and --bisect check against: tolerance, given inputs or seed, and the flags
    a reproducer's header records so that --run-reproducer checks the same way."""

    def __init__(self, tol: Any, inputs: str | None, seed: int):
        from ..debug.validate import Tolerance
        from .run import load_npz

        self.tol = tol or Tolerance()
        self.given = load_npz(inputs) if inputs else None
        self.seed = seed
        self.source = f"inputs in '{inputs}'"
        self.replay = f"--validate-each={self.tol}" + (f" --seed={seed}" if seed and not inputs else "")
        if inputs:
            self.replay += " --inputs=" + shlex.quote(os.path.abspath(inputs))

    def validator(self, module: Module) -> Any:
        from ..debug.validate import Validator

        return Validator(module, self.tol, self.given, self.seed, self.replay, self.source)

    def add_to(self, pm: Any, module: Module) -> Any:
        """Validate after every pass of `pm` (after any hook it has), timed as '(validate)'."""
        validator, previous = self.validator(module), pm.after_pass

        def hook(p: Any, m: Module) -> None:
            if previous is not None:
                previous(p, m)
            t0 = time.perf_counter()
            try:
                validator(p, m)
            finally:
                pm.timings.append(("(validate)", time.perf_counter() - t0))

        pm.after_pass = hook
        return validator


def report_miscompile(validator: Any, e: Any) -> None:
    """Print the miscompile (localized against the reproducer, the IR before the pass) and the replay."""
    before = None
    if e.reproducer:
        with contextlib.suppress(DiagnosticError, OSError), open(e.reproducer, "rb") as f:
            before = parse_module(f.read(), e.reproducer, register_source=False)
    print_diagnostics([validator.report(e, before)], tool_name())
    sys.stderr.write(reproducer_message(e.reproducer) if e.reproducer
                     else f"{tool_name()}: could not write a reproducer\n")


def run_bisect(data: bytes, filename: str, pipeline_text: str, check: str, verify_each: bool,
                checks: Checks, reproducer: str | None) -> None:
    """--bisect: report the first bad pass application and write its reproducer (exit 1), or say that
    none is bad."""
    from ..debug.validate import Miscompile, bisect_pipeline
    from ..passes.pipeline import parse_pipeline

    def load() -> Module:
        module = parse_module(data, filename)
        verify_or_raise(module)
        return module

    validator = checks.validator(load()) if check == "numeric" else None
    found = bisect_pipeline(load, lambda: parse_pipeline(pipeline_text), validator, verify_each, reproducer,
                            sys.stderr.write)
    if found is None:
        n = len(parse_pipeline(pipeline_text))
        sys.stderr.write(f"BISECT: no bad pass application: the {check} check passes after all {n}\n")
        return
    sys.stderr.write(f"BISECT: first bad pass application ({found.index}) {found.spec}\n"
                     f"BISECT: last good --bisect-limit={found.index - 1}\n")
    e = found.failure
    if isinstance(e, Miscompile):
        report_miscompile(validator, e)
    else:
        sys.stderr.write(f"{tool_name()}: internal compiler error: {e}\n")
        if e.reproducer:
            sys.stderr.write(reproducer_message(e.reproducer))
    sys.exit(1)
