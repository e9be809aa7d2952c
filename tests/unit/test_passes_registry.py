"""Every registered pass: file name, pass name and lit file agree; docstring and options are usable."""

import importlib
from pathlib import Path

import pytest
from tessel.passes.manager import BUILTIN_PASSES, get_pass
from tessel.passes.pipeline import O_LEVELS, PipelineError, make_pass, parse_pipeline, pipeline_spec

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", sorted(BUILTIN_PASSES))
def test_pass_file_name_and_lit_file_agree(name: str) -> None:
    cls = get_pass(name)
    assert cls is not None and cls.NAME == name
    module_file = BUILTIN_PASSES[name].rsplit(".", 1)[1] + ".py"
    assert module_file == name.replace("-", "_") + ".py"
    assert (ROOT / "passes" / module_file).is_file()
    assert (ROOT / "lit_tests" / "passes" / f"{name}.tsl").is_file(), f"no lit file for pass {name}"
    assert cls.summary(), f"pass {name} needs a docstring whose first line --list-passes shows"
    assert cls.STATISTICS, f"pass {name} declares no statistics"


def test_every_pass_file_is_registered() -> None:
    """Every file of passes/ is a registered pass, shared machinery, or a helper of one pass named after it
    (`fuse_rules.py` for `fuse.py`), which defines no pass of its own."""
    helpers = {"__init__", "manager", "pipeline", "rewrite", "common", "remarks", "analysis", "liveness",
               "dot"}
    registered = {m.rsplit(".", 1)[1] for m in BUILTIN_PASSES.values()}
    files = {p.stem for p in (ROOT / "passes").glob("*.py")} - helpers
    pass_helpers = {f for f in files - registered if any(f.startswith(f"{m}_") for m in registered)}
    assert files - pass_helpers == registered
    for f in sorted(pass_helpers):
        module = importlib.import_module(f"tessel.passes.{f}")
        assert not hasattr(module, "PASS"), f"passes/{f}.py registers a pass but is named as a helper"


def test_options_parse_and_print_back() -> None:
    p = make_pass("fold-constants", "size-limit=1024")
    assert p.size_limit == 1024  # type: ignore[attr-defined]
    assert p.spec() == "fold-constants{size-limit=1024}"
    assert pipeline_spec(parse_pipeline(p.spec())) == p.spec()


@pytest.mark.parametrize("text,message", [
    ("canonicalise", "did you mean 'canonicalize'"),
    ("fold-constants{size=3}", "has no option 'size'"),
    ("fold-constants{size-limit=big}", "must be an integer"),
    ("cse,", "ends with ','"),
    ("cse;dce", "malformed pass pipeline"),
])
def test_bad_pipelines_name_the_problem(text: str, message: str) -> None:
    with pytest.raises(PipelineError) as e:
        parse_pipeline(text)
    assert message in str(e.value)


@pytest.mark.parametrize("level", sorted(O_LEVELS))
def test_o_levels_parse(level: int) -> None:
    parse_pipeline(O_LEVELS[level])
