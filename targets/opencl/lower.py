"""Lowering to the OpenCL target: graph (or kernel) level IR -> `cl.program` + `cl.launch` host plan.

Each op that computes becomes one `cl.launch` whose kernels come from the op's template
(`kernels/<family>.py`); the launch keeps the op as its reference body, so the numpy target can still run
the result and validation can compare a launch with what it came from. Around that:
- constants stay `const` ops (uploaded once by the runtime); operands a template wants packed get a `pack`
  op in front of the launch — evaluated once at load time when the operand is constant, lowered to a
  copy kernel otherwise — and the body unpacks them again;
- `reshape`/`identity` of computed values become `buf.view`s: no kernel, the same buffer;
- identical kernel sources (the same op on the same shapes) are emitted once and shared by name;
- a liveness-based memory plan assigns every launch result to a `buf.alloc` buffer, reusing buffers whose
  values are dead (a view keeps its base alive); the func's `peak_bytes` attribute is the plan's total.

Ops no template covers are all listed in one diagnostic, each with its location and the reason.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from typing import Any

from ...ir.core import Block, Func, Module, Op, Region, Value
from ...ir.diagnostics import Diagnostic, DiagnosticError
from ...ir.ops.registry import OpError, get_op, op_sig
from ...ir.specialize import is_dynamic
from ...ir.types import TensorType
from ...passes.analysis import op_cost, region_ops
from ...passes.common import const_array
from ...passes.emulate_f16 import emulate_block
from ...passes.liveness import may_write_in_place, plan_buffers
from ...passes.remarks import Remark
from .checks import env_flag
from .control import has_control
from .device import preamble
from .dynamic import SPECIALIZE, SPECIALIZES, mark_dynamic
from .kernels import load_all
from .kernels.base import TEMPLATES, Ctx, DeviceInfo, Lowered, NotLowerable, Template, arg_ref
from .records import EXECUTION_SPACE, Tuning, model_key, signature
from .sanitize import PREAMBLE as SANITIZER_PREAMBLE
from .sanitize import instrument
from .share import drop_unused, share_kernels
from .space import space_of

VIEW_OPS = ("reshape", "identity")
HOST_OPS = ("const",)
NOT_LABELS = ("const", "pack", "unpack", "winograd_filter", "winograd_unfilter")  # not in a kernel's name


@dataclass
class _State:
    info: DeviceInfo
    schedule: dict[str, Any] = field(default_factory=dict)  # keys every template's ctx.schedule starts with
    sources: dict[str, str] = field(default_factory=dict)  # template source -> kernel name
    program: list[str] = field(default_factory=list)
    constant: set[int] = field(default_factory=set)  # ids of values known at compile time
    failures: list[tuple[Op, str]] = field(default_factory=list)
    unfused: list[tuple[Op, int, str]] = field(default_factory=list)  # regions run op by op: launches, why
    tuning: Tuning | None = None  # tuning records to apply (tessel-codegen --tuning-records)
    keys: list[str] = field(default_factory=list)  # kernel signature of each launch, in order (with tuning)
    remarks: list[Remark] = field(default_factory=list)  # category `tuning`: which record applied, or why not
    check_bounds: bool = False  # instrument every kernel's global and __local accesses (sanitize.py)

    def kernel_name(self, source: str, op_name: str) -> str:
        name = self.sources.get(source)
        if name is None:
            name = f"k{len(self.sources)}_{re.sub(r'[^A-Za-z0-9]', '_', op_name)}"
            self.sources[source] = name
            self.program.append(re.sub(r"\bKERNEL", name, source).strip() + "\n")
        return name


def is_lowered(module: Module) -> bool:
    """Whether `module` is target-level: a func holds a cl.program, or it was lowered with dynamic funcs
    (which compile per input size when they run)."""
    return module.attrs.get("target") == "opencl" or any(
        op.name == "cl.program" for f in module.funcs for op in f.block.ops)


def lower_module(module: Module, info: DeviceInfo | None = None,
                 remarks: list[Remark] | None = None, schedule: dict[str, Any] | None = None,
                 tuning: Tuning | None = None, check_bounds: bool | None = None) -> Module:
    """Lower every func of `module` in place; raises one DiagnosticError naming every op without a kernel.
    A func with dynamic dims is not lowered here: it gets its `specialize` attribute (dynamic.py) and is
    compiled per input size when it runs (or ahead of time for a size, by `dynamic.embed_hint`).
    `remarks`, when given, receives a `missed` remark (category `fusion`, reason `unfused-region`) for each
    `kernel` region no template takes whole, which then runs as one launch per op, and with `tuning` one
    remark (category `tuning`) per launch saying which record applied or why none did. `schedule`: keys
    every template sees in its ctx.schedule (the tools' --no-winograd is {"winograd": 0}). `tuning`: the
    records of tessel-tune for the device `info` describes; a launch whose kernel signature has a record
    gets its schedule, others the templates' own choices; a func whose model signature has one gets its
    `execution` attribute. `check_bounds` (default: $TESSEL_CHECK_BOUNDS set and not 0): every kernel checks
    its global and __local accesses against its buffers' extents (sanitize.py; tessel-codegen
    --check-bounds)."""
    load_all()
    info = info or DeviceInfo.generic()
    if check_bounds is None:
        check_bounds = env_flag("TESSEL_CHECK_BOUNDS")
    failures: list[tuple[Op, str]] = []
    for func in list(module.funcs):
        if func.attrs.get(SPECIALIZES):  # a size of a dynamic func, lowered ahead of time
            continue
        if is_dynamic(func) or has_control(func):  # compiled per input size when it runs (dynamic.py)
            if SPECIALIZE not in func.attrs:
                mark_dynamic(module, func, None, schedule, check_bounds)
            continue
        failures += lower_func(module, func, info, remarks, schedule, tuning, check_bounds)
    if failures:
        op0, why0 = failures[0]
        d = Diagnostic(
            "error",
            f"no OpenCL kernel for {len(failures)} op{'s' if len(failures) > 1 else ''}: "
            f"'{op0.name}' ({why0})",
            op0.pos,
            op0.loc,
        )
        for op, why in failures[1:]:
            d.note(f"'{op.name}' {_where(op)}({why})", op.pos)
        raise DiagnosticError(d)
    module.attrs["target"] = "opencl"
    return module


def _where(op: Op) -> str:
    return f"at {', '.join(op.loc)} " if op.loc else ""


def lower_func(module: Module, func: Func, info: DeviceInfo,
               remarks: list[Remark] | None = None,
               schedule: dict[str, Any] | None = None, tuning: Tuning | None = None,
               check_bounds: bool = False) -> list[tuple[Op, str]]:
    st = _State(info, dict(schedule or {}), tuning=tuning, check_bounds=check_bounds)
    block = func.block
    # half-precision arithmetic in f32 between casts (half storage, float compute): bf16 always (OpenCL
    # has no bf16 type), f16 where the device lacks cl_khr_fp16
    emulate_block(block, module, ("bf16",) if info.fp16 else ("f16", "bf16"))
    old = list(block.ops)
    for op in old:
        block.remove(op)
    for op in old:
        _lower_op(module, block, op, st)
    if remarks is not None:
        for op, launches, why in st.unfused:
            names = [o.name for o in op.regions[0].blocks[0].ops if o.name not in ("const", "yield")]
            remarks.append(Remark.make(
                "codegen", "missed", "fusion", "unfused-region", [op],
                f"the {op.attrs.get('kind', 'generic')} region of {', '.join(map(repr, names))} runs as "
                f"{launches} launches, one per op: {why}"))
    if st.failures:
        return st.failures
    if tuning is not None:
        _apply_execution(func, st)
        if remarks is not None:
            remarks += st.remarks
    plan = plan_memory(block, info)
    st.program = drop_unused(block, st.program)  # e.g. the copies of concatenations assembled in place
    if not check_bounds and os.environ.get("TESSEL_SHARE_KERNELS", "1") != "0":  # not instrumented ones
        st.program = share_kernels(block, st.program)
    allocs = [Op("buf.alloc", attrs={"id": i, "bytes": n}) for i, n in enumerate(plan)]
    checks = SANITIZER_PREAMBLE if check_bounds else ""
    program = Op("cl.program", attrs={"source": preamble(info) + checks + "\n".join(st.program)})
    if check_bounds:
        program.attrs["checks"] = ["bounds"]
    for op in reversed([program, *allocs]):
        op.parent = block
        block.ops.insert(0, op)
    func.attrs["peak_bytes"] = sum(plan)
    return []


def _lower_op(module: Module, block: Block, op: Op, st: _State) -> None:
    if op.name == "return" or op.name in HOST_OPS:
        block.append(op)
        if op.name == "const":
            st.constant.add(id(op.results[0]))
        return
    opdef = get_op(op.name)
    if opdef is None or opdef.has("target"):
        st.failures.append((op, "already target-level" if opdef else "unregistered"))
        block.append(op)
        return
    if (
        all(id(v) in st.constant for v in op.operands)  # none at all: a `dims` or `range` of sizes
        and opdef.has("pure")
        and not op.regions
    ):
        block.append(op)  # computed once at load time from constants
        st.constant.update(id(r) for r in op.results)
        return
    if op.name in VIEW_OPS and op.results[0].type.is_static:
        view = Op(
            "buf.view",
            [op.operands[0]],
            [op.results[0].type],
            {"shape": list(op.results[0].type.dims)},
            loc=op.loc,
            pos=op.pos,
        )
        _replace(block, op, view)
        return
    failed = len(st.failures)
    launch = _launch(module, block, op, st)
    if launch is None and op.name == "kernel":
        # no single fused kernel for this region: not an error, run its ops one launch each
        why = st.failures[failed][1] if len(st.failures) > failed else "no template"
        del st.failures[failed:]
        before = sum(o.name == "cl.launch" for o in block.ops)
        _inline_region(module, block, op, st)
        st.unfused.append((op, sum(o.name == "cl.launch" for o in block.ops) - before, why))
        return
    if launch is not None:
        _replace(block, op, launch)


def _inline_region(module: Module, block: Block, op: Op, st: _State) -> None:
    """Lower the ops of `kernel` op `op`'s region in its place, one launch each."""
    body = op.regions[0].blocks[0]
    mapping: dict[int, Value] = {id(a): v for a, v in zip(body.args, op.operands, strict=True)}
    clones: list[Op] = []
    for inner in body.ops:
        if inner.name == "yield":
            for r, v in zip(op.results, inner.operands, strict=True):
                r.replace_all_uses_with(mapping[id(v)])
            break
        clone = Op(inner.name, [mapping[id(v)] for v in inner.operands], inner.result_types,
                   dict(inner.attrs), loc=inner.loc, pos=inner.pos)
        for r, c in zip(inner.results, clone.results, strict=True):
            c.name = r.name
            mapping[id(r)] = c
        clones.append(clone)
    op.drop_operands()
    for clone in clones:  # lowering replaces each clone's results, in its users too
        _lower_op(module, block, clone, st)


def _replace(block: Block, op: Op, new: Op) -> None:
    block.append(new)
    for r, n in zip(op.results, new.results, strict=True):
        n.name = r.name
        r.replace_all_uses_with(n)
    op.drop_operands()


def _template(op: Op, st: _State, module: Module) -> tuple[Ctx, Lowered] | None:
    if op.regions and op.name != "kernel":
        st.failures.append((op, "ops with regions have no kernel"))
        return None
    fn = TEMPLATES.get(op.name)
    if fn is None:
        st.failures.append((op, "no template"))
        return None
    try:
        for t in [*op.operand_types, *op.result_types]:
            if not t.is_static:
                raise NotLowerable(f"dynamic shape {t}")
        sig = op_sig(op, module.resources)
        ctx = Ctx(op.name, sig, st.info, tuple(id(v) in st.constant for v in op.operands), dict(st.schedule),
                  body=op.regions[0].blocks[0] if op.regions else None, resources=module.resources,
                  values=lambda i: const_array(op.operands[i], module))
        low = fn(ctx)
        if st.tuning is not None:
            ctx, low = _apply_record(op, ctx, fn, low, st, module)
        return ctx, low
    except (NotLowerable, OpError) as e:
        st.failures.append((op, str(e)))
        return None


def _apply_record(op: Op, ctx: Ctx, fn: Template, low: Lowered, st: _State,
                  module: Module) -> tuple[Ctx, Lowered]:
    """The kernel of `op` as its tuning record says (else `low`, the template's own), with a remark."""
    assert st.tuning is not None
    key, _ = signature(op, ctx.constant, st.schedule)
    st.keys.append(key)
    sp = space_of(ctx, low)
    if st.tuning.collect is not None:  # tessel-tune finding the model's kernels
        st.tuning.collect(key, op, ctx, low, sp, module)

    def remark(kind: str, reason: str, message: str) -> None:
        st.remarks.append(Remark.make("codegen", kind, "tuning", reason, [op], f"kernel {key}: {message}"))

    record, reason, why = st.tuning.find("kernel", key, sp.version if sp else None)
    if record is None:
        if sp is None and reason == "no-record":
            reason, why = "no-space", f"no record ('{op.name}' has no schedule space here)"
        remark("missed", reason, why)
        return ctx, low
    times = f"{record.default_us:.1f} -> {record.best_us:.1f} us"
    if not record.schedule:
        remark("passed", "default-kept", f"the record keeps the template's choice ({times} of default)")
        return ctx, low
    assert sp is not None
    bad = sp.reject(record.schedule)
    if bad is None:
        tuned = dataclasses.replace(ctx, schedule={**ctx.schedule, **record.schedule})
        try:
            low2 = fn(tuned)
        except NotLowerable as e:
            bad = f"the template refuses it: {e}"
        else:
            point = ", ".join(f"{k}={v}" for k, v in sorted(record.schedule.items()))
            remark("passed", "record-applied", f"{point} ({times}, {record.speedup:.2f}x)")
            return tuned, low2
    remark("missed", "record-rejected", f"the record's schedule is not in space {sp.version}: {bad}")
    return ctx, low


def _apply_execution(func: Func, st: _State) -> None:
    """The func's `execution` attribute from its model record (the way the runtime runs it)."""
    assert st.tuning is not None
    key = model_key(st.keys)
    st.tuning.models[func.name] = key
    record, _, why = st.tuning.find("model", key, EXECUTION_SPACE)
    way = record.schedule.get("execution") if record else None
    pos = next((o for o in func.block.ops if o.name == "cl.launch"), None)
    ops = [pos] if pos is not None else []
    if way:
        func.attrs["execution"] = str(way)
        st.remarks.append(Remark.make("codegen", "passed", "tuning", "execution-applied", ops,
                                      f"func @{func.name} (model {key}): execution = {way}"))
    else:
        st.remarks.append(Remark.make("codegen", "missed", "tuning", "no-execution-record", ops,
                                      f"func @{func.name} (model {key}): {why or 'the record names none'}"))


def _launch(module: Module, block: Block, op: Op, st: _State) -> Op | None:
    lowered = _template(op, st, module)
    if lowered is None:
        return None
    ctx, low = lowered
    operands = list(op.operands)
    for i, spec in sorted(low.pack.items()):
        if spec.reshape:
            t = TensorType(tuple(spec.reshape), operands[i].type.dtype)
            reshape = Op("reshape", [operands[i]], [t], {"shape": list(spec.reshape)}, loc=op.loc)
            _lower_op(module, block, reshape, st)
            operands[i] = block.ops[-1].results[0]
        pdef = get_op(spec.op)
        assert pdef is not None
        packed = pdef.infer(pdef.sig([operands[i].type], spec.attrs()))
        pack = Op(spec.op, [operands[i]], packed, spec.attrs(), loc=op.loc)
        _lower_op(module, block, pack, st)
        operands[i] = block.ops[-1].results[0]
    body = Block([v.type for v in operands])
    args: list[Value] = list(body.args)
    for i, spec in sorted(low.pack.items()):
        original = op.operands[i].type
        shape = tuple(spec.reshape) or original.dims
        name, attrs = spec.inverse(shape)
        un = body.append(Op(name, [args[i]], [TensorType(shape, original.dtype)], attrs, loc=op.loc))
        args[i] = un.results[0]
        if spec.reshape:
            back = Op("reshape", [args[i]], [original], {"shape": list(original.dims)}, loc=op.loc)
            args[i] = body.append(back).results[0]
    # the reference body: the op itself (a fused `kernel` keeps its region, moved over)
    regions = list(op.regions)
    op.regions = []
    inner = body.append(Op(op.name, args, op.result_types, dict(op.attrs), regions, loc=op.loc, pos=op.pos))
    body.append(Op("yield", inner.results))
    kernels: list[dict[str, Any]] = []
    label = op.name
    if op.name == "kernel":  # name a fused kernel by its ops: k7_conv2d_add_relu
        label = "_".join(o.name for o in region_ops(inner) if o.name not in NOT_LABELS)[:40]
    default_args = [f"in{i}" for i in range(len(operands))] + [f"out{j}" for j in range(len(op.results))]
    for k in low.kernels:
        source = k.source
        if st.check_bounds:  # a template the checks cannot follow is a bug here: SanitizeError
            names = list(k.args or default_args)
            source = instrument(source, [_arg_bytes(a, operands, op, low) for a in names])
        entry: dict[str, Any] = {
            "name": st.kernel_name(source, label),
            "global": list(k.global_size),
            "local": list(k.local_size or []),
            "args": list(k.args or default_args),
        }
        kernels.append(entry)
    flops = op_cost(inner, module).flops
    attrs: dict[str, Any] = {"kernels": kernels, "buffers": [], "flops": int(flops)}
    if low.scratch:
        attrs["scratch"] = [int(n) for n in low.scratch]
    if low.schedule:
        attrs["schedule"] = dict(low.schedule)
    if low.flops_kernel not in (-1, len(low.kernels) - 1):
        attrs["flops_kernel"] = low.flops_kernel
    return Op("cl.launch", operands, op.result_types, attrs, [Region([body])], loc=op.loc, pos=op.pos)


def _arg_bytes(name: str, operands: list[Value], op: Op, low: Lowered) -> int:
    """The bytes of the buffer a launch binds to kernel argument `name` (in<i>, out<j>, tmp<k>)."""
    kind, index = arg_ref(name)
    if kind == "in":
        return _bytes(operands[index].type)
    if kind == "out":
        return _bytes(op.results[index].type)
    return int(low.scratch[index])


def plan_memory(block: Block, info: DeviceInfo | None = None) -> list[int]:
    """Assign each launch result (and scratch buffer) a buffer, reusing buffers of dead values, writing
    elementwise results in place over an operand that dies there and assembling concatenations in place
    (passes/liveness.py); sets each launch's `buffers` (and `offsets`, bytes into them, when a result lives
    inside a concatenation) and returns the buffers' sizes in bytes. An assembled concat keeps its launch
    with no kernels (`assembled`): its operands' producers already wrote its result."""
    align = (info or DeviceInfo.generic()).base_align
    ops = list(block.ops)
    plan = plan_buffers(
        ops,
        is_kernel=lambda op: op.name == "cl.launch",
        view_of=lambda op: op.operands[0] if op.name == "buf.view" else None,
        in_place=launch_in_place,
        scratch=lambda op: [int(n) for n in op.attrs.get("scratch", [])],
        placements=lambda op: concat_offsets(op, align),
        hold=one_core,
    )
    for op in ops:
        if op.name == "cl.launch":
            op.attrs["buffers"] = [plan.buffer[id(v)] for v in op.results] + plan.scratch[id(op)]
            offsets = [plan.offset.get(id(v), 0) for v in op.results]
            if any(offsets):
                op.attrs["offsets"] = offsets
    for op in plan.assembled:
        op.attrs["kernels"] = []
        op.attrs["assembled"] = True
    return plan.sizes


def one_core(op: Op) -> bool:
    """A launch that keeps one core busy for long: a template that runs its whole loop on one work-item
    says so with schedule `work_items` = 1 (the recurrent scans). Cooperative execution can run the next
    such launch beside it on the other core if the plan gives the two no common buffer, so the buffers it
    frees are held until that launch took its own (a one-item GEMV or softmax is too short to pay for the
    memory)."""
    kernels = op.attrs.get("kernels") or []
    schedule = op.attrs.get("schedule") or {}
    return (bool(kernels) and schedule.get("work_items") == 1
            and all(list(k.get("global") or []) == [1] for k in kernels))


def concat_offsets(op: Op, align: int) -> list[int] | None:
    """The byte offset of each operand in the result of a launch that only concatenates its operands along
    an axis with nothing but size-1 dims before it (so each operand is one contiguous slice), when every
    offset is a multiple of the device's sub-buffer alignment `align`; None for any other launch."""
    body = op.regions[0].blocks[0]
    inner = [o for o in body.ops if o.name != "yield"]
    if len(inner) != 1 or inner[0].name != "concat" or list(inner[0].operands) != list(body.args):
        return None
    t = op.results[0].type
    axis = int(inner[0].attrs["axis"]) % t.rank
    if any(d != 1 for d in t.dims[:axis]):
        return None
    offsets, at = [], 0
    for v in op.operands:
        if at % align:
            return None
        offsets.append(at)
        at += _bytes(v.type)
    return offsets


def launch_in_place(op: Op, i: int) -> bool:
    """Whether a launch may write its result over operand i: its body is one op that may (an elementwise
    op or region, passes/liveness.py) and reads operand i unpacked, straight from the block argument."""
    body = op.regions[0].blocks[0]
    inner = [o for o in body.ops if o.name != "yield"]
    return (len(inner) == 1 and len(op.results) == 1 and op.operands.count(op.operands[i]) == 1
            and len(inner[0].operands) == len(op.operands)
            and inner[0].operands[i] is body.args[i] and may_write_in_place(inner[0], i))


def _bytes(t: TensorType) -> int:
    return t.numel * t.np_dtype.itemsize
