"""The user docs keep up with the code: the op reference is regenerated, every pass has a section, and
every long option of every tool is described on the tool's page."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import click
import pytest
from tessel.cli import codegen, compile, import_, opt, run, tune
from tessel.cli import main as tessel_main
from tessel.passes.manager import BUILTIN_PASSES

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _gen_ops() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tessel_docs_gen_ops", DOCS / "gen_ops.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ops_md_is_generated_from_the_registry() -> None:
    current = (DOCS / "ops.md").read_text(encoding="utf-8")
    assert current == _gen_ops().render(), "docs/ops.md is stale: run .venv/bin/python docs/gen_ops.py"


def test_ops_md_lists_every_op() -> None:
    from tessel.ir.ops.registry import load_all

    text = (DOCS / "ops.md").read_text(encoding="utf-8")
    for name in load_all():
        assert f"| `{name}` |" in text, f"op {name} has no row in docs/ops.md"


@pytest.mark.parametrize("name", sorted(BUILTIN_PASSES))
def test_every_pass_has_a_section(name: str) -> None:
    text = (DOCS / "passes.md").read_text(encoding="utf-8")
    heading = re.compile(rf"^#{{2,3}} `?{re.escape(name)}`?\s*$", re.M)
    assert heading.search(text), f"docs/passes.md has no '## {name}' section"


def _long_options(command: click.Command) -> list[str]:
    names = []
    for param in command.params:
        if isinstance(param, click.Option):
            names += [o for o in (*param.opts, *param.secondary_opts) if o.startswith("--")]
    return sorted(set(names))


@pytest.mark.parametrize("page,command", [("tessel-opt.md", opt.main), ("tessel-run.md", run.main),
                                          ("tessel-import.md", import_.main),
                                          ("tessel-codegen.md", codegen.main), ("tessel-tune.md", tune.main),
                                          ("tessel.md", compile.main)],
                         ids=["tessel-opt", "tessel-run", "tessel-import", "tessel-codegen", "tessel-tune",
                              "tessel-compile"])
def test_every_long_option_is_documented(page: str, command: click.Command) -> None:
    text = (DOCS / "tools" / page).read_text(encoding="utf-8")
    options = _long_options(command)
    assert options, "found no options: did the command's parameters move?"
    missing = [o for o in options if not re.search(rf"{re.escape(o)}(?![\w-])", text)]
    assert not missing, f"docs/tools/{page} does not mention {', '.join(missing)}"


def test_every_subcommand_is_documented() -> None:
    text = (DOCS / "tools" / "tessel.md").read_text(encoding="utf-8")
    group = tessel_main.main
    assert isinstance(group, click.Group)
    missing = [name for name in group.commands if f"tessel {name}" not in text]
    missing += [o for o in _long_options(group) if o not in text]
    assert not missing, f"docs/tools/tessel.md does not mention {', '.join(missing)}"
