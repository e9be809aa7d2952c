"""Dependencies point one way (DESIGN.md §6): `ir/` imports nothing else of tessel; `passes/` and
`frontends/` build on `ir/` and never import a target or the command-line tools. Every module is parsed
with `ast`, so an import inside a function, a relative import and an absolute `tessel.` one all count."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]  # the repository root is the package `tessel`

# package folder -> the top-level tessel packages its modules must not import
FORBIDDEN: dict[str, frozenset[str]] = {
    "ir": frozenset({"passes", "frontends", "debug", "targets", "cli"}),
    "passes": frozenset({"targets", "cli"}),
    "frontends": frozenset({"targets", "cli"}),
}


def imported_modules(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """(line, absolute dotted name) of every module the file at `path` imports, wherever the statement
    is (functions, branches); relative imports resolve against the file's package under `root`, and
    `from X import Y` also yields X.Y, since Y may be a submodule (`from .. import targets`). A relative
    import climbing above tessel yields its dotted text as written."""
    tree = ast.parse(path.read_text(), str(path))
    package = ["tessel", *path.relative_to(root).parts[:-1]]
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level > len(package):
                out.append((node.lineno, "." * node.level + (node.module or "")))
                continue
            base = package[: len(package) - node.level + 1] if node.level else []
            head = ".".join([*base, *([node.module] if node.module else [])])
            out.append((node.lineno, head))
            out.extend((node.lineno, f"{head}.{a.name}") for a in node.names if a.name != "*")
    return out


def violations(path: Path, forbidden: frozenset[str], root: Path = ROOT) -> list[str]:
    """`module:line imports name` for each import of a forbidden tessel package (or from above tessel)
    in the file at `path`."""
    rel = path.relative_to(root).as_posix()
    found = []
    for line, name in imported_modules(path, root):
        parts = name.split(".")
        if name.startswith(".") or (len(parts) >= 2 and parts[0] == "tessel" and parts[1] in forbidden):
            found.append(f"{rel}:{line} imports {name}")
    return sorted(set(found))


def modules(folder: str) -> list[Path]:
    return sorted(p for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts)


@pytest.mark.parametrize("folder", sorted(FORBIDDEN))
def test_layers_import_only_downwards(folder: str) -> None:
    files = modules(folder)
    assert files, f"no modules under {folder}/"
    bad = [v for p in files for v in violations(p, FORBIDDEN[folder])]
    assert not bad, (f"{folder}/ must not import tessel.{{{', '.join(sorted(FORBIDDEN[folder]))}}}:\n  "
                     + "\n  ".join(bad))


def test_the_interpreter_is_in_ir_and_validation_in_debug() -> None:
    assert (ROOT / "ir" / "interpreter.py").is_file()
    assert not (ROOT / "passes" / "validate.py").exists(), "translation validation is a debug tool"
    from tessel.ir import interpreter
    from tessel.targets.numpy import interpreter as adapter

    for name in adapter.__all__:  # the numpy target re-exports the interpreter, it holds no copy
        assert getattr(adapter, name) is getattr(interpreter, name)


@pytest.mark.parametrize("where,source,expected", [
    ("passes/x.py", "from ..targets.opencl import lower\n", "tessel.targets.opencl"),
    ("passes/x.py", "def f():\n    from ..cli.common import fail\n", "tessel.cli.common"),
    ("passes/x.py", "from .. import targets\n", "tessel.targets"),
    ("frontends/onnx/x.py", "from ...targets.numpy.interpreter import run_func\n",
     "tessel.targets.numpy.interpreter"),
    ("frontends/onnx/ops/x.py", "import tessel.cli.run\n", "tessel.cli.run"),
    ("frontends/onnx/x.py", "from ...cli import common\n", "tessel.cli"),
    ("passes/x.py", "from ... import cli\n", "..."),
    ("frontends/onnx/x.py", "if True:\n    from tessel.targets import numpy\n", "tessel.targets"),
    ("ir/ops/x.py", "from ...passes.manager import Pass\n", "tessel.passes.manager"),
    ("ir/x.py", "from ..debug import validate\n", "tessel.debug"),
    ("ir/x.py", "from ..frontends.onnx import importer\n", "tessel.frontends.onnx"),
])
def test_a_violation_is_found_and_named(tmp_path: Path, where: str, source: str, expected: str) -> None:
    """The check itself: a planted bad import fails it, naming the module and what it imports."""
    path = tmp_path / where
    path.parent.mkdir(parents=True)
    path.write_text(source)
    found = violations(path, FORBIDDEN[where.split("/")[0]], tmp_path)
    assert found and all(v.startswith(f"{where}:") for v in found), found
    assert any(v.endswith(f"imports {expected}") for v in found), found


@pytest.mark.parametrize("where,source", [
    ("passes/x.py", "from ..ir.core import Op\nfrom .manager import Pass\nimport numpy\n"),
    ("frontends/onnx/x.py", "from ...ir import core\nfrom ...passes.manager import PassManager\n"),
    ("ir/ops/x.py", "from ..core import Op\nfrom . import registry\n"),
    ("passes/x.py", "from ..ir.interpreter import run_func  # targets in a comment\n"),
])
def test_allowed_imports_pass(tmp_path: Path, where: str, source: str) -> None:
    path = tmp_path / where
    path.parent.mkdir(parents=True)
    path.write_text(source)
    assert violations(path, FORBIDDEN[where.split("/")[0]], tmp_path) == []
