"""Device memory limits: whether a lowered func fits the device it is loaded on, said before anything is
allocated or launched (issue 19).

An Executable allocates on its device one buffer per `buf.alloc` of the memory plan (results and scratch,
each buffer reused by values whose lifetimes do not overlap), one per func argument (the inputs), and one
per load-time value a launch reads (the weights: constants, and the `pack`s and views of them). OpenCL
bounds each allocation by the device's CL_DEVICE_MAX_MEM_ALLOC_SIZE and all of them together by its
CL_DEVICE_GLOBAL_MEM_SIZE. Past either, an allocation fails with CL_INVALID_BUFFER_SIZE or
CL_MEM_OBJECT_ALLOCATION_FAILURE, or (allocation being lazy on many drivers) the first launch does, with
nothing that names the model. `check_memory` fails first, with one error naming the limit and notes
naming the largest buffers, what they hold and the ONNX nodes that write (or read) them.

`TESSEL_DEVICE_MEMORY=BYTES[,MAX_ALLOC]` makes the device look smaller: its global memory BYTES and its
largest allocation MAX_ALLOC (default: the smaller of BYTES and the device's own). Sizes are bytes, or
numbers with a K, M or G suffix (KiB, MiB, GiB). For checking that a model fits a smaller device than
this one, and for tests.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from ...ir.attributes import ResourceAttr
from ...ir.core import Func, Op, Value
from ...ir.diagnostics import Diagnostic, DiagnosticError, onnx_nodes

ENV = "TESSEL_DEVICE_MEMORY"
NOTES = 5
"""Buffers named in the notes of an error, largest first."""
_SIZE = re.compile(r"\s*(\d+)\s*([kmg]i?b?|b)?\s*", re.IGNORECASE)
_SCALE = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
_DEVICE_SIDE = ("cl.launch", "buf.alloc", "cl.program", "return")
"""Ops whose results are not load-time values (buf.view is either, by its operand)."""


@dataclass(frozen=True)
class Limits:
    """What the device allows: all buffers together, one buffer, and a name for messages."""

    global_mem: int
    max_alloc: int
    device: str = "the device"
    by_env: bool = False  # TESSEL_DEVICE_MEMORY set them

    def said(self, n: int) -> str:
        return mib(n) + (f", by {ENV}" if self.by_env else "")


@dataclass
class DeviceBuffer:
    """One allocation an Executable makes: `kind` 'plan' (a memory-plan buffer), 'input' or 'weight'."""

    kind: str
    bytes: int
    what: str  # what it holds, as a note says it
    nodes: list[str] = field(default_factory=list)  # ONNX nodes writing it (plan) or reading it

    def note(self) -> str:
        verb = "written by" if self.kind == "plan" else "read by"
        return f"{mib(self.bytes)}: {self.what}" + (f", {verb} {_names(self.nodes)}" if self.nodes else "")


def mib(n: int) -> str:
    """A size for a message: MiB (KiB or bytes when smaller)."""
    if n >= 1 << 20:
        return f"{n / 2**20:.1f} MiB"
    if n >= 1 << 10:
        return f"{n / 2**10:.1f} KiB"
    return f"{n} bytes"


def _names(nodes: Sequence[str], most: int = 3) -> str:
    shown = ", ".join(nodes[:most])
    return shown + (f" (+{len(nodes) - most} more)" if len(nodes) > most else "")


def _launch(op: Op) -> str:
    """A launch by its first ONNX node, and how many more it fused."""
    nodes = onnx_nodes(op.loc) or [op.name]
    return nodes[0] + (f" (fused with {len(nodes) - 1} more)" if len(nodes) > 1 else "")


def parse_size(text: str) -> int:
    """Bytes of '1073741824', '512M', '2GiB', '64k' (binary units); ValueError otherwise."""
    m = _SIZE.fullmatch(text)
    if m is None:
        raise ValueError(text)
    return int(m.group(1)) * _SCALE[(m.group(2) or "")[:1].lower()]


def limits(device: Any = None, global_mem: int | None = None, max_alloc: int | None = None) -> Limits | None:
    """The limits to check against: `global_mem` and `max_alloc` when given, else TESSEL_DEVICE_MEMORY's,
    else the pyopencl `device`'s; None when there is nothing to check against."""
    name = f"device '{device.name.strip()}'" if device is not None else "the device"
    explicit = global_mem
    own = (int(device.global_mem_size), int(device.max_mem_alloc_size)) if device is not None else None
    text = os.environ.get(ENV, "").strip()
    if text and global_mem is None:
        try:
            sizes = [parse_size(p) for p in text.split(",")]
            if len(sizes) > 2 or not all(sizes):
                raise ValueError(text)
        except ValueError:
            raise DiagnosticError(Diagnostic(
                "error", f"{ENV}='{text}' is not BYTES[,MAX_ALLOC] (sizes in bytes, or with a K, M or G "
                "suffix)")) from None
        global_mem = sizes[0]
        if max_alloc is None:
            max_alloc = sizes[1] if len(sizes) > 1 else min(sizes[0], own[1] if own else sizes[0])
    if global_mem is None:
        if own is None and max_alloc is None:
            return None
        global_mem = own[0] if own else 1 << 62  # (only max_alloc given)
    if max_alloc is None:
        max_alloc = min(own[1], global_mem) if own else global_mem
    return Limits(int(global_mem), int(max_alloc), name, bool(text) and explicit is None)


def device_buffers(func: Func, named: bool = True) -> list[DeviceBuffer]:
    """Every buffer an Executable of the lowered `func` allocates on its device (runtime.py: the memory
    plan's, the inputs', the weights'), in the order it allocates them. `named=False` skips naming the
    inputs (naming values walks the func: most of the time a check takes)."""
    ops = func.block.ops
    plan = [DeviceBuffer("plan", max(int(op.attrs["bytes"]), 4), f"memory-plan buffer {i}")
             for i, op in enumerate(o for o in ops if o.name == "buf.alloc")]
    held: list[list[tuple[int, str, str]]] = [[] for _ in plan]  # per plan buffer: its values' (bytes, what,
    # writer)
    readers: dict[int, list[str]] = {}  # value id -> the ONNX nodes of the launches reading it
    host: dict[int, Op] = {}  # load-time value id -> its producer
    uploads: dict[int, Value] = {}  # in the order launches first read them
    for op in ops:
        if op.name == "cl.launch":
            n = len(op.results)
            scratch = _ints(op, "scratch")
            for j, b in enumerate(_ints(op, "buffers")):
                if not 0 <= b < len(plan):
                    continue
                if j < n:
                    held[b].append((op.results[j].type.nbytes, str(op.results[j].type), _launch(op)))
                else:
                    held[b].append((scratch[j - n] if j - n < len(scratch) else 0, "scratch", _launch(op)))
            for v in op.operands:
                names = readers.setdefault(id(v), [])
                if _launch(op) not in names:
                    names.append(_launch(op))
                if id(v) in host:
                    uploads.setdefault(id(v), v)
        elif op.name == "buf.view":
            if id(op.operands[0]) in host:
                host[id(op.results[0])] = op
        elif op.name not in _DEVICE_SIDE:
            for r in op.results:
                host[id(r)] = op
    for buf, values in zip(plan, held, strict=True):
        values.sort(key=lambda v: -v[0])  # the largest value first, and its writer
        if values:
            more = len(values) - 1
            buf.what += f" holding {values[0][1]}" + (f" (and {more} smaller value{'s' * (more > 1)})"
                                                     if more else "")
        buf.nodes = list(dict.fromkeys(w for _, _, w in values))
    from ...ir.interpreter import input_names

    names = input_names(func) if named else [str(i) for i in range(len(func.args))]
    inputs = [DeviceBuffer("input", max(v.type.nbytes, 4), f"input '{name}' {v.type}", readers.get(id(v), []))
              for name, v in zip(names, func.args, strict=True)]
    weights = [DeviceBuffer("weight", max(v.type.nbytes, 4), f"weight {_weight_name(v, host)} {v.type}",
                            readers.get(id(v), [])) for v in uploads.values()]
    return plan + inputs + weights


def _ints(op: Op, key: str) -> list[int]:
    return [int(x) for x in cast(list, op.attrs.get(key, []))]


def _weight_name(v: Value, host: dict[int, Op]) -> str:
    """'conv.weight' for a constant, 'conv.weight' packed for a pack of one, else the producing op."""
    op = host[id(v)]
    steps = []
    while op.name != "const" and op.operands and id(op.operands[0]) in host:
        steps.append(op.name)
        op = host[id(op.operands[0])]
    value = op.attrs.get("value")
    if op.name == "const" and isinstance(value, ResourceAttr):
        name = f"'{value.name}'"
    elif op.name == "const" and op.loc and not op.loc[0].startswith("onnx:"):
        name = f"'{op.loc[0]}'"
    elif op.loc:
        name = f"of {', '.join(onnx_nodes(op.loc))}"
    else:
        name = "(a constant)" if op.name == "const" else f"({op.name})"
    return name + (f" ({', '.join(dict.fromkeys(reversed(steps)))})" if steps else "")


def check_memory(func: Func, device: Any = None, *, global_mem: int | None = None,
                 max_alloc: int | None = None) -> None:
    """Raise a DiagnosticError when the lowered `func` needs a buffer larger than the device's largest
    allocation, or more memory in all than the device has (`limits` says which limits: these arguments,
    TESSEL_DEVICE_MEMORY or the pyopencl `device`); nothing without limits."""
    lim = limits(device, global_mem, max_alloc)
    if lim is None:
        return
    sizes = [b.bytes for b in device_buffers(func, named=False)]
    if sum(sizes) <= lim.global_mem and max(sizes, default=0) <= lim.max_alloc:
        return
    buffers = sorted(device_buffers(func), key=lambda b: -b.bytes)
    errors = []
    big = [b for b in buffers if b.bytes > lim.max_alloc]
    if big:
        d = Diagnostic("error", f"func @{func.name} needs a buffer of {mib(big[0].bytes)}, more than "
                       f"{lim.device} allows in one allocation ({lim.said(lim.max_alloc)})"
                       + (f"; {len(big)} buffers are over it" if len(big) > 1 else ""))
        for b in big[:NOTES]:
            d.note(b.note())
        errors.append(d)
    total = sum(b.bytes for b in buffers)
    if total > lim.global_mem:
        parts = {k: sum(b.bytes for b in buffers if b.kind == k) for k in ("plan", "weight", "input")}
        d = Diagnostic("error", f"func @{func.name} needs {mib(total)} of device memory "
                       f"({mib(parts['plan'])} memory plan, {mib(parts['weight'])} weights, "
                       f"{mib(parts['input'])} inputs), more than {lim.device} has "
                       f"({lim.said(lim.global_mem)})")
        for b in buffers[:NOTES]:
            d.note(b.note())
        if len(buffers) > NOTES:
            rest = buffers[NOTES:]
            d.note(f"and {len(rest)} smaller buffers ({mib(sum(b.bytes for b in rest))})")
        errors.append(d)
    if errors:
        raise DiagnosticError(errors)
