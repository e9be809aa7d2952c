"""What every tool shares: input reading, atomic output, diagnostics on stderr, exit codes, crash handling.

Exit status: 0 success, 1 the input is wrong (a diagnostic says why; also an input too big for this
machine: `error: out of host memory while importing (m.onnx)`), 2 usage error (click's), 3 internal
compiler error (names the pass, writes a reproducer). No traceback for user mistakes; `--debug` shows them.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import re
import secrets
import stat
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any

import click

from ..ir.diagnostics import SOURCES, Diagnostic, DiagnosticError, render

EXIT_OK, EXIT_INPUT, EXIT_USAGE, EXIT_ICE = 0, 1, 2, 3
SPLIT_MARKER = re.compile(r"(?m)^// -----.*\n?")


class ToolExit(Exception):
    def __init__(self, code: int):
        self.code = code


def tool_name() -> str:
    ctx = click.get_current_context(silent=True)
    return ctx.find_root().info_name if ctx is not None and ctx.find_root().info_name else "tessel"


def _stderr_console():  # noqa: ANN202
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


def print_diagnostics(diags: list[Diagnostic], default_file: str = "<unknown>") -> None:
    text = "".join(render(d, SOURCES, default_file) for d in diags)
    if sys.stderr.isatty():
        from rich.text import Text

        styled = Text(text)
        styled.highlight_regex(r"error:", "bold red")
        styled.highlight_regex(r"warning:", "bold magenta")
        styled.highlight_regex(r"(note|remark):", "bold cyan")
        _stderr_console().print(styled, end="")
    else:
        sys.stderr.write(text)
        sys.stderr.flush()


def fail(message: str, code: int = EXIT_INPUT) -> ToolExit:
    """Print `tool: error: message` and return the exit to raise."""
    sys.stderr.write(f"{tool_name()}: error: {message}\n")
    return ToolExit(code)


def reproducer_message(path: str) -> str:
    """The line saying where a reproducer went and how to replay it (with the same pass plugins)."""
    ctx = click.get_current_context(silent=True)
    plugins = ctx.params.get("load_pass_plugin", ()) if ctx is not None else ()
    load = "".join(f" --load-pass-plugin={p}" for p in plugins)  # the replay needs them too
    return (f"{tool_name()}: reproducer written to {path}; replay it with: "
            f"tessel-opt{load} --run-reproducer {path}\n")


def read_input(path: str | None) -> tuple[bytes, str]:
    """(bytes, name for diagnostics); `-` or no path reads stdin."""
    if path in (None, "-"):
        return sys.stdin.buffer.read(), "<stdin>"
    try:
        with open(path, "rb") as f:
            return f.read(), path
    except IsADirectoryError:
        raise fail(f"cannot read '{path}': it is a directory") from None
    except OSError as e:
        raise fail(f"cannot read '{path}': {e.strerror}") from None


@contextlib.contextmanager
def atomic_output(path: str | None, mode: str = "w") -> Iterator[IO[Any]]:
    """Write to `path` through a temp file renamed into place on success, so a failure or Ctrl-C never
    leaves a partial file nor clobbers an existing one. No path or `-` writes to stdout."""
    if path in (None, "-"):
        yield sys.stdout.buffer if "b" in mode else sys.stdout
        return
    try:
        kind = os.stat(path).st_mode
    except OSError:
        kind = 0
    if kind and not stat.S_ISREG(kind) and not stat.S_ISDIR(kind):
        # A device or FIFO (/dev/null, /dev/stdout, a named pipe): write to it in place. Renaming a temp
        # file over it would replace the device node itself (root can write to /dev).
        try:
            with open(path, mode) as f:
                yield f
        except OSError as e:
            raise fail(f"cannot write '{path}': {e.strerror}") from None
        return
    target = os.path.realpath(path) if stat.S_ISREG(kind) else path  # through a symlink, keep the link
    # The temp file is named before it is made (mkstemp says the name only once it returns), so a Ctrl-C
    # at any moment after it exists lands in the handlers below, which remove it.
    tmp = os.path.join(os.path.dirname(os.path.abspath(target)),
                       f".{os.path.basename(target)}.{secrets.token_hex(8)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies, as to any file
        with os.fdopen(fd, mode) as f:
            yield f
        os.replace(tmp, target)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise fail(f"cannot write '{path}': {e.strerror}") from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def split_chunks(text: str) -> list[tuple[str, int]]:
    """`// -----` separated chunks, each with the number of lines before it (for diagnostics)."""
    chunks, start, line = [], 0, 0
    for m in SPLIT_MARKER.finditer(text):
        chunks.append((text[start:m.start()], line))
        line += text.count("\n", start, m.end())
        start = m.end()
    chunks.append((text[start:], line))
    return chunks


def weights_options(f: Callable) -> Callable:
    """--elide-resources and --external-weights: how a tool that prints IR writes its weights."""
    f = click.option("--external-weights", metavar="FILE",
                     help="Write weights to FILE and reference them from the IR by offset and hash.")(f)
    return click.option("--elide-resources", is_flag=True,
                        help="Print weights without their payload (for reading).")(f)


def winograd_option(f: Callable) -> Callable:
    """--no-winograd: the OpenCL lowering's 3x3 convs by the direct kernel only (`lower_schedule`)."""
    return click.option("--no-winograd", "no_winograd", is_flag=True,
                        help="Lower every conv with the direct kernel, none by Winograd transforms (3x3 "
                        "stride-1 convs otherwise use F(4x4, 3x3) or F(2x2, 3x3) where it pays: faster, "
                        "within ~1e-5 of the outputs' scale of the direct result; docs/opencl.md).")(f)


def check_bounds_option(f: Callable) -> Callable:
    """--check-bounds: kernels that check every global and __local access (targets/opencl/sanitize.py)."""
    return click.option("--check-bounds", "check_bounds", is_flag=True,
                        help="Instrument every kernel: each global and __local load and store is checked "
                        "against its buffer's extent (the lowering knows every buffer's size). A run then "
                        "stops at its first out-of-bounds access with an error naming the kernel, its ONNX "
                        "node, the argument and the element (exit status 3); the access itself is "
                        "suppressed. Kernels run slower (about 2-3x) and build slower: for finding "
                        "compiler bugs ($TESSEL_CHECK_BOUNDS=1 does the same).")(f)


def load_plugins(paths: Sequence[str]) -> None:
    """--load-plugin: run each Python file (it may register passes or replace kernel templates)."""
    from ..passes.manager import load_plugin

    for path in paths:
        load_plugin(path)


def shape_hint_option(f: Callable) -> Callable:
    """--shape-hint: sizes of a dynamic func compiled ahead of time (targets/opencl/dynamic.py)."""
    return click.option("--shape-hint", "shape_hint", multiple=True, metavar="NAME=DxD[,NAME=DxD...]",
                        help="For a module with dynamic dims: the input shapes you expect, lowered ahead of "
                        "time (tuned by --tuning-records) into the output beside the dynamic func, so runs "
                        "at that size load its kernels instead of compiling them. One occurrence gives every "
                        "input's shape; repeat it for more sizes. Other sizes still run, each compiled the "
                        "first time it is met.")(f)


def parse_shape_hints(values: tuple[str, ...]) -> list[dict[str, list[int]]]:
    """--shape-hint values: one dict of input name -> shape per occurrence."""
    hints = []
    for v in values:
        hint: dict[str, list[int]] = {}
        for part in v.split(","):
            name, _, dims = part.strip().partition("=")
            if not name or not re.fullmatch(r"\d+(?:x\d+)*|scalar", dims):
                raise fail(f"--shape-hint '{v}' is not NAME=DxDx...[,NAME=DxDx...] (e.g. x=1x3x224x224)", 2)
            hint[name] = [] if dims == "scalar" else [int(d) for d in dims.split("x")]
        hints.append(hint)
    return hints


def apply_shape_hints(module: Any, hints: list[dict[str, list[int]]], info: Any, tuning: Any) -> None:
    """Lower each hinted size of the module's dynamic funcs ahead of time (`dynamic.embed_hint`)."""
    if not hints:
        return
    from ..ir.interpreter import input_names
    from ..ir.specialize import is_dynamic
    from ..targets.opencl.dynamic import embed_hint

    funcs = [f for f in module.funcs if is_dynamic(f)]
    if not funcs:
        raise fail("--shape-hint: the module has no func with dynamic dims (its sizes are fixed)", 2)
    for func in funcs:
        names = input_names(func)
        for hint in hints:
            if set(hint) != set(names):
                raise fail(f"--shape-hint must give the shape of every input of @{func.name} "
                           f"({', '.join(names)}); got {', '.join(hint)}", 2)
            embed_hint(module, func, [hint[n] for n in names], info, tuning)


def tuning_options(f: Callable) -> Callable:
    """--tuning-records and --remarks: tessel-tune's records applied by a lowering, and its remarks."""
    f = click.option("--remarks", "remarks", metavar="CATEGORIES", default="",
                     help="Print the lowering's remarks of these categories on stderr (comma-separated): "
                     "'tuning' says for each kernel which tuning record applied or why none did; "
                     "'fusion' names each fused region that runs op by op (as --remarks-missed).")(f)
    return click.option("--tuning-records", "tuning_records", metavar="FILE",
                        help="Apply the schedules of tessel-tune's records (JSON lines) for the device "
                        "compiled for: a kernel with no record keeps the template's choice; records of "
                        "another device or schedule-space version are ignored (--remarks=tuning says "
                        "which). With this option --device defaults to 'auto'.")(f)


REMARK_CATEGORIES = ("tuning", "fusion")


def remark_categories(text: str, missed: bool = False, extra: tuple[str, ...] = ()) -> frozenset[str]:
    """The categories of --remarks (and --remarks-missed, which is 'fusion'); `extra`: the passes'
    categories, for a tool that runs a pipeline too (tessel compile)."""
    names = {c.strip() for c in text.split(",") if c.strip()}
    known = (*REMARK_CATEGORIES, *extra)
    bad = sorted(names - set(known))
    if bad:
        raise fail(f"--remarks: unknown categor{'ies' if len(bad) > 1 else 'y'} {', '.join(bad)} (expected "
                   f"{', '.join(known[:-1])} or {known[-1]})", 2)
    return frozenset(names | ({"fusion"} if missed else set()))


def load_tuning(path: str | None, info: Any) -> Any:
    """The Tuning of --tuning-records FILE for the DeviceInfo compiled for (None without the option); a
    file that cannot be read fails naming its line, before anything is lowered."""
    if not path:
        return None
    from ..targets.opencl.records import RecordError, Tuning, read_records

    try:
        return Tuning(read_records(path), info.fingerprint)
    except RecordError as e:
        raise fail(str(e)) from None


def lower_schedule(no_winograd: bool) -> dict[str, Any]:
    """The schedule keys lower_module gives every template for the tools' lowering options."""
    return {"winograd": 0} if no_winograd else {}


def debug_option(f: Callable) -> Callable:
    return click.option("--debug", is_flag=True, help="Show Python tracebacks for every error.")(f)


_DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
_ACTIVITY = {"import": "importing", "opt": "optimizing", "codegen": "lowering", "run": "running",
             "compile": "compiling", "reduce": "reducing", "tune": "tuning"}
"""What each tool (or `tessel` subcommand) is doing, for the out-of-host-memory error."""


def out_of_memory(kwargs: dict[str, Any], pass_name: str = "") -> str:
    """The message of a MemoryError in a tool: what it was doing, to which input (and in which pass).
    Exit status 1, as for any input this machine cannot take (a model too big for its memory)."""
    ctx = click.get_current_context(silent=True)
    name = (ctx.info_name or "") if ctx is not None else ""
    what = _ACTIVITY.get(name.removeprefix("tessel-"), "working")
    source = kwargs.get("input")
    where = "<stdin>" if source in (None, "-") else str(source)
    return f"out of host memory while {what} ({where}{f', in pass {pass_name!r}' if pass_name else ''})"


def _call_and_flush(f: Callable, args: tuple, kwargs: dict) -> None:
    """Run the tool and flush stdout, so a full disk (or `> /dev/full`) is an error with exit status 1,
    not an internal error or Python's 'Exception ignored' at exit. (Files written with -o are named by
    atomic_output; this catches stdout.)"""
    try:
        f(*args, **kwargs)
        sys.stdout.flush()
    except OSError as e:
        if isinstance(e, BrokenPipeError) or e.errno not in _DISK_FULL:
            raise
        with contextlib.suppress(OSError, ValueError):  # drop what stdout still buffers: exit flushes it
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        where = f"'{e.filename}'" if e.filename else "to stdout"
        raise fail(f"cannot write {where}: {e.strerror}") from None


def handle_errors(f: Callable) -> Callable:
    """Turn library errors into diagnostics and exit codes (the one place tools do this)."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        debug = bool(kwargs.get("debug"))
        from ..passes.manager import CompilerCrash

        try:
            _call_and_flush(f, args, kwargs)
        except ToolExit as e:
            sys.exit(e.code)
        except DiagnosticError as e:
            if debug:
                traceback.print_exc()
            print_diagnostics(e.diagnostics, tool_name())  # position-less ones read `tessel-opt: error: ...`
            sys.exit(getattr(e, "exit_code", EXIT_INPUT))  # a KernelFault: 3, the compiler made a bad kernel
        except MemoryError as e:  # the input is too big for this machine, not a bug (the importer says
            # so for protobuf's failed allocations; the pass manager names the pass)
            if debug:
                traceback.print_exc()
            sys.stderr.write(f"{tool_name()}: error: {out_of_memory(kwargs, getattr(e, 'pass_name', ''))}\n")
            sys.exit(EXIT_INPUT)
        except CompilerCrash as e:
            if debug and e.traceback:
                sys.stderr.write(e.traceback)
            sys.stderr.write(f"{tool_name()}: internal compiler error: {e}\n")
            if e.reproducer:
                sys.stderr.write(reproducer_message(e.reproducer))
            elif tool_name() != "tessel-opt":  # tessel compile keeps no snapshots (api.optimize)
                sys.stderr.write(f"{tool_name()}: tessel-import the model and run tessel-opt with the same "
                                 "-O level to get a reproducer\n")
            sys.exit(EXIT_ICE)
        except KeyboardInterrupt:
            sys.stderr.write(f"{tool_name()}: interrupted\n")
            sys.exit(130)
        except BrokenPipeError:
            with contextlib.suppress(Exception):
                sys.stdout = open(os.devnull, "w")  # noqa: SIM115
            sys.exit(EXIT_OK)
        except click.exceptions.Exit:
            raise
        except click.ClickException:
            raise
        except Exception as e:  # a bug in tessel
            tb = traceback.format_exc()
            if debug:
                sys.stderr.write(tb)
            sys.stderr.write(
                f"{tool_name()}: internal compiler error: {type(e).__name__}: {e}\n"
                f"{tool_name()}: this is a bug in tessel; rerun with --debug for the traceback\n"
            )
            sys.exit(EXIT_ICE)

    return wrapper


def determinism_option(f: Callable) -> Callable:
    """--check-determinism: run the tool's command line (without this flag) twice in fresh processes with
    different PYTHONHASHSEED values, compare the outputs byte for byte, and either write the output as
    usual or report the first differing line (exit 1). Put it right above the tool's function, under
    @handle_errors."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not kwargs.pop("check_determinism", False):
            return f(*args, **kwargs)
        _check_determinism(kwargs.get("input"), kwargs.get("output"))

    return click.option("--check-determinism", is_flag=True,
                        help="Run this command twice in fresh processes with different hash seeds and fail "
                             "(exit 1, showing the first differing line) unless the outputs are "
                             "byte-identical.")(wrapper)


def _check_determinism(input: str | None, output: str | None) -> None:
    from ..debug import determinism as det

    if os.environ.get(det.CHILD_ENV) or det.FLAG not in sys.argv[1:]:
        raise fail(f"{det.FLAG} must be given on the tool's command line (it re-runs that command line)", 2)
    root = click.get_current_context().find_root()
    module = getattr(root.command.callback, "__module__", None) or "tessel.cli.main"
    command = det.child_command(module, root.info_name or tool_name(), det.child_args(sys.argv[1:], output))
    stdin = sys.stdin.buffer.read() if input in (None, "-") else None
    with tempfile.TemporaryDirectory(prefix="tessel-determinism-") as work:
        a, b = det.run_twice(command, stdin, work)
        sys.stderr.buffer.write(a.stderr)
        if a.returncode != b.returncode:
            raise fail(f"the tool is not deterministic: it exits with status {a.returncode} with "
                       f"PYTHONHASHSEED={a.seed} and {b.returncode} with PYTHONHASHSEED={b.seed}")
        if a.returncode != 0:  # the tool failed the same way both times: fail like it
            raise ToolExit(a.returncode)
        diff = det.first_difference(a.output, b.output)
        if diff is not None:
            raise fail(f"the output is not deterministic: two runs differ at line {diff.line}:\n"
                       f"  PYTHONHASHSEED={a.seed}: {diff.first}\n  PYTHONHASHSEED={b.seed}: {diff.second}")
        with open(a.output, "rb") as src, atomic_output(output, "wb") as out:
            while chunk := src.read(1 << 20):
                out.write(chunk)


def version_option(f: Callable) -> Callable:
    """--version: the package's one version string (tessel.__version__), as every tool prints it."""
    from .. import __version__

    return click.version_option(__version__, "--version", message="%(prog)s, version %(version)s",
                                help="Show the version and exit.")(f)
