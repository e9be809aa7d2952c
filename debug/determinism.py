"""`--check-determinism`: run a tool's own command line twice in fresh processes, each with another
PYTHONHASHSEED, and compare the outputs byte for byte.

The same input and flags must give byte-identical output (DESIGN §1): stable value names, ordered
iteration, nothing that depends on string hashing or object addresses. A set of strings iterated into
the output is the classic way to break that, and it only shows across processes with different hash
seeds, so that is what the check varies. Library code: the tool (cli/common.py) prints and exits.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass

FLAG = "--check-determinism"
HASH_SEEDS = ("1", "2")
CHILD_ENV = "TESSEL_DETERMINISM_CHILD"  # set in the runs, so a run never checks itself again


@dataclass
class Run:
    seed: str
    returncode: int
    output: str  # the file holding what the run wrote to stdout
    stderr: bytes


@dataclass
class Difference:
    line: int  # 1-based
    first: str
    second: str


def child_args(argv: list[str], output: str | None) -> list[str]:
    """The command line's arguments without the flag and without `-o/--output FILE` (each run writes to
    its own file)."""
    out: list[str] = []
    skip = False
    for i, a in enumerate(argv):
        if skip:
            skip = False
            continue
        if a == FLAG:
            continue
        if output is not None:
            if a in ("-o", "--output") and i + 1 < len(argv) and argv[i + 1] == output:
                skip = True
                continue
            if a in (f"-o{output}", f"--output={output}"):
                continue
        out.append(a)
    return out


def child_command(module: str, prog: str, args: list[str]) -> list[str]:
    """Start the tool's click command from `module` in a fresh interpreter, named `prog`."""
    code = f"import sys; sys.argv[0] = {prog!r}; from {module} import main; main()"
    return [sys.executable, "-c", code, *args]


def run_twice(command: list[str], stdin: bytes | None, workdir: str,
              seeds: tuple[str, ...] = HASH_SEEDS) -> list[Run]:
    """Run `command` once per hash seed, stdout to a file under `workdir`, one after the other."""
    runs = []
    for seed in seeds:
        fd, path = tempfile.mkstemp(prefix=f"run-{seed}-", dir=workdir)
        env = dict(os.environ, PYTHONHASHSEED=seed, **{CHILD_ENV: "1"})
        with os.fdopen(fd, "wb") as out:
            p = subprocess.run(command, input=stdin, stdout=out, stderr=subprocess.PIPE, env=env,
                               stdin=None if stdin is not None else subprocess.DEVNULL)
        runs.append(Run(seed, p.returncode, path, p.stderr))
    return runs


def first_difference(path_a: str, path_b: str, width: int = 160) -> Difference | None:
    """The first line where the two files differ (None when they are byte-identical); long lines are cut
    to `width` characters around the first differing column."""
    with open(path_a, "rb") as fa, open(path_b, "rb") as fb:
        n = 0
        while True:
            a, b = fa.readline(), fb.readline()
            n += 1
            if a != b:
                return Difference(n, _excerpt(a, b, width), _excerpt(b, a, width))
            if not a:
                return None


def _excerpt(line: bytes, other: bytes, width: int) -> str:
    if not line:
        return "(end of output)"
    text = line.rstrip(b"\n").decode("utf-8", "replace")
    same = (i for i, (x, y) in enumerate(zip(line, other, strict=False)) if x != y)
    col = next(same, min(len(line), len(other)))
    if len(text) <= width:
        return text
    start = max(0, min(col - width // 2, len(text) - width))
    return ("..." if start else "") + text[start:start + width] + ("..." if start + width < len(text) else "")
