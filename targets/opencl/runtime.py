"""The OpenCL runtime: executes a lowered func (`cl.program`, `buf.alloc`, `cl.launch`, `buf.view`) with
pyopencl.

Loading (`Executable(...)`) does the once-per-model work: builds the program (cached by source hash in this
process and, by its binaries, on disk: cache.py), evaluates the load-time ops (constants and the
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
from . import cache as program_cache
from . import device as dev
from .adapt import Adaptive, Choice, SlowRuns, Trial
from .cache import BUILD_LOG as BUILD_LOG
from .checks import RunChecks, bounds_checked, env_flag
from .memory import check_memory

_PROGRAMS: dict[tuple[str, int], Any] = {}


def cache_dir() -> str:
    """Where compiled programs and calibrations are kept: $TESSEL_CACHE_DIR, else ~/.cache/tessel."""
    base = os.environ.get("TESSEL_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tessel"
    )
    return base


def build_program(context: Any, source: str, options: Sequence[str] = (), devices: Sequence[Any] = (),
                  name: str = "program") -> Any:
    """Build once per (source, context, devices) in this process (all the context's devices when none are
    named), with the devices' build preamble (device.with_build_preamble); on disk, cache.py keeps the
    binaries under <cache>/opencl, checked by hash on every load."""
    cl = dev.cl()
    built = dev.with_build_preamble(source, list(devices) or list(context.devices))
    key = (
        hashlib.sha256((built + "\0" + " ".join(options)).encode()).hexdigest(),
        id(context),
        tuple(d.int_ptr for d in devices),
    )
    prg = _PROGRAMS.get(key)
    if prg is None:
        try:
            prg = program_cache.build_program(
                context, built, ["-w", *options], devices, os.path.join(cache_dir(), "opencl"), name
            )
        except cl.RuntimeError as e:
            raise DiagnosticError(Diagnostic("error", f"the OpenCL program does not build: {e}")) from None
        _PROGRAMS[key] = prg
    return prg


@dataclass
class Step:
    """One kernel enqueue of one launch."""

    kernel: Any  # built for the device itself; the inline companion's are Executable._inline_kernels()
    name: str
    global_size: tuple[int, ...]
    local_size: tuple[int, ...] | None
    launch: int  # index of its cl.launch in the func
    op: str  # the op of the launch's reference body
    loc: tuple[str, ...]
    flops: int = 0
    bytes: int = 0
    args: tuple[Any, ...] = ()  # the buffers bound to the kernel, to bind again on another program
    arg_names: tuple[str, ...] = ()  # in<i> (read), out<j> and tmp<k> (written), as the launch names them
    hidden: tuple[Any, ...] = ()  # the arguments after the buffers of a checked kernel (checks.py)
    helper: bool = False  # not its op's main kernel (a repack, a transform): its op's FLOPs are not its


def _nbytes(buffer: Any) -> int:
    """The bytes of a kernel argument: a cl.Buffer's size, or an SVM allocation's."""
    size = getattr(buffer, "size", None)
    if isinstance(size, int):
        return size
    mem = getattr(buffer, "mem", None)
    return int(getattr(mem, "nbytes", 0))


EXECUTIONS = ("auto", "pool", "inline", "cooperative")
"""How an Executable runs on a device with an inline companion (device.inline_companion): `pool` on the
device's own queue (PoCL's worker threads), `inline` on the companion's (the calling thread),
`cooperative` as persistent kernels whose work-groups both share (cooperative.py), `auto` on the pool until
the other ways are built (in the background, once that pays: adapt.py) and compared over the runs, then on
whichever ran that model fastest (`settle` also tries a hybrid plan of pool and inline; docs/opencl.md
"Execution")."""
@dataclass
class RunStats:
    seconds: list[float] = field(default_factory=list)
    kernel_ns: dict[int, list[int]] = field(default_factory=dict)  # step index -> times


class Executable(Adaptive):
    """A lowered func loaded on one device, ready to run many times."""

    def __init__(
        self,
        module: Module,
        func: Func,
        device: Any = None,
        profile: bool = False,
        execution: str | None = None,
        poison: bool | None = None,
    ):
        """`poison` (default: $TESSEL_POISON set and not 0): fill the memory plan with signalling NaNs
        before every run (checks.py). A program lowered with bounds checks reports its kernels'
        out-of-bounds accesses as a KernelFault after the run; checked runs go on the pool only."""
        cl = dev.cl()
        self.cl = cl
        self.module, self.func = module, func
        self.device = device if device is not None else dev.pick_device()
        self.context = dev.context_for(self.device)
        self._props = cl.command_queue_properties.PROFILING_ENABLE if profile else 0
        self.queue = cl.CommandQueue(self.context, self.device, properties=self._props)
        self.profile = profile
        # an explicit choice, else the environment's, else `auto`; under `auto` the func's `execution`
        # attribute (a tuning record's, tessel-codegen --tuning-records) is the way runs start in
        given = execution or os.environ.get("TESSEL_EXECUTION")
        self.execution = given or "auto"
        tuned = "" if given else str(func.attrs.get("execution", ""))
        self.preferred = tuned if tuned in ("pool", "inline", "cooperative") else ""
        """The way a tuning record says to run in (`auto` then starts there and only rechecks it)."""
        if self.execution not in EXECUTIONS:
            raise DiagnosticError(Diagnostic(
                "error", f"unknown execution '{self.execution}' (expected one of {', '.join(EXECUTIONS)})"))
        self.companion = dev.inline_companion(self.device)
        self.running_on = "pool" if self.companion is not None else "device"
        """Where runs go now: 'device' (no companion), 'pool', 'inline', 'cooperative' or 'hybrid' (pool and
        inline, by placement)."""
        self.adapt_note = ""
        """Why `running_on` is what it is, once `auto` has decided (times measured)."""
        self._runs = 0
        self._choice: Choice | None = None  # once `auto` has compared the ways
        self._slow = SlowRuns()  # notices when the choice's runs slow down (another process on a core)
        self._slowed = ""  # why the next run is to compare the ways again (none: "")
        self._compare_again_at = 0.0  # perf_counter() time before which the slowing is not acted on
        self._inline: tuple[Any, list[Any]] | None = None  # (queue, kernels per step)
        self._cooperative: Any = None  # the cooperative.Runner, once made (None: not made, or impossible)
        self._cooperative_tried = False  # whether _cooperative_runner has tried to make it
        self._trial: Trial | None = None  # `auto`'s comparison in progress over the runs
        self._preparing = ""  # the other ways' background build and load (adapt.py _count)
        self._loader: Any = None
        self._loaded = ""
        self._preparer: Any = None  # the prepare.Preparer (child process) while it runs
        self._estimate: tuple[float, float] | None = None  # (their build seconds, a run's saving)
        self._pool_seconds = 0.0  # the last run's seconds on the pool
        self._busy = 0.0  # seconds the runs of `auto`'s choice took, all told (rechecks are a share of it)
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
        self._source = source
        missing = dev.missing_features(source, self.device)
        if missing:
            raise DiagnosticError(Diagnostic(
                "error", f"func @{func.name} was compiled for a device with {', '.join(missing)}, which "
                f"{dev.describe(self.device)} lacks: compile it again for this device (tessel-codegen "
                "--device auto, or tessel.compile)"))
        check_memory(func, self.device)  # too big for the device: say so before building or allocating
        t0 = time.perf_counter()
        self._built_key = program_cache.built_key(source, "model", [self.device])
        self._cold = not program_cache.was_built(self._records_folder(), self._built_key)
        """Whether this model's program was never built here: its first run then compiles the kernels."""
        self.program = build_program(self.context, source, devices=[self.device], name="model")
        self.build_seconds = time.perf_counter() - t0
        # the memory plan's slots (and the inputs below) in fine-grained SVM where the device has it (PoCL
        # on a CPU): a run then writes its inputs and reads its outputs with host copies instead of
        # enqueued transfers, which cost PoCL ~10-30 us of dispatch apiece (a transformer run: 15%)
        caps = 0 if os.environ.get("TESSEL_NO_SVM") else getattr(self.device, "svm_capabilities", 0)
        self.svm = bool(caps & getattr(cl.device_svm_capabilities, "FINE_GRAIN_BUFFER", 0))
        self.slots = [self._buffer(int(op.attrs["bytes"])) for op in ops if op.name == "buf.alloc"]
        bounds = bounds_checked(func)
        poison = env_flag("TESSEL_POISON") if poison is None else poison
        self.checks = RunChecks(self, bounds, poison) if bounds or poison else None
        if self.checks is not None:
            if self.execution == "cooperative":
                raise DiagnosticError(Diagnostic(
                    "error", "cooperative execution cannot run checked kernels (--check-bounds, --poison)"))
            if self.execution == "auto":  # no comparing of ways: checked runs are for finding bugs
                self.execution = "pool"
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
        self._host_views()
        self._pool_queue = self.queue
        self._live = [i for i, s in enumerate(self.steps) if all(s.global_size)]  # the steps with work
        self._use_pool()
        self._warming: list[Any] = []  # warm.py's children compiling this program's kernels
        self._first_noted = False  # whether the first run has been recorded (_first_run)
        if (self._cold and self.running_on in ("pool", "device") and self.execution in ("auto", "pool")
                and not self.preferred and not program_cache.stores_binaries([self.device])):
            from . import warm

            self._warming = warm.start(self)
        if self.companion is not None and self.execution == "auto" and not self.preferred:
            self._ready_to_prepare()
        if self.companion is not None and self.execution == "inline":
            self._use_inline()
        if self.execution == "cooperative":
            if not self._use_cooperative():
                raise DiagnosticError(Diagnostic(
                    "error", "cooperative execution needs PoCL's pthread device with its basic companion "
                    "and fine-grained SVM"))

    def __del__(self) -> None:
        if getattr(self, "_warming", None):
            from . import warm

            warm.stop(self._warming)
        if getattr(self, "_preparer", None) is not None:
            self._preparer.close()
        if getattr(self, "_cooperative", None):
            self._cooperative.drain()  # a worker may still be leaving the last run: keep its buffers

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
            a = np.asarray(self.host[id(v)])
            mf = self.cl.mem_flags
            if self.svm:  # one address space for every buffer: cooperative runs pass addresses
                b = self._buffer(a.nbytes)
                if a.nbytes:  # one strided copy straight in (a packed weight is often a view: vgg19 0.6 s)
                    np.copyto(b.mem[: a.nbytes].view(a.dtype).reshape(a.shape), a, casting="no")
            elif a.nbytes:
                a = np.ascontiguousarray(a)
                b = self.cl.Buffer(self.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a)
            else:
                b = self.cl.Buffer(self.context, mf.READ_ONLY, 4)
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
        counted = int(op.attrs.get("flops_kernel", -1)) % max(len(kernels), 1)  # gets the op's flops
        for i, k in enumerate(kernels):
            args = tuple(table[a] for a in k["args"])
            hidden = self.checks.hidden(len(self.steps)) if self.checks is not None else ()
            kobj = self.cl.Kernel(self.program, k["name"])
            kobj.set_args(*args, *hidden)
            counts = i == counted
            # a kernel that is not the op's main one (a repack, a Winograd transform) moves data: its
            # bytes are its buffers', each read or written once, so --profile rates it by bandwidth
            moved = nbytes if counts else sum(_nbytes(a) for a in args)
            self.steps.append(
                Step(
                    kobj,
                    k["name"],
                    tuple(k["global"]),
                    tuple(k["local"]) or None,
                    index,
                    inner.name,
                    op.loc,
                    int(op.attrs.get("flops", 0)) if counts else 0,
                    moved,
                    args,
                    tuple(k["args"]),
                    hidden,
                    not counts,
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

    # execution: on the pool, on the inline companion, or on both in segments --------------------------
    def _inline_kernels(self) -> tuple[Any, list[Any]]:
        """The companion's queue and kernel objects (bound to the same buffers, which the two devices
        share), made the first time."""
        assert self.companion is not None
        if self._inline is None:
            prg = build_program(self.context, self._source, devices=[self.companion], name="inline")
            kernels = []
            for s in self.steps:
                k = self.cl.Kernel(prg, s.name)
                k.set_args(*s.args, *s.hidden)
                kernels.append(k)
            queue = self.cl.CommandQueue(self.context, self.companion, properties=self._props)
            self._inline = (queue, kernels)
        return self._inline

    def _set_plan(self, where: Sequence[str]) -> None:
        """Run the j-th step with work on where[j] ('pool' or 'inline'); consecutive steps of one side are
        a segment, and a run finishes each segment's queue before the next segment's device reads it."""
        if self._cooperative:
            self._cooperative.park()  # its pool work-group would spin on a core these kernels need
        segments: list[tuple[Any, list[tuple[Any, Any, Any]]]] = []
        for side, i in zip(where, self._live, strict=True):
            s = self.steps[i]
            if side == "inline":
                queue, kernels = self._inline_kernels()
                q, k = queue, kernels[i]
            else:
                q, k = self._pool_queue, s.kernel
            if not segments or segments[-1][0] is not q:
                segments.append((q, []))
            segments[-1][1].append((k, s.global_size, s.local_size))
        self._segments = segments or [(self._pool_queue, [])]
        self.queue = self._segments[-1][0]
        self.placement = list(where)
        """The side of each step with work, as the last _set_plan / place gave it."""
        sides = set(where)
        self.running_on = ("hybrid" if len(sides) > 1 else "inline" if sides == {"inline"}
                           else "pool" if self.companion is not None else "device")

    def place(self, where: Sequence[str]) -> None:
        """Run each step with work where `where` says ('pool' or 'inline', as another Executable's
        `placement` of the same func; or 'cooperative' for every step): a profiling copy then runs as the
        one it profiles."""
        if list(where) == ["cooperative"] * len(self._live) and where:
            if not self._use_cooperative():
                raise ValueError("this device cannot run cooperatively")
            return
        if len(where) != len(self._live) or not set(where) <= {"pool", "inline"}:
            raise ValueError(f"a placement of {len(self._live)} 'pool' or 'inline' steps, got {where!r}")
        if "inline" in where and self.companion is None:
            raise ValueError("this device has no inline companion to place steps on")
        self._set_plan(where)

    def _cooperative_runner(self) -> Any:
        """The cooperative.Runner of this executable (made the first time), or None where the device
        cannot run cooperatively."""
        if not self._cooperative_tried:
            self._cooperative_tried = True
            if self.companion is not None and self.svm and self.checks is None:
                from . import cooperative as coop

                steps = [self.steps[i] for i in self._live]
                tasks = [coop.Task(s.name, s.global_size, s.local_size, tuple(
                    (_address(a), a.mem.nbytes, not n.startswith("in"))
                    for a, n in zip(s.args, s.arg_names, strict=True))) for s in steps]
                the_plan = coop.plan(self._source, tasks, profile=self.profile and coop.CYCLE_COUNTER)
                program = None
                if any(seg.kernel for seg in the_plan.segments):
                    program = build_program(self.context, the_plan.source,
                                            devices=[self.device, self.companion], name="cooperative")
                kernels = self._inline_kernels()[1]
                inline = [(kernels[i], s.global_size, s.local_size)
                          for i, s in zip(self._live, steps, strict=True)]
                self._cooperative = coop.Runner(self.cl, self.context, self.device, self.companion,
                                                the_plan, program, inline)
        return self._cooperative

    def _use_cooperative(self) -> bool:
        if self._cooperative_runner() is None:
            return False
        self.running_on = "cooperative"
        self.placement = ["cooperative"] * len(self._live)
        return True

    def _use_inline(self) -> None:
        self._set_plan(["inline"] * len(self._live))

    def _use_pool(self) -> None:
        self._set_plan(["pool"] * len(self._live))

    # running ----------------------------------------------------------------------------------------
    def _host_views(self) -> None:
        """Typed host views of the SVM inputs and results, made once, so a run copies each with one numpy
        call (the views are the device's memory: fine-grained SVM is coherent once the queue finished)."""
        self._in_views = [
            b.mem[: v.type.nbytes].view(v.type.np_dtype).reshape(v.type.dims)
            if isinstance(b, self.cl.SVM) else None
            for v, b in zip(self.func.args, self.args, strict=True)
        ]
        self._out_plan: list[tuple[str, Any]] = []
        for v in self.outputs:
            if id(v) in self.host:
                self._out_plan.append(("host", self.host[id(v)]))
                continue
            b = self.buf[id(v)]
            if isinstance(b, self.cl.SVM):
                view = b.mem[: v.type.nbytes].view(v.type.np_dtype).reshape(v.type.dims)
                self._out_plan.append(("svm", view))
            else:
                self._out_plan.append(("buffer", (b, v.type.dims, v.type.np_dtype)))

    def _write_inputs(self, q: Any, inputs: Sequence[Any], blocking: bool = False) -> list[np.ndarray]:
        """Copy a run's inputs in: into the SVM views on the host (the previous run has finished, so nothing
        reads them), else enqueued on `q`; a DeviceArray (another run's result left on the device) device
        to device. Returns the host arrays a non-blocking copy still reads."""
        keep = []
        for a, b, view in zip(inputs, self.args, self._in_views, strict=True):
            if isinstance(a, DeviceArray):
                if view is not None and a.view is not None:
                    np.copyto(view, a.view.reshape(view.shape), casting="no")
                    continue
                if view is None and a.view is None:
                    if a.nbytes:
                        self.cl.enqueue_copy(q, b, a.mem, byte_count=a.nbytes)
                    continue
                a = np.asarray(a)
            if view is not None:
                np.copyto(view, np.asarray(a).reshape(view.shape), casting="no")
                continue
            a = np.ascontiguousarray(a)
            keep.append(a)
            if a.nbytes:
                self.cl.enqueue_copy(q, b, a, is_blocking=blocking)
        return keep

    def enqueue(self, inputs: Sequence[Any], on_device: bool = False) -> tuple[list[Any], list[Any]]:
        if self.running_on == "cooperative":
            for a, view in zip(inputs, self._in_views, strict=True):
                np.copyto(view, np.asarray(a).reshape(view.shape), casting="no")
            self._cooperative.run()
            return [self._result(kind, what, on_device) for kind, what in self._out_plan], []
        cl, q = self.cl, self._segments[0][0]
        if self.checks is not None:
            self.checks.before(q)
        keep = self._write_inputs(q, inputs)
        launch = cl.enqueue_nd_range_kernel
        events = []
        last = len(self._segments) - 1
        for j, (sq, plan) in enumerate(self._segments):
            events += [launch(sq, k, g, lsize) for k, g, lsize in plan]
            if j < last:  # the next segment runs on the other device and reads what this one wrote
                sq.finish()
        q = self._segments[-1][0]
        results: list[Any] = []
        for kind, what in self._out_plan:
            if kind == "buffer" and not on_device:
                b, dims, dtype = what
                out = np.empty(dims, dtype)
                if out.nbytes:
                    cl.enqueue_copy(q, out, b, is_blocking=False)
                results.append(out)
            else:
                results.append(what)
        q.finish()
        if self.checks is not None:
            self.checks.after(q)
        for i, (kind, what) in enumerate(self._out_plan):
            if kind != "buffer" or on_device:  # a load-time result or an SVM slot: once the queue finished
                results[i] = self._result(kind, what, on_device)
        del keep
        return results, events

    def _result(self, kind: str, what: Any, on_device: bool) -> Any:
        """A result of the run that finished: a host copy, or (`on_device`) a DeviceArray over its slot."""
        if not on_device or kind == "host":
            return np.array(what)
        if kind == "svm":
            return DeviceArray(self, None, what, what.shape, what.dtype)
        b, dims, dtype = what
        return DeviceArray(self, b, None, tuple(dims), np.dtype(dtype))

    def _records_folder(self) -> str:
        return os.path.join(cache_dir(), "opencl")

    def _fingerprint(self) -> str:
        return dev.fingerprint(self.device)

    def first_launches(self, inputs: Sequence[Any]) -> list[tuple[str, float]]:
        """The first run launch by launch on the pool, each finished before the next: (kernel, seconds)
        a launch, PoCL's compile at a kernel's first launch included (--time-build: where a cold start's
        time goes). The results are then the next `run`'s."""
        q = self._pool_queue
        keep = self._write_inputs(q, inputs, blocking=True)
        out = []
        t0 = time.perf_counter()
        for i in self._live:
            s = self.steps[i]
            t = time.perf_counter()
            self.cl.enqueue_nd_range_kernel(q, s.kernel, s.global_size, s.local_size)
            q.finish()
            out.append((s.name, time.perf_counter() - t))
        del keep
        self._first_run(time.perf_counter() - t0)
        return out

    def _first_run(self, seconds: float) -> None:
        """After the first run: record that the program is built here, and (when it was built from
        nothing) the device's cold rate, from its build and this run (the kernels' first launches)."""
        compilers = 1 + len(self._warming)  # processes that compiled its kernels side by side
        if self._warming:
            from . import warm

            warm.stop(self._warming)
            self._warming = []
        self._first_noted = True
        if self._cold:  # the rate is one process's: what building the other ways alone will take
            program_cache.note_built(self._records_folder(), self._built_key,
                                     self.build_seconds + seconds * compilers, len(self._source.encode()),
                                     self._fingerprint(), self._cold)
            self._cold = False

    def run(self, inputs: Sequence[Any], on_device: bool = False) -> list[Any]:
        """The results for `inputs` (arrays, or DeviceArrays another run left on the device); with
        `on_device`, DeviceArrays over this executable's result slots, valid until its next run."""
        first = self._runs == 0
        self._count(inputs)
        if self._trial is not None:
            return self._trial_run(self._trial, inputs, on_device)
        choice = self._choice
        if choice is None:
            t0 = time.perf_counter()
            results = self.enqueue(inputs, on_device)[0]
            self._pool_seconds = time.perf_counter() - t0
            if first and not self._first_noted:
                self._first_run(self._pool_seconds)
            return results
        if self._slowed:  # the choice's runs slowed: compare every way again, over the coming runs
            self._trial = self._again_trial()
            return self._trial_run(self._trial, inputs, on_device)
        if choice.others and self._busy >= choice.busy_at and time.perf_counter() >= choice.recheck_at:
            self._trial = self._recheck_trial()
            if self._trial is not None:
                return self._trial_run(self._trial, inputs, on_device)
        t0 = time.perf_counter()
        results = self.enqueue(inputs, on_device)[0]
        seconds = time.perf_counter() - t0
        self._busy += seconds
        self._observe(seconds)
        return results

    def measure(
        self, inputs: Sequence[np.ndarray], repeat: int, warmup: int = 1
    ) -> tuple[list[np.ndarray], RunStats]:
        """Run `warmup` untimed times, then `repeat` timed ones; kernel times too when profiling."""
        results: list[np.ndarray] = []
        for _ in range(warmup):
            results = self.run(inputs)
        stats = RunStats()
        for _ in range(max(repeat, 1)):
            self._count(inputs)
            if self._trial is not None:  # `auto` comparing the ways over these runs
                t0 = time.perf_counter()
                results = self._trial_run(self._trial, inputs, False)
                stats.seconds.append(time.perf_counter() - t0)
                continue
            t0 = time.perf_counter()
            results, events = self.enqueue(inputs)
            stats.seconds.append(time.perf_counter() - t0)
            if self.profile and self.running_on == "cooperative" and self._cooperative.plan.profile:
                spans = self._cooperative.spans()  # each step's span in this run, read from the kernels
                for j, i in enumerate(self._live):
                    # a ns at least: the counter ticks unevenly in this VM (reads 1 tick apart at times),
                    # and a kernel that ran took some time
                    span = spans.get(j)  # (none would be a step no participant recorded: a bug)
                    stats.kernel_ns.setdefault(i, []).append(0 if span is None else max(1, round(span)))
            elif self.profile and events:
                for i, e in zip(self._live, events, strict=True):
                    stats.kernel_ns.setdefault(i, []).append(e.profile.end - e.profile.start)
        if self.profile and self.running_on == "cooperative" and not self._cooperative.plan.profile:
            # no cycle counter to read: time each kernel launched alone on the pool (both cores: the
            # persistent work-group parked), as many times, over the buffers as the runs left them
            self._cooperative.park()
            launch = self.cl.enqueue_nd_range_kernel
            for _ in range(max(repeat, 1)):
                events = [launch(self._pool_queue, self.steps[i].kernel, self.steps[i].global_size,
                                 self.steps[i].local_size) for i in self._live]
                self._pool_queue.finish()
                for i, e in zip(self._live, events, strict=True):
                    stats.kernel_ns.setdefault(i, []).append(e.profile.end - e.profile.start)
        return results, stats


class DeviceArray:
    """A run's result left in device memory (`Executable.run(..., on_device=True)`): the control-flow plan
    hands it to the next segment or loop iteration, whose run copies it device to device; `np.asarray`
    reads it back where the host needs it (a condition, the func's results). `mem` is its cl.Buffer, or
    None when `view` (a numpy view of fine-grained SVM) is the device memory itself."""

    __slots__ = ("exe", "mem", "view", "shape", "dtype")

    def __init__(self, exe: Executable, mem: Any, view: np.ndarray | None, shape: tuple[int, ...],
                 dtype: np.dtype):
        self.exe, self.mem, self.view, self.shape, self.dtype = exe, mem, view, tuple(shape), np.dtype(dtype)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        if self.view is not None:
            out = np.array(self.view)
        else:
            out = np.empty(self.shape, self.dtype)
            if out.nbytes:
                self.exe.cl.enqueue_copy(self.exe.queue, out, self.mem, is_blocking=True)
        return out if dtype is None else out.astype(dtype)

    def detached(self) -> DeviceArray:
        """A copy in device memory of its own (device to device), which the producer's next run leaves as
        it is: what a loop carries to its next iteration."""
        exe = self.exe
        b = exe._buffer(self.nbytes)
        if exe.svm and self.view is not None:
            view = b.mem[: self.nbytes].view(self.dtype).reshape(self.shape)
            np.copyto(view, self.view)
            return DeviceArray(exe, None, view, self.shape, self.dtype)
        if self.view is not None:  # an SVM slot of an executable that uses buffers: not expected
            return DeviceArray(exe, None, np.array(self.view), self.shape, self.dtype)
        if self.nbytes:
            exe.cl.enqueue_copy(exe.queue, b, self.mem, byte_count=self.nbytes)
            exe.queue.finish()
        return DeviceArray(exe, b, None, self.shape, self.dtype)


def _address(b: Any) -> int:
    """The host address of an SVM buffer (a `cl.SVM` over a numpy array)."""
    return int(b.mem.__array_interface__["data"][0])


def opencl_executor(module: Module, func: Func) -> Any:
    """The onnx.backend adapter's executor factory: lower (when needed) for the default device and load."""
    from .dynamic import executable
    from .lower import is_lowered, lower_module

    device = dev.pick_device()
    if not is_lowered(module):
        lower_module(module, dev.device_info(device))
    exe = executable(module, func, device)
    return exe.run
