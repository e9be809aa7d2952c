"""An `onnx.backend` Backend built on tessel: import the model, optionally run a pass pipeline, execute it.

    rep = TesselBackend.prepare(model, "CPU", target="numpy", pipeline="-O1")
    outputs = rep.run([x])          # a list in graph-input order, or a dict keyed by input name

This is what the ONNX node conformance suite (tests/conformance) and the model tests drive. The target
is a parameter: a target registers an executor factory (module, func) -> (arrays -> arrays) under its
name, lazily, so the OpenCL target plugs in without this file importing it.

tessel compiles for static shapes and needs the values of shape-like operands (Reshape's shape, an
`axes`, Pad's pads, Resize's scales) at import. A model whose inputs have dynamic dims is therefore
imported on its first `run`, with the dims of the arrays it is given; and with `specialize` (the
default) a model that feeds such operands as graph inputs, as the ONNX node tests do, is imported on its
first `run` with the fewest, smallest inputs baked in as constants, and recompiled when those inputs'
values change (`TesselRep.specialized_inputs` names them). `specialize=False` refuses such models.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep, namedtupledict

from ...ir.core import Func, Module
from ...ir.diagnostics import Diagnostic, DiagnosticError
from .importer import import_model

Executor = Callable[[list[np.ndarray]], list[np.ndarray]]
ExecutorFactory = Callable[[Module, Func], Executor]

TARGETS: dict[str, str] = {
    "numpy": "tessel.frontends.onnx.backend:numpy_executor",
    "opencl": "tessel.targets.opencl.runtime:opencl_executor",
}
"""Target name -> "module:function" of its executor factory, imported on first use."""


def register_target(name: str, factory: str | ExecutorFactory) -> None:
    """Make `target=name` available; `factory` is a callable or a "module:function" import path."""
    _factories.pop(name, None)
    if isinstance(factory, str):
        TARGETS[name] = factory
    else:
        TARGETS[name] = f"<callable {name}>"
        _factories[name] = factory


_factories: dict[str, ExecutorFactory] = {}


def executor_factory(target: str) -> ExecutorFactory:
    if target in _factories:
        return _factories[target]
    path = TARGETS.get(target)
    if path is None:
        raise DiagnosticError(Diagnostic(
            "error", f"unknown target '{target}' (known: {', '.join(sorted(TARGETS))})"))
    mod, _, fn = path.partition(":")
    factory = getattr(importlib.import_module(mod), fn)
    _factories[target] = factory
    return factory


def numpy_executor(module: Module, func: Func) -> Executor:
    """The reference interpreter."""
    from ...ir.interpreter import run_func

    return lambda args: run_func(module, func, args)


def _import_later(model: onnx.ModelProto) -> bool:
    """Whether the import waits for the first inputs: every input is a tensor, some with dynamic dims."""
    inits = {i.name for i in model.graph.initializer}
    inputs = [vi for vi in model.graph.input if vi.name not in inits]
    return all(vi.type.HasField("tensor_type") for vi in inputs) and any(
        not d.HasField("dim_value") for vi in inputs for d in vi.type.tensor_type.shape.dim)


def _as_array(x: Any) -> np.ndarray:
    if isinstance(x, onnx.TensorProto):
        return onnx.numpy_helper.to_array(x)
    return np.asarray(x)


NEEDS_CONSTANT = re.compile(r"must be a constant|only known at run time")
"""Import errors that baking some inputs in as constants can cure (see TesselRep)."""


@dataclasses.dataclass
class Compiled:
    """One compiled version of a model: for given dynamic dims and baked-in input values."""

    module: Module
    run: Executor
    fed: list[str]  # the ONNX inputs the func takes, in order (the others were baked in)


class TesselRep(BackendRep):
    """A prepared model on one target.

    A model with static input shapes is compiled once, here. One with dynamic dims is compiled on its
    first `run`, for the shapes it is given (and again for new shapes). With `specialize` (the default),
    a model that tessel can only import when some of its inputs are constants (an `axes`, `shape`,
    `pads`, `k` or `scales` fed as a graph input, as the ONNX node tests do) is compiled on its first
    `run` with the fewest smallest inputs baked in as initializers, and recompiled when their values
    change; `specialized_inputs` names them.
    """

    def __init__(self, model: onnx.ModelProto, target: str = "numpy", pipeline: str | None = None,
                 verify: bool = True, roundtrip: bool = False, filename: str = "<model>",
                 specialize: bool = True):
        self.model = model
        self.target = target
        self.pipeline = pipeline
        self.verify = verify
        self.roundtrip = roundtrip
        self.filename = filename
        self.specialize = specialize
        inits = {i.name for i in model.graph.initializer}
        self.input_names = [vi.name for vi in model.graph.input if vi.name not in inits]
        self.output_names = [vi.name for vi in model.graph.output]
        self.specialized_inputs: list[str] | None = None  # None: not chosen yet
        self._dynamic = _import_later(model)
        self._cache: dict[tuple, Compiled] = {}
        self._static: Compiled | None = None
        self._last: Compiled | None = None
        if not self._dynamic:
            try:
                self._static = self.compile()
                self.specialized_inputs = []
            except DiagnosticError as e:
                if not (specialize and _needs_constant(e)):
                    raise

    @property
    def module(self) -> Module | None:
        """The module last compiled."""
        return self._last.module if self._last is not None else None

    def compile(self, input_shapes: Mapping[str, Sequence[int]] | None = None,
                baked: Mapping[str, np.ndarray] | None = None) -> Compiled:
        """Import (with `baked` inputs as initializers), verify, optimize, and hand to the target."""
        model = self.model
        if baked:
            model = onnx.ModelProto()
            model.CopyFrom(self.model)
            model.graph.initializer.extend(onnx.numpy_helper.from_array(a, n) for n, a in baked.items())
        shapes = {k: v for k, v in (input_shapes or {}).items() if not baked or k not in baked}
        module = import_model(model.SerializeToString(), self.filename, shapes)
        if self.roundtrip:
            from ...ir.parser import parse_module
            from ...ir.printer import to_text

            module = parse_module(to_text(module), self.filename)
        if self.verify:
            from ...ir.verifier import verify_or_raise

            verify_or_raise(module)
        if self.pipeline:
            from ...passes.manager import PassManager
            from ...passes.pipeline import O_LEVELS, parse_pipeline

            text = self.pipeline
            if len(text) == 3 and text.startswith("-O") and text[2].isdigit():
                text = O_LEVELS[int(text[2])]
            PassManager(parse_pipeline(text)).run(module)
        func = module.funcs[0]
        compiled = Compiled(module, executor_factory(self.target)(module, func),
                            [n for n in self.input_names if not baked or n not in baked])
        self._last = compiled
        return compiled

    def _choose(self, arrays: dict[str, np.ndarray], shapes: dict[str, tuple[int, ...]]) -> Compiled:
        """Compile with the fewest inputs baked in (smallest first) that makes the import succeed."""
        try:
            compiled = self.compile(shapes)
            self.specialized_inputs = []
            return compiled
        except DiagnosticError as e:
            if not (self.specialize and _needs_constant(e)):
                raise
            error = e
        order = sorted(self.input_names, key=lambda n: (arrays[n].size, self.input_names.index(n)))
        for k in range(1, len(order) + 1):
            try:
                compiled = self.compile(shapes, {n: arrays[n] for n in order[:k]})
            except DiagnosticError as e:
                if not _needs_constant(e):
                    raise
                error = e
                continue
            self.specialized_inputs = [n for n in self.input_names if n in order[:k]]
            return compiled
        raise error

    def _compiled_for(self, arrays: dict[str, np.ndarray]) -> Compiled:
        if self._static is not None:
            return self._static
        shapes = {n: tuple(a.shape) for n, a in arrays.items()} if self._dynamic else {}
        fresh = self._choose(arrays, shapes) if self.specialized_inputs is None else None
        baked = {n: arrays[n] for n in self.specialized_inputs or ()}
        key = (tuple(sorted(shapes.items())),
               tuple((n, a.dtype.str, a.shape, a.tobytes()) for n, a in baked.items()))
        if key not in self._cache:
            if len(self._cache) >= 16:
                self._cache.pop(next(iter(self._cache)))
            self._cache[key] = fresh or self.compile(shapes, baked)
        return self._cache[key]

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Execute on `inputs` (a list in graph-input order, a dict by name, or one array); the outputs
        come back in graph-output order as a namedtuple that can also be indexed by output name."""
        if isinstance(inputs, Mapping):
            missing = [n for n in self.input_names if n not in inputs]
            extra = sorted(set(inputs) - set(self.input_names))
            if missing or extra:
                raise DiagnosticError(Diagnostic(
                    "error", f"inputs do not match the model: missing {missing}, unexpected {extra}"))
            arrays = [_as_array(inputs[n]) for n in self.input_names]
        else:
            seq = [inputs] if isinstance(inputs, np.ndarray | onnx.TensorProto) else list(inputs)
            if len(seq) != len(self.input_names):
                raise DiagnosticError(Diagnostic(
                    "error", f"the model takes {len(self.input_names)} inputs "
                             f"({', '.join(self.input_names)}), {len(seq)} given"))
            arrays = [_as_array(x) for x in seq]
        by_name = dict(zip(self.input_names, arrays, strict=True))
        compiled = self._compiled_for(by_name)
        from ...ir.interpreter import check_inputs, input_names

        func = compiled.module.funcs[0]
        fed = [by_name[n] for n in compiled.fed]
        args = check_inputs(func, dict(zip(input_names(func), fed, strict=True)))
        outs = compiled.run(args)
        return namedtupledict("Outputs", self.output_names)(*[np.asarray(o) for o in outs])


def _needs_constant(e: DiagnosticError) -> bool:
    from ...ir.diagnostics import render

    return bool(NEEDS_CONSTANT.search("".join(render(d) for d in e.diagnostics)))


class TesselBackend(Backend):
    """`onnx.backend` entry point: `prepare(model, device="CPU", target="numpy")`."""

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        return cls.supports_device(device)

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", target: str = "numpy",
                pipeline: str | None = None, verify: bool = True, roundtrip: bool = False,
                filename: str | None = None, specialize: bool = True, **kwargs: Any) -> TesselRep:
        """Import `model` for `target` (see TesselRep for when that waits for the first inputs);
        raises DiagnosticError (unsupported ops, a bad model...)."""
        if not cls.supports_device(device):
            raise DiagnosticError(Diagnostic("error", f"tessel runs on CPU devices, not '{device}'"))
        name = filename or f"{model.graph.name or 'model'}.onnx"
        return TesselRep(model, target, pipeline, verify, roundtrip, name, specialize)

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU",
                  **kwargs: Any) -> tuple[Any, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Any, device: str = "CPU",
                 outputs_info: Sequence[tuple[np.dtype, tuple[int, ...]]] | None = None,
                 **kwargs: Any) -> tuple[Any, ...]:
        """Run one node: wrap it in a model whose input types come from `inputs`."""
        from onnx import helper

        arrays = [_as_array(x) for x in inputs]
        names = [n for n in node.input if n]
        graph_inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
                        for n, a in zip(names, arrays, strict=True)]
        if outputs_info is not None:
            graph_outputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(np.dtype(t)), s)
                             for n, (t, s) in zip([n for n in node.output if n], outputs_info, strict=True)]
        else:
            graph_outputs = [helper.make_empty_tensor_value_info(n) for n in node.output if n]
        graph = helper.make_graph([node], "node", graph_inputs, graph_outputs)
        opset = int(kwargs.pop("opset_version", onnx.defs.onnx_opset_version()))
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        if outputs_info is None:  # the checker wants typed outputs: let ONNX's shape inference fill them in
            model = onnx.shape_inference.infer_shapes(model)
        return cls.prepare(model, device, **kwargs).run(arrays)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return str(device).upper().split(":")[0] == "CPU"


prepare = TesselBackend.prepare
run_model = TesselBackend.run_model
run_node = TesselBackend.run_node
supports_device = TesselBackend.supports_device
