"""The command line gets as far as the onnx.backend adapter on node tests that feed a shape as an input.

Many ONNX node test cases feed an operand tessel needs at import (Reshape's shape, axes, pads, a Loop's
trip count, Resize's scales) as a graph input; the adapter (backend.py, `specialize`) bakes such inputs in
as initializers. The CLI does the same with `tessel-import --constant-inputs FILE.npz`. This takes every
10th of those cases (the ones whose plain import fails for want of a constant, in name order), runs each
through the adapter and through the plain CLI path -- `tessel-import` with exactly the inputs the adapter
baked, then `tessel-run --target=numpy --inputs` with the rest -- and checks that the CLI passes every
case the adapter passes, against the case's expected outputs. Without the constants, tessel-import must
refuse each with a note naming graph inputs and --constant-input.

The tools run in this process through click's test runner (their option parsing, files and exit codes
as on the command line; lit_tests/cli/import-constant-inputs.test runs the installed binaries): ~35
cases in a few seconds, after the case collection (conformance.py's disk cache).
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from tests.conformance import conformance

EVERY = 10
"""The sample: every EVERY-th case needing a constant, in name order (fixed: no randomness to seed)."""


def _needs_constant(case: Any) -> bool:
    from tessel.frontends.onnx.importer import NEEDS_CONSTANT, import_model
    from tessel.ir.diagnostics import DiagnosticError, render

    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            import_model(case.model.SerializeToString(), f"{case.name}.onnx")
    except DiagnosticError as e:
        return bool(NEEDS_CONSTANT.search("".join(render(d) for d in e.diagnostics)))
    except Exception:  # noqa: BLE001 - a crash is not this test's subject
        return False
    return False


def sample() -> list[str]:
    cases = conformance.load_cases()
    return [n for n in sorted(cases) if _needs_constant(cases[n])][::EVERY]


def _inputs(case: Any, arrays: list[Any]) -> dict[str, np.ndarray]:
    inits = {i.name for i in case.model.graph.initializer}
    names = [vi.name for vi in case.model.graph.input if vi.name not in inits]
    return dict(zip(names, [conformance._as_array(x) for x in arrays], strict=True))


def run_cli(case: Any, baked: list[str], tmp: Path) -> tuple[str, str]:
    """(status, why) of the case through tessel-import --constant-inputs and tessel-run, per data set."""
    from tessel.cli.import_ import main as tessel_import
    from tessel.cli.run import main as tessel_run

    runner = CliRunner()
    model, ir, out = tmp / "model.onnx", tmp / "model.tsl", tmp / "out.npz"
    model.write_bytes(case.model.SerializeToString())
    for inputs, outputs in case.data_sets:
        arrays = _inputs(case, inputs)
        np.savez(tmp / "constants.npz", **{n: arrays[n] for n in baked})
        np.savez(tmp / "inputs.npz", **{n: a for n, a in arrays.items() if n not in baked})
        r = runner.invoke(tessel_import, [str(model), "--constant-inputs", str(tmp / "constants.npz"),
                                          "-o", str(ir)])
        if r.exit_code != 0:
            return "import", r.output
        args = [str(ir), "--target=numpy", "--outputs", str(out)]
        if len(arrays) > len(baked):
            args += ["--inputs", str(tmp / "inputs.npz")]
        with np.errstate(all="ignore"):
            r = runner.invoke(tessel_run, args)
        if r.exit_code != 0:
            return "run", r.output
        expected = [conformance._as_array(x) for x in outputs]
        with np.load(out) as z:
            got = [z[vi.name] for vi in case.model.graph.output]
        # .npz keeps ml_dtypes arrays (bfloat16, float8) as raw bytes
        got = [g.view(e.dtype) if g.dtype.kind == "V" and e.dtype.itemsize == g.dtype.itemsize else g
               for g, e in zip(got, expected, strict=True)]
        why = conformance.compare(expected, got, case.rtol, case.atol)
        if why is not None:
            return "wrong", why
    return "pass", ""


def test_the_cli_with_constant_inputs_passes_what_the_adapter_passes(tmp_path: Path) -> None:
    from tessel.cli.import_ import main as tessel_import

    cases = conformance.load_cases()
    names = sample()
    assert len(names) >= 20, f"only {len(names)} sampled cases need a constant input"
    adapter, cli, plain = [], [], []
    for name in names:
        case = cases[name]
        r = conformance.run_case(case)
        if r.status == "pass":
            adapter.append(name)
        # without constants: refused, the note naming graph inputs and the flag
        (tmp_path / "model.onnx").write_bytes(case.model.SerializeToString())
        refused = CliRunner().invoke(tessel_import, [str(tmp_path / "model.onnx")])
        if refused.exit_code == 0:
            plain.append(name)
        else:
            assert refused.exit_code == 1 and "Traceback" not in refused.output, refused.output
            hinted = re.findall(r"--constant-input (\S+)=FILE\.npy", refused.output)
            assert hinted and set(hinted) <= set(_inputs(case, case.data_sets[0][0])), refused.output
        status, why = run_cli(case, list(r.specialized), tmp_path)
        if status == "pass":
            cli.append(name)
        elif r.status == "pass":
            pytest.fail(f"{name}: the adapter passes (baking {list(r.specialized)}), the CLI does not "
                        f"({status}): {why}", pytrace=False)
    print(f"\n{len(names)} sampled cases needing a constant input: adapter {len(adapter)}, "
          f"tessel-import --constant-inputs {len(cli)}, tessel-import alone {len(plain)}")
    assert set(cli) >= set(adapter)
    assert not plain, f"imported without their constants: {plain}"
