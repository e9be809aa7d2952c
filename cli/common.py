"""What every tool shares: input reading, atomic output, diagnostics on stderr, exit codes, crash handling.

Exit status: 0 success, 1 the input is wrong (a diagnostic says why), 2 usage error (click's), 3 internal
compiler error (names the pass, writes a reproducer). No traceback for user mistakes; `--debug` shows them.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator
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
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
    except OSError as e:
        raise fail(f"cannot write '{path}': {e.strerror}") from None
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; the result gets a normal file's permissions
        with os.fdopen(fd, mode) as f:
            yield f
        os.replace(tmp, path)
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


def debug_option(f: Callable) -> Callable:
    return click.option("--debug", is_flag=True, help="Show Python tracebacks for every error.")(f)


def handle_errors(f: Callable) -> Callable:
    """Turn library errors into diagnostics and exit codes (the one place tools do this)."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        debug = bool(kwargs.get("debug"))
        from ..passes.manager import CompilerCrash

        try:
            f(*args, **kwargs)
        except ToolExit as e:
            sys.exit(e.code)
        except DiagnosticError as e:
            if debug:
                traceback.print_exc()
            print_diagnostics(e.diagnostics, tool_name())  # position-less ones read `tessel-opt: error: ...`
            sys.exit(EXIT_INPUT)
        except CompilerCrash as e:
            if debug and e.traceback:
                sys.stderr.write(e.traceback)
            sys.stderr.write(f"{tool_name()}: internal compiler error: {e}\n")
            if e.reproducer:
                ctx = click.get_current_context(silent=True)
                plugins = ctx.params.get("load_pass_plugin", ()) if ctx is not None else ()
                load = "".join(f" --load-pass-plugin={p}" for p in plugins)  # the replay needs them too
                sys.stderr.write(f"{tool_name()}: reproducer written to {e.reproducer}; replay it with: "
                                 f"tessel-opt{load} --run-reproducer {e.reproducer}\n")
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
