"""The OpenCL runtime: executes a lowered func (`cl.program`, `buf.alloc`, `cl.launch`, `buf.view`) with
pyopencl.

Loading (`Executable(...)`) does the once-per-model work: builds the program (cached by source hash in this
process and, through pyopencl's binary cache, on disk), evaluates the load-time ops (constants and the
`pack`s of constant weights) with their numpy references and uploads what the launches read, allocates the
memory plan's buffers, and creates every kernel object with its arguments set. A run then only copies the
inputs in, enqueues every launch on one in-order queue, copies the results out and finishes once.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...ir.core import Func, Module, Op
from ...ir.diagnostics import Diagnostic, DiagnosticError
from ...ir.ops.registry import OpError, get_op, op_sig
from . import device as dev

_PROGRAMS: dict[tuple[str, int], Any] = {}


def cache_dir() -> str:
    """Where compiled programs and calibrations are kept: $TESSEL_CACHE_DIR, else ~/.cache/tessel."""
    base = os.environ.get("TESSEL_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tessel"
    )
    return base


def build_program(context: Any, source: str, options: Sequence[str] = ()) -> Any:
    """Build once per (source, context) in this process; pyopencl keeps binaries on disk by source hash."""
    cl = dev.cl()
    key = (hashlib.sha256((source + "\0" + " ".join(options)).encode()).hexdigest(), id(context))
    prg = _PROGRAMS.get(key)
    if prg is None:
        path = os.path.join(cache_dir(), "opencl")
        try:
            os.makedirs(path, exist_ok=True)
        except OSError:
            path = None  # type: ignore[assignment]
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                prg = cl.Program(context, source).build(options=["-w", *options], cache_dir=path)
            except cl.RuntimeError as e:
                raise DiagnosticError(
                    Diagnostic("error", f"the OpenCL program does not build: {e}")
                ) from None
        _PROGRAMS[key] = prg
    return prg


@dataclass
class Step:
    """One kernel enqueue of one launch."""

    kernel: Any
    name: str
    global_size: tuple[int, ...]
    local_size: tuple[int, ...] | None
    launch: int  # index of its cl.launch in the func
    op: str  # the op of the launch's reference body
    loc: tuple[str, ...]
    flops: int = 0
    bytes: int = 0


@dataclass
class RunStats:
    seconds: list[float] = field(default_factory=list)
    kernel_ns: dict[int, list[int]] = field(default_factory=dict)  # step index -> times


class Executable:
    """A lowered func loaded on one device, ready to run many times."""

    def __init__(self, module: Module, func: Func, device: Any = None, profile: bool = False):
        cl = dev.cl()
        self.cl = cl
        self.module, self.func = module, func
        self.device = device if device is not None else dev.pick_device()
        self.context = dev.context_for(self.device)
        props = cl.command_queue_properties.PROFILING_ENABLE if profile else 0
        self.queue = cl.CommandQueue(self.context, properties=props)
        self.profile = profile
        ops = func.block.ops
        source = next((op.attrs["source"] for op in ops if op.name == "cl.program"), None)
        if source is None:
            raise DiagnosticError(
                Diagnostic(
                    "error",
                    f"func @{func.name} is not lowered for OpenCL (no "
                    "cl.program): run tessel-codegen --target=opencl first",
                )
            )
        t0 = time.perf_counter()
        self.program = build_program(self.context, source)
        self.build_seconds = time.perf_counter() - t0
        # the memory plan's slots (and the inputs below) in fine-grained SVM where the device has it (PoCL
        # on a CPU): a run then writes its inputs and reads its outputs with host copies instead of
        # enqueued transfers, which cost PoCL ~10-30 us of dispatch apiece (a transformer run: 15%)
        caps = 0 if os.environ.get("TESSEL_NO_SVM") else getattr(self.device, "svm_capabilities", 0)
        self.svm = bool(caps & getattr(cl.device_svm_capabilities, "FINE_GRAIN_BUFFER", 0))
        self.slots = [self._buffer(int(op.attrs["bytes"])) for op in ops if op.name == "buf.alloc"]
        self.peak_bytes = sum(max(int(op.attrs["bytes"]), 4) for op in ops if op.name == "buf.alloc")
        self.buf: dict[int, Any] = {}  # value id -> device buffer
        self.host: dict[int, np.ndarray] = {}  # value id -> load-time array
        self.args = [self._buffer(v.type.nbytes) for v in func.args]
        for v, b in zip(func.args, self.args, strict=True):
            self.buf[id(v)] = b
        self.weight_bytes = 0
        self.steps: list[Step] = []
        self.outputs: list[Any] = []
        for index, op in enumerate(ops):
            self._load(index, op)

    # loading ----------------------------------------------------------------------------------------
    def _buffer(self, nbytes: int) -> Any:
        """A read-write device buffer of `nbytes`: fine-grained SVM (a `cl.SVM` whose `.mem` is the host's
        byte view) when `self.svm`, else a `cl.Buffer`."""
        cl = self.cl
        if self.svm:
            flags = cl.svm_mem_flags.READ_WRITE | cl.svm_mem_flags.SVM_FINE_GRAIN_BUFFER
            return cl.SVM(cl.svm_empty(self.context, flags, max(nbytes, 4), np.uint8, alignment=128))
        return cl.Buffer(self.context, cl.mem_flags.READ_WRITE, max(nbytes, 4))

    def _device(self, v: Any) -> Any:
        b = self.buf.get(id(v))
        if b is None:
            a = np.ascontiguousarray(self.host[id(v)])
            mf = self.cl.mem_flags
            b = (
                self.cl.Buffer(self.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a)
                if a.nbytes
                else self.cl.Buffer(self.context, mf.READ_ONLY, 4)
            )
            self.weight_bytes += a.nbytes
            self.buf[id(v)] = b
        return b

    def _load(self, index: int, op: Op) -> None:
        if op.name in ("cl.program", "buf.alloc"):
            return
        if op.name == "return":
            self.outputs = list(op.operands)
            return
        if op.name == "buf.view":
            src = op.operands[0]
            if id(src) in self.host and id(src) not in self.buf:
                self.host[id(op.results[0])] = self.host[id(src)].reshape(op.results[0].type.dims)
            else:
                self.buf[id(op.results[0])] = self._device(src)
            return
        if op.name == "cl.launch":
            self._launch(index, op)
            return
        # a load-time op: every operand is known on the host
        opdef = get_op(op.name)
        if opdef is None or any(id(v) not in self.host for v in op.operands):
            raise DiagnosticError(
                Diagnostic(
                    "error",
                    f"'{op.name}' is not lowered for OpenCL: it needs values computed on the device",
                    op.pos,
                    op.loc,
                )
            )
        try:
            with np.errstate(all="ignore"):
                out = opdef.reference(
                    op_sig(op, self.module.resources), *[self.host[id(v)] for v in op.operands]
                )
        except OpError as e:
            raise DiagnosticError(Diagnostic("error", f"'{op.name}' op {e}", op.pos, op.loc)) from None
        outs = list(out) if isinstance(out, list | tuple) else [out]
        for r, a in zip(op.results, outs, strict=True):
            self.host[id(r)] = np.asarray(a).astype(r.type.np_dtype, copy=False)

    def _launch(self, index: int, op: Op) -> None:
        n = len(op.results)
        buffers = [self.slots[b] for b in op.attrs["buffers"]]
        for j, at in enumerate(op.attrs.get("offsets", [])):
            if at:  # the result lives inside a concatenation assembled in place (lower.plan_memory)
                buffers[j] = self._sub_buffer(buffers[j], int(at), op.results[j].type.nbytes, op)
        for r, b in zip(op.results, buffers[:n], strict=True):
            self.buf[id(r)] = b
        table = {f"in{i}": self._device(v) for i, v in enumerate(op.operands)}
        table.update({f"out{j}": b for j, b in enumerate(buffers[:n])})
        table.update({f"tmp{k}": b for k, b in enumerate(buffers[n:])})
        body = op.regions[0].block.ops
        inner = body[-2] if len(body) >= 2 else body[-1]
        kernels = op.attrs["kernels"]
        nbytes = sum(v.type.nbytes for v in op.operands) + sum(r.type.nbytes for r in op.results)
        for i, k in enumerate(kernels):
            kobj = self.cl.Kernel(self.program, k["name"])
            kobj.set_args(*[table[a] for a in k["args"]])
            last = i == len(kernels) - 1
            self.steps.append(
                Step(
                    kobj,
                    k["name"],
                    tuple(k["global"]),
                    tuple(k["local"]) or None,
                    index,
                    inner.name,
                    op.loc,
                    int(op.attrs.get("flops", 0)) if last else 0,
                    nbytes if last else 0,
                )
            )

    def _sub_buffer(self, slot: Any, offset: int, size: int, op: Op) -> Any:
        align = max(int(self.device.mem_base_addr_align) // 8, 1)
        if offset % align:
            raise DiagnosticError(Diagnostic(
                "error", f"a result at byte offset {offset} of its buffer needs sub-buffers aligned to "
                f"{align} bytes on this device: lower the module for it (tessel-codegen --device)",
                op.pos, op.loc))
        if isinstance(slot, self.cl.SVM):
            return self.cl.SVM(slot.mem[offset : offset + max(size, 4)])
        return slot.get_sub_region(offset, max(size, 4))

    # running ----------------------------------------------------------------------------------------
    def enqueue(self, inputs: Sequence[np.ndarray]) -> tuple[list[np.ndarray], list[Any]]:
        cl, q = self.cl, self.queue
        keep = []
        for a, b in zip(inputs, self.args, strict=True):
            a = np.ascontiguousarray(a)
            if isinstance(b, cl.SVM):  # the previous run has finished (q.finish below): nothing reads it
                b.mem[: a.nbytes] = a.reshape(-1).view(np.uint8)
                continue
            keep.append(a)
            if a.nbytes:
                cl.enqueue_copy(q, b, a, is_blocking=False)
        events = []
        for s in self.steps:
            if all(s.global_size):
                events.append(cl.enqueue_nd_range_kernel(q, s.kernel, s.global_size, s.local_size))
            else:
                events.append(None)
        results = []
        shared = []
        for v in self.outputs:
            if id(v) in self.host:
                results.append(np.array(self.host[id(v)]))
                continue
            out = np.empty(v.type.dims, v.type.np_dtype)
            b = self.buf[id(v)]
            if isinstance(b, cl.SVM):  # read on the host once the queue has finished
                shared.append((out, b.mem))
            elif out.nbytes:
                cl.enqueue_copy(q, out, b, is_blocking=False)
            results.append(out)
        q.finish()
        for out, mem in shared:
            out.reshape(-1).view(np.uint8)[:] = mem[: out.nbytes]
        del keep
        return results, events

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return self.enqueue(inputs)[0]

    def measure(
        self, inputs: Sequence[np.ndarray], repeat: int, warmup: int = 1
    ) -> tuple[list[np.ndarray], RunStats]:
        """Run `warmup` untimed times, then `repeat` timed ones; kernel times too when profiling."""
        results: list[np.ndarray] = []
        for _ in range(warmup):
            results = self.run(inputs)
        stats = RunStats()
        for _ in range(max(repeat, 1)):
            t0 = time.perf_counter()
            results, events = self.enqueue(inputs)
            stats.seconds.append(time.perf_counter() - t0)
            if self.profile:
                for i, e in enumerate(events):
                    if e is not None:
                        stats.kernel_ns.setdefault(i, []).append(e.profile.end - e.profile.start)
        return results, stats


def opencl_executor(module: Module, func: Func) -> Any:
    """The onnx.backend adapter's executor factory: lower (when needed) for the default device and load."""
    from .lower import is_lowered, lower_module

    device = dev.pick_device()
    if not is_lowered(module):
        lower_module(module, dev.device_info(device))
    exe = Executable(module, func, device)
    return exe.run
