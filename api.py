"""The Python API: `tessel.compile` and `tessel.load`, an onnxruntime-shaped `CompiledModel`.

    import tessel
    model = tessel.compile("resnet50.onnx")                  # import, -O2, lower for OpenCL, load
    (probs,) = model.run(None, {"data": x})                  # onnxruntime's argument order
    model.save("resnet50.cl.tsl")                            # the compiled target-level module
    again = tessel.load("resnet50.cl.tsl")                   # no recompilation

The command-line tools call the same functions (`import_model_source` and `optimize` here, the lowering
in targets/opencl), so a program compiled by `tessel compile` and one compiled here are the same bytes.
`run` may be called from several threads: each CompiledModel holds a lock around its executable (one
command queue), so calls on one model run one after the other; for parallel runs, compile (or `load`)
one model a thread.
"""

from __future__ import annotations

import hashlib
import re
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .ir.core import Func, Module
from .ir.diagnostics import Diagnostic, DiagnosticError

TARGETS = ("opencl", "numpy")


class InvalidArgument(ValueError):
    """A call's arguments do not fit the model (onnxruntime raises its InvalidArgument for the same)."""


@dataclass(frozen=True)
class NodeArg:
    """An input or output as onnxruntime's `get_inputs()` describes it: name, shape (ints; a dynamic dim's
    name, 'N', or expression, '2 * N'; None for an anonymous `?`) and type ('tensor(float)'), plus tessel's
    element type ('f32')."""

    name: str
    shape: list[int | str | None]
    type: str
    dtype: str


_ONNX_TYPE = {"f32": "float", "f16": "float16", "bf16": "bfloat16", "f64": "double", "i64": "int64",
              "i32": "int32", "i16": "int16", "i8": "int8", "ui64": "uint64", "ui32": "uint32",
              "ui16": "uint16", "ui8": "uint8", "i1": "bool"}


def _node_arg(name: str, t: Any, unnamed: frozenset[str] = frozenset()) -> NodeArg:
    """A symbolic dim reads as its name (or expression), as onnxruntime gives a dim_param; `?`, and a dim
    the model left unnamed (-1, 0 or no dim_param: the importer's `unnamed_dims`), as None."""
    shape = [d if d is None or isinstance(d, int) else None if d.symbols() & unnamed else str(d)
             for d in t.shape]
    return NodeArg(name, shape, f"tensor({_ONNX_TYPE.get(t.dtype, t.dtype)})", t.dtype)


def import_model_source(model: Any, input_shapes: Mapping[str, Sequence[int]] | None = None,
                        filename: str | None = None) -> Module:
    """A verified module from `model`: an ONNX file path, `onnx.ModelProto`, ONNX bytes, a `.tsl` path
    or text, or a Module (returned as is)."""
    if isinstance(model, Module):
        return model
    data, filename = model_bytes(model, filename)
    return import_bytes(data, filename, input_shapes)


def model_bytes(model: Any, filename: str | None = None) -> tuple[bytes, str]:
    """(the bytes, a file name for messages) of `model`: an ONNX file path, `onnx.ModelProto`, ONNX bytes,
    or a `.tsl` path or text."""
    data: bytes
    path = model_path(model)
    if path is not None:
        try:
            data = path.read_bytes()
        except OSError as e:
            raise DiagnosticError(Diagnostic("error", f"cannot read '{path}': {e.strerror}")) from None
        filename = filename or str(path)
    elif isinstance(model, str):
        data, filename = model.encode(), filename or "<string>"
    elif isinstance(model, bytes):
        data, filename = model, filename or "<bytes>"
    else:
        serialize = getattr(model, "SerializeToString", None)
        if serialize is None:
            raise TypeError(f"tessel.compile takes a path, an onnx.ModelProto, bytes or a Module, not "
                            f"{type(model).__name__}")
        data, filename = serialize(), filename or "<onnx.ModelProto>"
    return data, filename


def model_path(model: Any) -> Path | None:
    """The file `model` names: a path, or a string that is not IR text; None for anything else."""
    if isinstance(model, (str, Path)) and not str(model).lstrip().startswith(("module", "func")):
        return Path(model)
    return None


def import_bytes(data: bytes, filename: str,
                 input_shapes: Mapping[str, Sequence[int]] | None = None) -> Module:
    """The verified module of `data` (ONNX bytes or tessel IR text; `model_bytes`)."""
    from .ir.parser import parse_module
    from .ir.verifier import verify_or_raise

    shapes = {k: list(v) for k, v in (input_shapes or {}).items()}
    if not data:
        raise DiagnosticError(Diagnostic("error", f"'{filename}' is empty"))
    if is_tsl(data, filename):
        if shapes:
            raise InvalidArgument("input_shapes applies to ONNX models; a .tsl module has its shapes")
        module = parse_module(data, filename)
    else:
        from .frontends.onnx.importer import import_model

        module = import_model(data, filename, shapes)
    verify_or_raise(module)
    return module


def is_tsl(data: bytes, filename: str) -> bool:
    """Whether `data` is tessel IR text rather than ONNX protobuf bytes (looking at its first byte that is
    not white space, without copying the bytes)."""
    if filename.endswith(".tsl"):
        return True
    start = re.match(rb"\s*", data)
    at = start.end() if start else 0
    return data[at:at + 1] in (b"m", b"f", b"/", b"{")


def optimize(module: Module, opt_level: int = 2, weights: str = "f32", on_remark: Any = None) -> Module:
    """Run the -O`opt_level` pipeline (with `weights` the matmul / gemm weight precision) in place,
    verifying the result once (tessel-opt verifies after each pass and keeps crash reproducers: that was
    two thirds of the pipeline's time); invalid IR is an internal error naming the pipeline."""
    from .ir.diagnostics import render
    from .ir.verifier import verify
    from .passes.manager import CompilerCrash, Instrumentation, PassManager
    from .passes.pipeline import level_pipeline, parse_pipeline

    pipeline = level_pipeline(opt_level, weights)
    pm = PassManager(parse_pipeline(pipeline), Instrumentation(verify_each=False, snapshots=False))
    pm.ctx.on_remark = on_remark
    pm.run(module)
    errors = verify(module)
    if errors:
        why = "".join(render(d) for d in errors[:5])
        raise CompilerCrash(f"-O{opt_level}", f"produced invalid IR (tessel-opt -O{opt_level} names the pass "
                            f"and writes a reproducer):\n{why}", None, "")
    return module


def _clone(module: Module) -> Module:
    """A copy of `module` to keep as one level of `CompiledModel.modules`: its ops printed and parsed
    back, its weights shared (a new table of the same resources: nothing is encoded or copied)."""
    import io

    from .ir.parser import parse_module
    from .ir.printer import Printer
    from .ir.resources import ResourceTable

    buf = io.StringIO()
    Printer(buf).module(module)
    table = ResourceTable()
    for r in module.resources:
        table.put(r)
    return parse_module(buf.getvalue(), "<module>", register_source=False, resources=table)


class CompiledModel:
    """A compiled model ready to run: onnxruntime's InferenceSession interface (`run`, `get_inputs`,
    `get_outputs`) plus `profile`, the IR it went through (`modules`), and `save`."""

    def __init__(self, module: Module, target: str, device: Any = None,
                 modules: Mapping[str, Module] | None = None, cache_key: str | None = None):
        self.module = module
        self.target = target
        self.modules: Mapping[str, Module] = modules if isinstance(modules, _Levels) else \
            dict(modules or {"target": module})
        """The IR at each level it went through: 'imported', 'optimized', 'target' (OpenCL)."""
        self.func: Func = module.func("main") or module.funcs[0]
        from .ir.interpreter import output_names

        self._inputs = self._describe(self.func)
        from .ir.interpreter import input_names

        self._names = input_names(self.func)
        self._dtypes = [v.type.np_dtype for v in self.func.args]
        self._checked: set[tuple[tuple[int, ...], ...]] = set()
        """Input shapes a feed was checked at (a feed of those shapes and dtypes needs no check)."""
        unnamed = frozenset(self.func.attrs.get("unnamed_dims") or ())
        self._outputs = [_node_arg(n, t, unnamed) for n, t in zip(output_names(self.func),
                                                                  self.func.result_types, strict=True)]
        self._lock = threading.Lock()
        self._device = device
        self._exe: Any = None
        self.codegen_seconds = 0.0
        """Seconds `tessel.compile` spent lowering to the target (0 for a loaded module)."""
        self.phases: dict[str, float] = {}
        """Seconds `tessel.compile` spent in each phase: 'import', 'opt', 'codegen' and 'store' (keeping
        the module in the compiled-module cache) when it compiled the model, 'cache' (reading the module)
        when the cache held it; empty for a loaded module. Making the executable (weights, programs) is
        the rest of the call."""
        if target == "opencl":
            from .targets.opencl.dynamic import executable, settle_heap

            self._exe = executable(module, self.func, device)
            if cache_key is not None and hasattr(self._exe, "cache_key"):  # a dynamic model's sizes
                self._exe.cache_key = cache_key
            settle_heap()  # the compile's and load's objects aged before the first run

    @staticmethod
    def _describe(func: Func) -> list[NodeArg]:
        from .ir.interpreter import input_names

        unnamed = frozenset(func.attrs.get("unnamed_dims") or ())
        return [_node_arg(n, v.type, unnamed) for n, v in zip(input_names(func), func.args, strict=True)]

    # onnxruntime's interface ---------------------------------------------------------------------
    def get_inputs(self) -> list[NodeArg]:
        return list(self._inputs)

    def get_outputs(self) -> list[NodeArg]:
        return list(self._outputs)

    def run(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any],
            run_options: Any = None) -> list[np.ndarray]:
        """The outputs named (all, in order, when None) for the inputs in `input_feed` (by name)."""
        arrays = self._arrays(input_feed)
        with self._lock:
            outs = self._execute(arrays)
        names = [o.name for o in self._outputs]
        if output_names is None:
            return outs
        missing = [n for n in output_names if n not in names]
        if missing:
            raise InvalidArgument(f"invalid output name{'s' if len(missing) > 1 else ''}: "
                                  f"{', '.join(missing)} (the model's outputs: {', '.join(names)})")
        return [outs[names.index(n)] for n in output_names]

    def profile(self, input_feed: Mapping[str, Any], repeat: int = 10) -> list[dict[str, Any]]:
        """Per kernel (OpenCL): its launches, median ms, GFLOP/s, GB/s, roofline bound and ONNX nodes,
        over `repeat` runs after a warm-up, as `tessel-run --profile` prints them."""
        if self.target != "opencl":
            raise InvalidArgument("profile() needs the opencl target (kernels to time)")
        from .targets.opencl.dynamic import executable
        from .targets.opencl.profile import kernel_rows, peaks_for

        arrays = self._arrays(input_feed)
        with self._lock:
            exe = executable(self.module, self.func, self._exe.device, profile=True)
            if hasattr(exe, "for_shapes"):  # a dynamic func: the executable of these inputs' sizes
                exe = self._call(exe.for_shapes, [a.shape for a in arrays])
            _, stats = exe.measure(arrays, repeat)
            peaks = peaks_for(exe.device)
            return [row.as_dict(peaks) for row in kernel_rows(exe, stats)]

    def save(self, path: str | Path) -> None:
        """Write the module this runs (target-level for OpenCL) as a .tsl file, atomically; `tessel.load`
        and the tools read it back."""
        from .ir.printer import to_text

        path = Path(path)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(to_text(self.module), encoding="utf-8")
        tmp.replace(path)

    # helpers ------------------------------------------------------------------------------------
    def _arrays(self, feed: Mapping[str, Any]) -> list[np.ndarray]:
        """The feed's arrays in argument order. A feed of the names, dtypes and shapes of one checked
        before is taken as it is (no copy, no walk of the func); anything else is checked in full (every
        problem named, as check_inputs does) and its shapes remembered."""
        if not isinstance(feed, Mapping):
            raise InvalidArgument(f"input_feed must be a dict of input name -> array, got "
                                  f"{type(feed).__name__}")
        if len(feed) == len(self._names):
            try:
                arrays = [feed[n] for n in self._names]
            except KeyError:
                arrays = None
            if arrays is not None:
                arrays = [a if type(a) is np.ndarray else np.asarray(a) for a in arrays]
                if all(a.dtype == d for a, d in zip(arrays, self._dtypes, strict=True)) and \
                        tuple(a.shape for a in arrays) in self._checked:
                    return arrays
        from .ir.interpreter import check_inputs

        try:
            arrays = check_inputs(self.func, {k: np.asarray(v) for k, v in feed.items()})
        except DiagnosticError as e:
            raise InvalidArgument(str(e.diagnostics[0].message) + "".join(
                f"; {n}" for d in e.diagnostics for n in d.notes)) from None
        if len(self._checked) < 64:
            self._checked.add(tuple(a.shape for a in arrays))
        return arrays

    def _execute(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        if self._exe is not None:
            return self._call(self._exe.run, arrays)
        from .ir.interpreter import run_func

        return self._call(run_func, self.module, self.func, arrays)

    @staticmethod
    def _call(fn: Any, *args: Any) -> Any:
        """`fn(*args)`, with the sizes of a dynamic func's inputs not fitting it (or sizes the model cannot
        run at: a failed `assert`) raised as InvalidArgument."""
        from .ir.ops.control import AssertionFailed

        try:
            return fn(*args)
        except AssertionFailed as e:  # an `assert` the host plan checked
            raise InvalidArgument(str(e)) from None
        except DiagnosticError as e:
            d = e.diagnostics[0]
            if "do not fit func" not in d.message and "cannot run at these input sizes" not in d.message:
                raise
            raise InvalidArgument(d.message + "".join(f"; {n}" for n in d.notes)) from None


def compile(model: Any, opt_level: int = 2, target: str = "opencl", device: str | None = None,
            tuning_records: str | None = None, input_shapes: Mapping[str, Sequence[int]] | None = None,
            weight_precision: str = "f32",
            shape_hints: Sequence[Mapping[str, Sequence[int]]] | Mapping[str, Sequence[int]] | None = None,
            cache: bool = True) -> CompiledModel:
    """Import `model` (an ONNX path, ModelProto or bytes, a .tsl path or text, or a Module), optimize it at
    -O`opt_level`, and compile it for `target` ('opencl', or 'numpy': the reference interpreter) on
    `device` (an OpenCL device spec as `tessel-run --device`: None picks the first, a GPU if any);
    `tuning_records`: a tessel-tune record file; `input_shapes`: static shapes for dynamic ONNX inputs
    (without them, dynamic dims stay dynamic: the model runs inputs of any size, each size compiled the
    first time it is met); `shape_hints`: the input shapes (a dict of input name -> shape, or a list of
    such dicts) to compile ahead of time, tuned by the records; `cache`: keep the compiled module in (and
    take it from) the compiled-module cache, keyed by the model's bytes, these options, the device and
    tessel's code, so that a later compile of the same model in any process loads it (and the sizes of a
    dynamic model its runs compiled) instead of compiling again (TESSEL_MODULE_CACHE=0 turns it off
    everywhere; docs/opencl.md "Caches")."""
    if target not in TARGETS:
        raise InvalidArgument(f"unknown target '{target}' (expected {' or '.join(TARGETS)})")
    if opt_level not in (0, 1, 2, 3):
        raise InvalidArgument(f"opt_level must be 0 to 3, got {opt_level}")
    source = None if isinstance(model, Module) else _Source(model)
    if target == "opencl" and cache and source is not None:
        t0 = time.perf_counter()
        key, cl_device, info = _cache_key(source, device, opt_level, tuning_records, input_shapes,
                                          weight_precision, shape_hints)
        from .targets.opencl import compiled as compiled_cache

        if key is not None and (hit := compiled_cache.load(key)) is not None:
            lazy = _Levels(hit, lambda: _front(source.get(), input_shapes, opt_level, weight_precision))
            read = time.perf_counter() - t0
            compiled = CompiledModel(hit, "opencl", cl_device, lazy, cache_key=key)
            compiled.phases = {"cache": read}
            return compiled
    else:
        key, cl_device, info = None, None, None
    t0 = time.perf_counter()
    module = import_bytes(*source.get(), input_shapes) if source is not None else model
    if module.attrs.get("target") == "opencl":  # already compiled: load it
        return load(module, device)
    phases = {"import": time.perf_counter() - t0}
    levels = {"imported": _clone(module)}
    t0 = time.perf_counter()
    optimize(module, opt_level, weight_precision)
    phases["opt"] = time.perf_counter() - t0
    if target == "numpy":
        levels["optimized"] = module
        compiled = CompiledModel(module, "numpy", modules=levels)
        compiled.phases = phases
        return compiled
    from .targets.opencl import device as dev
    from .targets.opencl.lower import lower_module
    from .targets.opencl.records import Tuning, read_records

    levels["optimized"] = _clone(module)
    from .targets.opencl.profile import compile_info

    t0 = time.perf_counter()
    if info is None:
        cl_device = dev.pick_device(device)
        info = compile_info(cl_device, lambda text: print(f"tessel: {text}", file=sys.stderr))
    tuning = Tuning(read_records(tuning_records), info.fingerprint) if tuning_records else None
    from .ir.specialize import is_dynamic
    from .targets.opencl.kernels.winograd import considers

    hook = info.calibrate  # the device's calibration, made on its first need (profile.compile_info)
    if hook is not None and any(is_dynamic(f) for f in module.funcs) and considers(module):
        info = info.measured()  # its sizes are lowered at run time, with the peaks stored by then
    lower_module(module, info, tuning=tuning)
    if shape_hints:
        from .targets.opencl.dynamic import embed_hint

        hints = [shape_hints] if isinstance(shape_hints, Mapping) else list(shape_hints)
        func = module.func("main") or module.funcs[0]
        names = [n.name for n in CompiledModel._describe(func)]
        for hint in hints:
            unknown = sorted(set(hint) - set(names))
            if unknown or set(hint) != set(names):
                raise InvalidArgument(f"shape_hints must give every input ({', '.join(names)}); got "
                                      f"{', '.join(hint) or 'none'}")
            shapes = [list(hint[n]) for n in names]
            if not is_dynamic(func):  # a static model is compiled for its one size already
                own = [list(a.type.shape) for a in func.args]
                if shapes != own:
                    raise InvalidArgument(f"shape_hints {shapes} do not fit the model's static inputs {own}")
                continue
            CompiledModel._call(embed_hint, module, func, shapes, info, tuning)
    levels["target"] = module
    codegen = time.perf_counter() - t0
    phases["codegen"] = codegen
    if key is not None and hook is not None and hook.peaks is not None:
        # this lowering calibrated the device (its first need): keyed by the peaks stored now, under which
        # a later compile looks the model up
        key = _cache_key(source, device, opt_level, tuning_records, input_shapes, weight_precision,
                         shape_hints)[0]
    if key is not None:
        from .targets.opencl import compiled as compiled_cache

        t0 = time.perf_counter()
        compiled_cache.fold_load_ops(module)  # the packed weights kept as they load (once, here)
        compiled_cache.store(key, module)
        phases["store"] = time.perf_counter() - t0
    compiled = CompiledModel(module, "opencl", cl_device, levels, cache_key=key)
    compiled.codegen_seconds = codegen
    compiled.phases = phases
    return compiled


class _Source:
    """A model given by path, bytes, text or ModelProto: its bytes read (`get`) only when needed, so that a
    compile the cache answers by the file's path and stat never reads a large model."""

    def __init__(self, model: Any):
        self.model = model
        self.path = model_path(model)
        self._got: tuple[bytes, str] | None = None

    @property
    def filename(self) -> str:
        return str(self.path) if self.path is not None else self.get()[1]

    def get(self) -> tuple[bytes, str]:
        if self._got is None:
            self._got = model_bytes(self.model)
        return self._got


def _cache_key(source: _Source, device: str | None, opt_level: int, tuning_records: str | None,
               input_shapes: Any, weight_precision: str, shape_hints: Any) -> tuple[str | None, Any, Any]:
    """(the compiled-module cache's key for this compile, the OpenCL device, its DeviceInfo); the key is
    None when the model cannot be cached, or when no device is at hand (the compile then reports that
    where it always has, after the import). A model file met before with the same path and stat gives its
    key without being read (`compiled.path_key`)."""
    from .targets.opencl import compiled as compiled_cache
    from .targets.opencl import device as dev
    from .targets.opencl.profile import compile_info

    try:
        cl_device = dev.pick_device(device)
    except (DiagnosticError, RuntimeError, ValueError):
        return None, None, None
    info = compile_info(cl_device, lambda text: print(f"tessel: {text}", file=sys.stderr))
    records = b""
    if tuning_records:
        try:
            records = Path(tuning_records).read_bytes()
        except OSError:
            return None, cl_device, info  # the compile reports it
    options = {"opt_level": opt_level, "weights": weight_precision, "input_shapes": input_shapes,
               "shape_hints": shape_hints, "records": hashlib.sha256(records).hexdigest(),
               "name": Path(source.filename).name}
    by_path = compiled_cache.path_key(source.path, options, info) if source.path is not None else None
    if by_path is not None and (key := compiled_cache.remembered(by_path)) is not None:
        return key, cl_device, info
    data, filename = source.get()
    key = compiled_cache.model_key(data, is_tsl(data, filename), options, info)
    if by_path is not None and key is not None:
        compiled_cache.remember(by_path, key)
    return key, cl_device, info


def _front(source: tuple[bytes, str], input_shapes: Any, opt_level: int, weight_precision: str,
           ) -> dict[str, Module]:
    """The 'imported' and 'optimized' levels of a model whose target level came from the cache."""
    module = import_bytes(*source, input_shapes)
    levels = {"imported": _clone(module)}
    levels["optimized"] = optimize(module, opt_level, weight_precision)
    return levels


class _Levels(Mapping[str, Module]):
    """`CompiledModel.modules` of a model loaded from the compiled-module cache: 'target' at hand, the
    'imported' and 'optimized' levels made again (import and optimize) the first time any other level is
    asked for, or the levels are listed."""

    def __init__(self, target: Module, front: Any):
        self._levels = {"target": target}
        self._front = front

    def _all(self) -> dict[str, Module]:
        if self._front is not None:
            front, self._front = self._front, None
            self._levels.update(front())
        return self._levels

    def __getitem__(self, key: str) -> Module:
        return self._levels["target"] if key == "target" else self._all()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


def load(path: Any, device: str | None = None) -> CompiledModel:
    """A compiled model from the target-level .tsl `CompiledModel.save` (or `tessel compile`) wrote, or
    from its Module: loaded on `device` without recompiling."""
    module = path if isinstance(path, Module) else import_model_source(path)
    if module.attrs.get("target") != "opencl":
        raise InvalidArgument("tessel.load takes a compiled (target-level) module; compile a model with "
                              "tessel.compile")
    from .targets.opencl import device as dev

    return CompiledModel(module, "opencl", dev.pick_device(device), {"target": module})
