"""The wheel: `python -m build` makes one, it holds every module of the package and the seven tools, its
version is `tessel.__version__`, its plain requirements are enough to import the API, and installed on
its own it runs `python -m tessel` and the tools' `--version` (issue 18, point 4)."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("cli", "debug", "ir", "passes", "targets", "frontends")
TOOLS = ("tessel", "tessel-import", "tessel-opt", "tessel-run", "tessel-codegen", "tessel-reduce",
         "tessel-tune")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    r = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out),
                        str(ROOT)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    (whl,) = out.glob("tessel-*.whl")
    return whl


def test_wheel_holds_every_module_and_tool(wheel: Path) -> None:
    import tessel

    names = set(zipfile.ZipFile(wheel).namelist())
    want = {f"tessel/{p.relative_to(ROOT)}" for d in PACKAGES for p in (ROOT / d).rglob("*.py")}
    want |= {"tessel/__init__.py", "tessel/__main__.py", "tessel/api.py"}
    assert not want - names, f"missing from the wheel: {sorted(want - names)[:10]}"
    meta = zipfile.ZipFile(wheel).read(f"tessel-{tessel.__version__}.dist-info/METADATA").decode()
    assert f"\nVersion: {tessel.__version__}\n" in meta
    plain = [line.split(":", 1)[1].strip() for line in meta.splitlines()
             if line.startswith("Requires-Dist:") and "extra ==" not in line]
    base = sorted(r.split(">")[0].split("=")[0] for r in plain)
    assert base == ["click", "numpy", "onnx", "pyopencl", "rich"]
    entry = zipfile.ZipFile(wheel).read(f"tessel-{tessel.__version__}.dist-info/entry_points.txt").decode()
    assert all(f"\n{t} = " in entry for t in TOOLS)


def test_installed_wheel_runs_alone(wheel: Path, tmp_path: Path) -> None:
    import tessel

    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--target",
                    str(site), str(wheel)], check=True, timeout=300)
    env = {**os.environ, "PYTHONPATH": str(site)}
    r = subprocess.run([sys.executable, "-c", "import tessel, tessel.api; print(tessel.__file__)"],
                       capture_output=True, text=True, env=env, cwd=tmp_path, check=True)
    assert r.stdout.strip().startswith(str(site)), r.stdout
    r = subprocess.run([sys.executable, "-m", "tessel", "--version"], capture_output=True, text=True, env=env,
                       cwd=tmp_path, check=True)
    assert tessel.__version__ in r.stdout
    for tool in TOOLS[1:]:
        r = subprocess.run([str(site / "bin" / tool), "--version"], capture_output=True, text=True, env=env,
                           cwd=tmp_path)
        assert r.returncode == 0 and tessel.__version__ in r.stdout, f"{tool}: {r.stdout}{r.stderr}"
