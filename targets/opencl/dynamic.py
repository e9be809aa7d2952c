"""Funcs with dynamic dims on OpenCL: one compiled module for every size, specialized per size at load.

`tessel-codegen` does not lower a func whose inputs have symbolic or `?` dims: it keeps the func's IR as
the optimizer left it and gives it a `specialize` attribute (`{pipeline = "...", schedule = {...}}`: how to
compile one size of it). For each `--shape-hint`, it lowers that size ahead of time into a func of its
own (`@main.s0`, with `specializes = "main"` and the input `shapes` it serves), tuned by the tuning
records when given. At run time `DynamicExecutable` looks at the input shapes of each call: a size met
before runs on its loaded executable; a hinted size loads its embedded func; any other size is compiled
then (ir/specialize.py binds the sizes and infers every type again; the pipeline runs on the static func,
which the lowering then turns into kernels) and kept (`LOADED_SIZES` per model, least recently used
dropped). Program binaries are cached on disk by source hash (cache.py), so a size compiled once builds
from the cache in any later process: a kernel specialized for one size is never reused for another, as
its source (which holds the sizes) differs. A dynamic func with control flow is specialized the same way
first (the sizes decide the Ifs on sizes, which canonicalize then inlines); control flow the sizes leave
(an If on an input's values, a Loop's trip count) runs as a host plan of static segments (control.py).
"""

from __future__ import annotations

import gc
import sys
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...ir.core import Block, Func, Module
from ...ir.specialize import is_dynamic, specialize
from ...passes.manager import PassManager
from ...passes.pipeline import level_pipeline, parse_pipeline

SPECIALIZE = "specialize"
SPECIALIZES = "specializes"
LOADED_SIZES = 8
"""Executables a DynamicExecutable keeps loaded, one per input size (the least recently used goes)."""

Shapes = tuple[tuple[int, ...], ...]


def shapes_text(shapes: Sequence[Sequence[int]]) -> list[str]:
    return ["x".join(str(int(d)) for d in s) or "scalar" for s in shapes]


def mark_dynamic(module: Module, func: Func, pipeline: str | None = None,
                 schedule: dict[str, Any] | None = None, check_bounds: bool = False) -> None:
    """Give dynamic `func` its `specialize` attribute: the pipeline (default -O2's) and lowering options
    that compile one size of it."""
    spec: dict[str, Any] = {"pipeline": pipeline or level_pipeline(2)}
    if schedule:
        spec["schedule"] = dict(schedule)
    if check_bounds:
        spec["check_bounds"] = True
    func.attrs[SPECIALIZE] = spec


def dissolve_kernels(block: Block) -> int:
    """Put the ops of every `kernel` region in `block` (and in its control ops' regions) back in place of
    the region: what fuse decided on dynamic dims is decided again, sizes known, by the pipeline that
    compiles a size, as a static compile of that size decides it. Returns how many regions it dissolved."""
    n = 0
    for op in list(block.ops):
        if op.name != "kernel":
            for r in op.regions:
                for b in r.blocks:
                    n += dissolve_kernels(b)
            continue
        body = op.regions[0].blocks[0]
        for arg, v in zip(body.args, op.operands, strict=True):
            arg.replace_all_uses_with(v)
        term = body.ops[-1]
        for inner in list(body.ops[:-1]):
            body.remove(inner)
            block.insert_before(op, inner)
        for r, v in zip(op.results, list(term.operands), strict=True):
            r.replace_all_uses_with(v)
        term.drop_operands()
        op.erase()
        n += 1
    return n


def compile_size(module: Module, func: Func, shapes: Sequence[Sequence[int]], info: Any,
                 tuning: Any = None, remarks: list | None = None) -> tuple[Module, Func]:
    """`func` specialized to input `shapes`, optimized by its `specialize` pipeline and lowered for `info`:
    a module of its own (sharing `module`'s weights) holding the lowered func. The fused regions of the
    dynamic func are dissolved first, so the pipeline fuses with the sizes known: a size gets the kernels
    a static compile of it gets."""
    from .control import has_control
    from .lower import lower_module

    spec = dict(func.attrs.get(SPECIALIZE) or {})
    m, f = specialize(module, func, shapes)
    dissolve_kernels(f.block)
    f.attrs.pop(SPECIALIZE, None)
    PassManager(parse_pipeline(str(spec.get("pipeline") or level_pipeline(2)))).run(m)
    if has_control(f):  # control flow the sizes did not decide: a host plan of static segments runs it
        f.attrs[SPECIALIZE] = spec
        return m, f
    lower_module(m, info, remarks, spec.get("schedule") or None, tuning,
                 check_bounds=bool(spec.get("check_bounds", False)))
    return m, f


def embed_hint(module: Module, func: Func, shapes: Sequence[Sequence[int]], info: Any, tuning: Any = None,
               remarks: list | None = None) -> Func:
    """Lower `func` for input `shapes` ahead of time, as a func of `module` (`@<name>.s<k>`)."""
    m, f = compile_size(module, func, shapes, info, tuning, remarks)
    k = sum(1 for g in module.funcs if g.attrs.get(SPECIALIZES) == func.name)
    f.name = f"{func.name}.s{k}"
    f.attrs.pop("specialized", None)
    f.attrs[SPECIALIZES] = func.name
    f.attrs["shapes"] = shapes_text(shapes)
    for r in m.resources:  # weights the pipeline made (folded, packed) join the module's table
        if r.name not in module.resources:
            module.resources.put(r)
    module.funcs.append(f)
    return f


def embedded(module: Module, func: Func, shapes: Sequence[Sequence[int]]) -> Func | None:
    """The func lowered ahead of time for `func` at input `shapes`, if `module` holds one."""
    want = shapes_text(shapes)
    for g in module.funcs:
        if g.attrs.get(SPECIALIZES) == func.name and list(g.attrs.get("shapes", [])) == want:
            return g
    return None


def settle_heap() -> None:
    """Collect and age the objects a compile and load just made, before the runs: left young, they were
    scanned by the interpreter's first generation-1 collection inside a run (whisper_vad's 33rd call,
    3-3.7x its median, every process)."""
    gc.collect()


def executable(module: Module, func: Func, device: Any = None, **options: Any) -> Any:
    """An Executable for a static lowered func, a DynamicExecutable for a dynamic one, a
    ControlExecutable (control.py) for one holding control flow."""
    from .control import ControlExecutable, has_control
    from .runtime import Executable

    if is_dynamic(func):  # specialized per size first: sizes decide many Ifs, and segments are static
        return DynamicExecutable(module, func, device, **options)
    if has_control(func):
        return ControlExecutable(module, func, device, **options)
    return Executable(module, func, device, **options)


class DynamicExecutable:
    """Runs a dynamic func: one Executable per input size, compiled (or taken from the module's
    ahead-of-time funcs) the first time that size is met. Attributes it does not have (`steps`,
    `running_on`, `build_seconds`, ...) are those of the size that ran last."""

    def __init__(self, module: Module, func: Func, device: Any = None, **options: Any):
        from . import device as dev
        from .profile import compile_info

        self.module, self.func = module, func
        self.device = device if device is not None else dev.pick_device()
        # the stored peaks, else the device calibrated when a size's lowering first needs them
        self.info = compile_info(self.device, lambda text: print(f"tessel: {text}", file=sys.stderr))
        self.options = options
        self.loaded: OrderedDict[Shapes, Any] = OrderedDict()
        self.compiled = 0
        """Sizes compiled at run time so far (not counting hinted ones)."""
        self.cache_key: str | None = None
        """The key of the module in the compiled-module cache (compiled.py) when tessel.compile made it:
        the sizes compiled at run time are kept there under it."""
        self._last: Any = None

    def for_shapes(self, shapes: Sequence[Sequence[int]]) -> Any:
        """The Executable that runs inputs of `shapes` (made on first use)."""
        key: Shapes = tuple(tuple(int(d) for d in s) for s in shapes)
        exe = self.loaded.get(key)
        if exe is None:
            ahead = embedded(self.module, self.func, key)
            if ahead is not None:
                exe = executable(self.module, ahead, self.device, **self.options)
            else:
                m, f = self._compile(key)
                exe = executable(m, f, self.device, **self.options)
                self.compiled += 1
            self.loaded[key] = exe
            if len(self.loaded) > LOADED_SIZES:
                self.loaded.popitem(last=False)
            settle_heap()
        else:
            self.loaded.move_to_end(key)
        self._last = exe
        return exe

    def _compile(self, shapes: Shapes) -> tuple[Module, Func]:
        """`compile_size` of these sizes, or what an earlier process compiled of them when this func came
        from the compiled-module cache (`cache_key`: the key of its module there): kept there after."""
        from . import compiled

        key = compiled.size_key(self.cache_key, self.func.name, shapes) if self.cache_key else None
        if key is not None and (m := compiled.load(key)) is not None:
            f = m.func(self.func.name)
            if f is not None:
                return m, f
        m, f = compile_size(self.module, self.func, shapes, self.info)
        if key is not None:
            compiled.fold_load_ops(m)
            compiled.store(key, m)
        return m, f

    def run(self, arrays: Sequence[Any], on_device: bool = False) -> list[Any]:
        exe = self.for_shapes([np.shape(a) for a in arrays])
        return exe.run(arrays, on_device=True) if on_device else exe.run(arrays)

    def measure(self, arrays: Sequence[np.ndarray], repeat: int, warmup: int = 0) -> Any:
        return self.for_shapes([np.shape(a) for a in arrays]).measure(arrays, repeat, warmup=warmup)

    def __getattr__(self, name: str) -> Any:
        last = self.__dict__.get("_last")
        if last is None:
            raise AttributeError(f"'{name}': no size of this dynamic func has run yet")
        return getattr(last, name)
