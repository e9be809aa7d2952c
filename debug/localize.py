"""Which launch went wrong: run a lowered func launch by launch on OpenCL and on the numpy reference and
name the first launch whose results differ (`tessel-run --check-against`, after the outputs differ).

With `--poison` the memory plan starts as signalling NaNs each run, so a kernel that reads memory no
kernel wrote (or leaves part of its result unwritten) shows up here, at the launch that did it, and the
note counts the elements still holding the pattern.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ir.core import Func, Module
from ..ir.diagnostics import node_clause
from .validate import Tolerance, compare_arrays, trace


def first_wrong_launch(module: Module, func: Func, arrays: list[np.ndarray], exe: Any,
                       tol: Tolerance) -> str | None:
    """A note naming the first launch of `func` whose results on `exe` (an Executable) differ from the
    reference's beyond `tol`, or None when every launch agrees (the difference is then in how results
    are read, or not reproducible)."""
    from ..targets.opencl.checks import poisoned, trace_launches

    want = trace(module, func, arrays)
    for op, results in trace_launches(exe, arrays):
        for j, (r, got) in enumerate(zip(op.results, results, strict=True)):
            d = compare_arrays(j, f"#{j}", got, want[id(r)], tol)
            if d is None:
                continue
            launched: list[dict[str, Any]] = list(op.attrs["kernels"])  # type: ignore[arg-type]
            kernels = ", ".join(dict.fromkeys(k["name"] for k in launched)) or "(assembled)"
            where = node_clause(op.loc)
            raw = poisoned(got)
            poison = (f"; {raw} of them hold the poison pattern: memory no kernel wrote"
                      if raw else "")
            return (f"the first launch whose results differ is kernel {kernels}{where}: result {d.name} "
                    f"differs at {list(d.where)}: {d.got!r} vs {d.want!r} ({d.count} of {d.size} elements "
                    f"beyond {tol.describe()}{poison})")
    return None
