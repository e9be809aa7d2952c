"""tessel: the umbrella command; every tool is a subcommand (`tessel opt`, `tessel run`, ...)."""

from __future__ import annotations

import click

from . import codegen, compile, import_, opt, reduce, run, tune
from .common import version_option


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@version_option
def main() -> None:
    """tessel: an optimizing compiler for neural-network graphs.

    Each subcommand is also a standalone tool (tessel-opt, tessel-run, ...) over .tsl files.
    """


main.add_command(import_.main, "import")
main.add_command(opt.main, "opt")
main.add_command(codegen.main, "codegen")
main.add_command(run.main, "run")
main.add_command(compile.main, "compile")
main.add_command(reduce.main, "reduce")
main.add_command(tune.main, "tune")
