"""Checked runs: the runtime side of `--check-bounds` (kernels that check their accesses, sanitize.py) and
`--poison` (memory no kernel wrote reads as signalling NaNs).

`RunChecks` belongs to one Executable. With bounds checks it owns the error buffer every instrumented
kernel takes (with its step index) and, after each run, turns a recorded violation into a KernelFault:

    out-of-bounds write in kernel k12_conv2d_relu (ONNX node /layer1/conv2/Conv): element 50176 of a
    50176-element buffer

With poison it fills every buffer of the memory plan (launch results and scratch) before every run with
the signalling-NaN pattern of the float type the buffer holds (f32 0x7FA00000, f64 0x7FF4000000000000,
f16 0x7D00, bf16 0x7FA0) or, for a buffer that holds only integers or booleans, the byte 0xA5. A kernel
that reads memory no earlier kernel wrote then carries the pattern into its results, and
`trace_launches` (tessel-run --check-against) finds the first launch whose results differ.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...ir.core import Func, Op
from ...ir.diagnostics import Diagnostic, DiagnosticError, node_clause
from .kernels.base import arg_ref
from .sanitize import ERROR_BUFFER_BYTES, RECORD, Violation, kernel_names

POISON = {"f32": (0x7FA00000, np.uint32), "f64": (0x7FF4000000000000, np.uint64), "f16": (0x7D00, np.uint16),
          "bf16": (0x7FA0, np.uint16)}
"""The signalling-NaN bit pattern of each float type poisoned buffers are filled with."""
INT_POISON = 0xA5
"""The byte a buffer holding only integers or booleans is filled with."""
EXIT_KERNEL_FAULT = 3
"""tessel-run's exit status for an out-of-bounds access: the compiler made a bad kernel."""


class KernelFault(DiagnosticError):
    """A kernel accessed memory outside its buffers (found by --check-bounds)."""

    exit_code = EXIT_KERNEL_FAULT


def env_flag(name: str) -> bool:
    return os.environ.get(name, "0") not in ("", "0")


def bounds_checked(func: Func) -> bool:
    """Whether the lowered `func`'s kernels check their accesses (its cl.program has checks = ["bounds"])."""
    return any("bounds" in op.attrs.get("checks", []) for op in func.block.ops
               if op.name == "cl.program")


def poison_pattern(dtypes: set[str]) -> np.ndarray:
    """Eight bytes of the pattern for a buffer holding values of `dtypes` (a float type's signalling NaN,
    f32 first; else the integer marker)."""
    for t in ("f32", "f64", "f16", "bf16"):
        if t in dtypes:
            value, kind = POISON[t]
            return np.full(8 // np.dtype(kind).itemsize, value, kind).view(np.uint8)
    return np.full(8, INT_POISON, np.uint8)


def slot_dtypes(func: Func) -> dict[int, set[str]]:
    """The dtypes each buffer of the memory plan holds (scratch buffers count as f32)."""
    out: dict[int, set[str]] = {}
    for op in func.block.ops:
        if op.name != "cl.launch":
            continue
        n = len(op.results)
        buffers: list[int] = list(op.attrs["buffers"])  # type: ignore[arg-type]
        for j, b in enumerate(buffers):
            out.setdefault(int(b), set()).add(op.results[j].type.dtype if j < n else "f32")
    return out


@dataclass
class _Poisoned:
    buffer: Any
    nbytes: int
    pattern: np.ndarray  # 8 bytes
    fill: np.ndarray | None = None  # the whole buffer's bytes (SVM: copied in on the host)


class RunChecks:
    """What a checked Executable does around each run."""

    def __init__(self, exe: Any, bounds: bool, poison: bool):
        self.exe, self.bounds, self.poison = exe, bounds, poison
        self.err: Any = exe._buffer(ERROR_BUFFER_BYTES) if bounds else None
        self.poisoned: list[_Poisoned] = []
        if poison:
            dtypes = slot_dtypes(exe.func)
            sizes = [int(op.attrs["bytes"]) for op in exe.func.block.ops if op.name == "buf.alloc"]
            for i, (slot, nbytes) in enumerate(zip(exe.slots, sizes, strict=True)):
                p = _Poisoned(slot, nbytes, poison_pattern(dtypes.get(i, {"f32"})))
                if exe.svm and nbytes:
                    p.fill = np.resize(p.pattern, nbytes)
                self.poisoned.append(p)

    def hidden(self, step: int) -> tuple[Any, ...]:
        """The arguments an instrumented kernel takes after its buffers."""
        return (self.err, np.int32(step)) if self.bounds else ()

    def before(self, queue: Any) -> None:
        """Clear the error record and poison the memory plan (before a run's first kernel)."""
        cl = self.exe.cl
        if self.bounds:
            if self.exe.svm:
                self.err.mem[:] = 0
            else:
                cl.enqueue_fill_buffer(queue, self.err, np.zeros(1, np.uint32), 0, ERROR_BUFFER_BYTES)
        for p in self.poisoned:
            if not p.nbytes:
                continue
            if p.fill is not None:
                p.buffer.mem[: p.nbytes] = p.fill
            else:
                cl.enqueue_fill_buffer(queue, p.buffer, p.pattern, 0, p.nbytes // 8 * 8)

    def after(self, queue: Any) -> None:
        """Raise a KernelFault when a kernel of the run (finished) went out of bounds."""
        if not self.bounds:
            return
        record = np.empty(len(RECORD), np.int32)
        if self.exe.svm:
            record[:] = self.err.mem[: record.nbytes].view(np.int32)
        else:
            self.exe.cl.enqueue_copy(queue, record, self.err, is_blocking=True)
        v = Violation.read(record.tolist())
        if v is not None:
            raise KernelFault(describe(v, self.exe))


def describe(v: Violation, exe: Any) -> Diagnostic:
    """The diagnostic of violation `v` of a run of `exe`."""
    step = exe.steps[v.step] if 0 <= v.step < len(exe.steps) else None
    kernel = step.name if step is not None else f"#{v.step}"
    what = "write" if v.store else "read"
    params, arrays = kernel_names(exe._source, kernel) if step is not None else ([], [])
    where = node_clause(step.loc) if step is not None else ""
    element, count = v.offset // v.esize, v.extent // v.esize
    if v.local:
        j = -1 - v.arg
        name = arrays[j] if 0 <= j < len(arrays) else "?"
        head = f"out-of-bounds {what} of __local array '{name}' in kernel {kernel}{where}: "
        unit = "array"
    else:
        head = f"out-of-bounds {what} in kernel {kernel}{where}: "
        unit = "buffer"
    d = Diagnostic("error", f"{head}element {element} of a {count}-element {unit}")
    if v.width > v.esize:
        d.note(f"the access is a {v.width // v.esize}-element vector (elements {element} to "
               f"{element + v.width // v.esize - 1})")
    if not v.local and step is not None and 0 <= v.arg < len(params):
        bound = step.arg_names[v.arg] if v.arg < len(step.arg_names) else "?"
        d.note(f"the buffer is the kernel's argument '{params[v.arg]}' ({_bound(bound, step, exe)})")
    lines = exe._source.splitlines()
    if 0 < v.line <= len(lines):
        d.note(f"at line {v.line} of the program: {lines[v.line - 1].strip()[:240]}")
    if v.count > 1:
        d.note(f"{v.count} accesses of this run were out of bounds; the first one recorded is shown "
               "(each was suppressed: a read gave garbage, a write went nowhere)")
    else:
        d.note("the access was suppressed (a read gave garbage, a write went nowhere)")
    return d


def _bound(name: str, step: Any, exe: Any) -> str:
    launch = exe.func.block.ops[step.launch]
    try:
        kind, index = arg_ref(name)
    except ValueError:
        return name
    if kind == "in" and index < len(launch.operands):
        return f"{name}: operand #{index} of the launch, {launch.operands[index].type}"
    if kind == "out" and index < len(launch.results):
        return f"{name}: result #{index} of the launch, {launch.results[index].type}"
    return f"{name}: scratch buffer #{index} of the launch"


def trace_launches(exe: Any, inputs: list[np.ndarray]) -> list[tuple[Op, list[np.ndarray]]]:
    """Run `exe` once step by step on its own queue, reading each launch's results as soon as its kernels
    finished (before a later launch reuses the buffers): every launch op with its results, in order."""
    cl, q = exe.cl, exe._pool_queue
    if exe.checks is not None:
        exe.checks.before(q)
    exe._write_inputs(q, inputs, blocking=True)
    by_launch: dict[int, list[Any]] = {}
    for s in exe.steps:
        by_launch.setdefault(s.launch, []).append(s)
    out = []
    ops = exe.func.block.ops
    for index in sorted(by_launch):
        for s in by_launch[index]:
            if all(s.global_size):
                cl.enqueue_nd_range_kernel(q, s.kernel, s.global_size, s.local_size)
        q.finish()
        op = ops[index]
        results = []
        for r in op.results:
            b = exe.buf[id(r)]
            if isinstance(b, cl.SVM):
                results.append(np.array(b.mem[: r.type.nbytes].view(r.type.np_dtype).reshape(r.type.dims)))
            else:
                a = np.empty(r.type.dims, r.type.np_dtype)
                if a.nbytes:
                    cl.enqueue_copy(q, a, b, is_blocking=True)
                results.append(a)
        out.append((op, results))
    if exe.checks is not None:
        exe.checks.after(q)
    return out


def poisoned(a: np.ndarray) -> int:
    """How many elements of `a` hold a poison pattern exactly (memory no kernel wrote, copied as is)."""
    t = {"float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16"}.get(a.dtype.name)
    if t is not None:
        value, kind = POISON[t]
        return int((np.ascontiguousarray(a).view(kind) == value).sum())
    if a.dtype.kind in "iub" and a.dtype.itemsize:
        marker = np.full(a.dtype.itemsize, INT_POISON, np.uint8).view(a.dtype)[0]
        return int((a == marker).sum())
    return 0
