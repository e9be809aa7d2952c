"""ONNX -> tessel graph-level IR.

`import_model` loads a model (external data included), checks it, lists every unsupported op in one
error, fixes dynamic input dims from `input_shapes`, and converts node by node through the converters in
ops/. Every op gets `loc("onnx:<node name>")`; func arguments and results keep the ONNX names (as a
`name` attribute where the IR name had to change). `constants` makes some graph inputs constants first
(`bake_inputs`): tessel needs the values of shape-like operands at import, and a conversion refused for
want of one says which graph inputs its value comes from.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from ...ir.core import Func, Module, Op
from ...ir.diagnostics import Diagnostic, DiagnosticError
from ...ir.ops.registry import OpError
from ...ir.printer import sanitize
from ...ir.symbolic import RESERVED, Sym
from ...ir.types import TensorType
from .builder import Builder, ConversionError, Tensor
from .registry import DEFAULT_DOMAINS, TRAINING_DOMAIN, get_converter
from .types import onnx_element_type

CONVERTIBLE_DOMAINS = DEFAULT_DOMAINS + (TRAINING_DOMAIN,)
NEEDS_CONSTANT = re.compile(r"must be a constant|only known at run time")
"""Conversion errors that giving some graph inputs' values at import cures (as the onnx.backend adapter
does, and tessel-import's --constant-input)."""


def _err(message: str, notes: Sequence[str] = ()) -> DiagnosticError:
    d = Diagnostic("error", message)
    for n in notes:
        d.note(n)
    return DiagnosticError(d)


def allocation_failed(e: BaseException) -> bool:
    """Whether `e` is protobuf (upb) saying it could not allocate: a parse's 'Arena alloc failed', or a
    serialization's bare 'Failed to serialize proto' (onnx.checker serializes the whole model; upb's other
    reasons, a missing required field or 100 levels of nesting, do not occur in ONNX models). `load` raises
    a MemoryError for either (the tools: exit status 1, 'out of host memory')."""
    if not type(e).__module__.startswith("google.protobuf"):
        return False
    text = str(e)
    return "alloc failed" in text.lower() or (type(e).__name__ == "EncodeError"
                                              and text == "Failed to serialize proto")


def load(data: bytes, filename: str) -> onnx.ModelProto:
    """Parse and check a model, loading external data from the file's folder."""
    if not data:
        raise _err(f"'{filename}' is empty, not an ONNX model")
    try:
        model = onnx.load_model_from_string(data)
    except Exception as e:  # protobuf's DecodeError and friends
        if allocation_failed(e):
            raise MemoryError(str(e)) from None
        hint = ""
        if data.lstrip()[:6] in (b"module", b"func @") or data.lstrip().startswith(b"//"):
            hint = "; it looks like tessel IR text, which tessel-opt and tessel-run read"
        raise _err(f"'{filename}' is not a valid ONNX model (truncated or not ONNX): {e}{hint}") from None
    if not model.HasField("graph") or (not model.graph.node and not model.graph.output):
        raise _err(f"'{filename}' is not an ONNX model: it has no graph")
    base = os.path.dirname(os.path.abspath(filename)) if filename not in ("<stdin>", "-") else os.getcwd()
    tensors = getattr(onnx.external_data_helper, "_get_all_tensors", None)  # None: assume external data
    external = tensors is None or any(onnx.external_data_helper.uses_external_data(t) for t in tensors(model))
    try:
        onnx.external_data_helper.load_external_data_for_model(model, base)
    except FileNotFoundError as e:
        raise _err(f"'{filename}': external data file '{os.path.basename(str(e.filename))}' is missing "
                   f"(looked in {base})") from None
    except (OSError, ValueError, onnx.checker.ValidationError) as e:
        first = str(e).strip().split("\n")[0]
        raise _err(f"'{filename}': cannot load external data: {first}") from None
    resorted = sort_nodes(model.graph)
    try:
        # the bytes as given when they are the model (nothing re-sorted or loaded from beside it): the
        # checker would serialize the model again (alexnet's 244 MB: 0.3 s of a 1.3 s import)
        onnx.checker.check_model(data if not (resorted or external) else model)
    except onnx.checker.ValidationError as e:
        flat = " ".join(str(e).split())  # one line, keeping the node name the checker puts on later lines
        raise _err(f"'{filename}' fails onnx.checker: {flat}") from None
    except Exception as e:
        if allocation_failed(e):
            raise MemoryError(str(e)) from None
        raise
    newest = onnx.defs.onnx_opset_version()
    if default_opset(model) > newest:  # the checker accepts any version; converters would guess
        raise _err(f"'{filename}' imports ONNX opset {default_opset(model)}, but the newest opset this "
                   f"onnx package ({onnx.__version__}) knows is {newest}")
    return model


def sort_nodes(graph: onnx.GraphProto) -> bool:
    """Put the graph's nodes in an order where each comes after the producers of its inputs, when they
    are not (onnxruntime's convert_float_to_float16 with keep_io_types appends the input casts at the end;
    onnxruntime runs such graphs, onnx.checker refuses them). Stable: a sorted graph keeps its order, and a
    node whose inputs no node and no graph input or initializer gives (a cycle, a typo) stays where it is
    for the checker to name."""
    nodes = list(graph.node)
    known = {i.name for i in graph.input} | {i.name for i in graph.initializer} | {""}
    known |= {i.name for i in graph.sparse_initializer}
    made = {o for n in nodes for o in n.output}
    order: list[onnx.NodeProto] = []
    pending = nodes
    while pending:
        rest = []
        for n in pending:
            if all(i in known or i not in made for i in _uses(n)):
                order.append(n)
                known.update(n.output)
            else:
                rest.append(n)
        if len(rest) == len(pending):  # a cycle: leave the rest as it was
            order += rest
            break
        pending = rest
    if [id(n) for n in order] != [id(n) for n in nodes]:
        sorted_nodes = [onnx.NodeProto.FromString(n.SerializeToString()) for n in order]
        del graph.node[:]
        graph.node.extend(sorted_nodes)
        return True
    return False


def _uses(node: onnx.NodeProto) -> list[str]:
    """The names a node reads: its inputs and, for control flow, every input of its subgraphs' nodes (an
    over-approximation of the outer values they capture)."""
    names = list(node.input)
    for a in node.attribute:
        for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
            for n in g.node:
                names += _uses(n)
    return names


def default_opset(model: onnx.ModelProto) -> int:
    for o in model.opset_import:
        if o.domain in DEFAULT_DOMAINS:
            return o.version
    return 1


def check_supported(model: onnx.ModelProto, filename: str) -> None:
    """One error listing every unsupported op type with its count, opset and first node names."""
    opset = default_opset(model)
    missing: dict[tuple[str, str], list[str]] = collections.defaultdict(list)
    for i, node in enumerate(model.graph.node):
        name = node.name or f"{node.op_type}_{i}"
        conv = get_converter(node.op_type, node.domain)
        if conv is None or (node.domain in CONVERTIBLE_DOMAINS and opset < conv.since):
            missing[("" if node.domain in CONVERTIBLE_DOMAINS else node.domain, node.op_type)].append(name)
    if not missing:
        return
    notes = []
    for (domain, op_type), names in sorted(missing.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        where = f"domain '{domain}'" if domain else f"opset {opset}"
        shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        notes.append(f"{op_type} ({where}): {len(names)} node{'s' if len(names) > 1 else ''}: {shown}")
    total = sum(len(v) for v in missing.values())
    raise _err(f"'{filename}' uses {len(missing)} unsupported op type{'s' if len(missing) > 1 else ''} "
               f"({total} node{'s' if total > 1 else ''})", notes)


def _dims(vi: onnx.ValueInfoProto) -> list[int | None]:
    """Declared dims: ints, None for a dynamic one (a dim_param, no value, or exporters' -1 and 0)."""
    return [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
            for d in vi.type.tensor_type.shape.dim]


def symbolic_dims(inputs: Sequence[onnx.ValueInfoProto],
                  fixed: Mapping[str, Sequence[int]]) -> dict[str, list]:
    """Each input's dims with its dynamic ones as symbols: a dim_param names its symbol (the same name on
    two inputs is the same size), an unnamed, -1 or 0 dim gets `<input>_<axis>`; inputs in `fixed`
    (--input-shape) keep the sizes given."""
    def named(d: Any) -> bool:  # paddle2onnx writes "?" as a dim_param: a name with no letter names nothing
        return bool(d.dim_param) and bool(re.search(r"[A-Za-z0-9]", d.dim_param))

    taken: set[str] = set()
    for vi in inputs:
        taken.update(sanitize_symbol(d.dim_param) for d in vi.type.tensor_type.shape.dim if named(d))
    out: dict[str, list] = {}
    for vi in inputs:
        if vi.name in fixed:
            out[vi.name] = [int(g) for g in fixed[vi.name]]
            continue
        dims: list = []
        for k, d in enumerate(vi.type.tensor_type.shape.dim):
            if d.HasField("dim_value") and d.dim_value > 0:
                dims.append(int(d.dim_value))
            elif named(d):
                dims.append(Sym.symbol(sanitize_symbol(d.dim_param)))
            else:
                base = name = sanitize_symbol(f"{vi.name}_{k}")
                n = 0
                while name in taken:
                    n += 1
                    name = f"{base}_{n}"
                taken.add(name)
                dims.append(Sym.symbol(name))
        out[vi.name] = dims
    return out


def unnamed_symbols(inputs: Sequence[onnx.ValueInfoProto], fixed: Mapping[str, Sequence[int]]) -> set[str]:
    """The symbols `symbolic_dims` made up for dims the model does not name (-1, 0, no dim_param, '?')."""
    named = symbolic_dims(inputs, fixed)
    out: set[str] = set()
    for vi in inputs:
        if vi.name in fixed:
            continue
        for d, sym in zip(vi.type.tensor_type.shape.dim, named[vi.name], strict=True):
            if isinstance(sym, Sym) and not (d.dim_param and re.search(r"[A-Za-z0-9]", d.dim_param)):
                out |= sym.symbols()
    return out


def sanitize_symbol(name: str) -> str:
    """A dim_param as a symbol name: letters, digits and _, not starting with a digit, not a keyword."""
    s = re.sub(r"[^A-Za-z0-9_]", "_", name) or "d"
    if s[0].isdigit():
        s = "d" + s
    return s + "_" if s in RESERVED else s


def _dim_text(vi: onnx.ValueInfoProto) -> str:
    out = []
    for d in vi.type.tensor_type.shape.dim:
        out.append(str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?"))
    return "x".join(out) or "scalar"


def attribute_values(node: onnx.NodeProto) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for a in node.attribute:
        v = onnx.helper.get_attribute_value(a)
        if isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        elif isinstance(v, onnx.TensorProto):
            v = numpy_helper.to_array(v)
        elif isinstance(v, list) and v and isinstance(v[0], bytes):
            v = [x.decode("utf-8", "replace") for x in v]
        out[a.name] = v
    return out


def initializer_tensor(b: Builder, init: onnx.TensorProto) -> Tensor:
    what = f"initializer '{init.name}'"
    dtype = onnx_element_type(init.data_type, what)
    arr = numpy_helper.to_array(init)
    t = b.const(arr, dtype, name=init.name)
    return t


def bake_inputs(model: onnx.ModelProto, arrays: Mapping[str, np.ndarray], filename: str = "<model>",
                origins: Mapping[str, str] | None = None) -> None:
    """Make the graph inputs named in `arrays` initializers holding those arrays (in place), so that the
    import sees constants: how an `axes`, a `shape`, `pads` or a trip count fed as a graph input becomes
    known at import. Refuses a name that is not a graph input and an array whose dtype or shape does not
    fit the input's declared type; `origins` says where each array came from, to begin the message."""
    inits = {i.name for i in model.graph.initializer}
    inputs = {vi.name: vi for vi in model.graph.input if vi.name not in inits}
    for name, given in arrays.items():
        origin = (origins or {}).get(name, f"constant input '{name}'")
        vi = inputs.get(name)
        if vi is None:
            raise _err(f"{origin}: '{name}' is not an input of '{filename}' (inputs: "
                       f"{', '.join(inputs) or 'none'})")
        arr = np.asarray(given)
        want = _elem_dtype(vi)
        if want is not None and arr.dtype.kind == "V" == want.kind and arr.dtype.itemsize == want.itemsize:
            arr = arr.view(want)  # .npy and .npz keep ml_dtypes arrays (bf16, float8, int4) as raw bytes
        if not _fits(vi, want, arr):
            raise _err(f"{origin}: the array is {arr.dtype} with shape {list(arr.shape)}, but input "
                       f"'{name}' of '{filename}' is {_declared(vi, want)}")
        native = arr.astype(arr.dtype.newbyteorder("="), copy=False)
        model.graph.initializer.append(numpy_helper.from_array(native, name))


def _elem_dtype(vi: onnx.ValueInfoProto) -> np.dtype | None:
    """A tensor input's numpy element type; None for a non-tensor or an undefined element type."""
    if not vi.type.HasField("tensor_type"):
        return None
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type))
    except (KeyError, ValueError, TypeError):
        return None


def _fits(vi: onnx.ValueInfoProto, want: np.dtype | None, arr: np.ndarray) -> bool:
    """Whether `arr` has the element type and (where declared) the dims of tensor input `vi`."""
    if not vi.type.HasField("tensor_type") or (want is not None and arr.dtype.type != want.type):
        return False  # .type: either byte order
    dims = _dims(vi)
    return not vi.type.tensor_type.HasField("shape") or (
        len(dims) == arr.ndim and all(d is None or d == s for d, s in zip(dims, arr.shape, strict=True)))


def _declared(vi: onnx.ValueInfoProto, want: np.dtype | None) -> str:
    """An input's declared type as `_fits` reads it: `int64 with shape [2]`, `[N, 3]` for symbolic dims."""
    if not vi.type.HasField("tensor_type"):
        return f"a {vi.type.WhichOneof('value') or 'value'}, not a tensor"
    tt = vi.type.tensor_type
    dtype = str(want) if want is not None else onnx.TensorProto.DataType.Name(tt.elem_type)
    if not tt.HasField("shape"):
        return f"{dtype} of any shape"
    dims = [str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in tt.shape.dim]
    return f"{dtype} with shape [{', '.join(dims)}]"


def import_model(data: bytes, filename: str = "<stdin>",
                 input_shapes: Mapping[str, Sequence[int]] | None = None,
                 constants: Mapping[str, np.ndarray] | None = None,
                 constant_origins: Mapping[str, str] | None = None) -> Module:
    """Convert an ONNX model (its serialized bytes) to a tessel module, the graph inputs in `constants`
    made constants first (`bake_inputs`, which `constant_origins` is for). Raises DiagnosticError."""
    model = load(data, filename)
    check_supported(model, filename)
    if constants:
        bake_inputs(model, constants, filename, constant_origins)
    graph = model.graph
    opset = default_opset(model)
    input_shapes = dict(input_shapes or {})

    module = Module(name=sanitize(graph.name or "model"))
    module.attrs = {
        "source": os.path.basename(filename),
        "producer": f"{model.producer_name} {model.producer_version}".strip(),
        "opset": {(o.domain or "ai.onnx"): o.version for o in model.opset_import},
        "ir_version": model.ir_version,
    }
    inits = {i.name for i in graph.initializer}
    graph_inputs = [vi for vi in graph.input if vi.name not in inits]
    unknown = sorted(set(input_shapes) - {vi.name for vi in graph_inputs})
    if unknown:
        raise _err(f"--input-shape names {', '.join(repr(u) for u in unknown)}, which "
                   f"{'is' if len(unknown) == 1 else 'are'} not an input of '{filename}' (inputs: "
                   + ", ".join(vi.name for vi in graph_inputs) + ")")

    arg_types: list[TensorType] = []
    for vi in graph_inputs:
        if not vi.type.HasField("tensor_type"):
            raise _err(
                f"input '{vi.name}' of '{filename}' is not a tensor (sequences and maps are unsupported)"
            )
        try:
            dtype = onnx_element_type(vi.type.tensor_type.elem_type, f"input '{vi.name}'")
        except ConversionError as e:
            raise _err(f"'{filename}': {e}") from None
        dims = _dims(vi)
        if vi.name in input_shapes:
            given = list(input_shapes[vi.name])
            if len(given) != len(dims) or any(
                d is not None and d != g for d, g in zip(dims, given, strict=True)
            ):
                raise _err(f"'{filename}': --input-shape {vi.name}={'x'.join(map(str, given))} does not fit "
                           f"the model's input {vi.name}: {_dim_text(vi)}")
        if not vi.type.tensor_type.HasField("shape") and vi.name not in input_shapes:
            raise _err(f"'{filename}': input '{vi.name}' has no declared rank; give it with --input-shape "
                       f"{vi.name}=DxDx...")
    symbolic = symbolic_dims(graph_inputs, input_shapes)
    for vi in graph_inputs:
        dtype = onnx_element_type(vi.type.tensor_type.elem_type, f"input '{vi.name}'")
        arg_types.append(TensorType(tuple(symbolic[vi.name]), dtype))

    func = Func.new("main", arg_types, [vi.name for vi in graph_inputs], [])
    unnamed = sorted(unnamed_symbols(graph_inputs, input_shapes))
    if unnamed:  # what get_inputs() reports as None, as onnxruntime does for a dim without a dim_param
        func.attrs["unnamed_dims"] = unnamed
    func.arg_attrs = [{"name": vi.name} if sanitize(vi.name) != vi.name else {} for vi in graph_inputs]
    module.funcs.append(func)
    b = Builder(module, func.block, opset)
    env: dict[str, Tensor] = {}
    for vi, v in zip(graph_inputs, func.args, strict=True):
        env[vi.name] = Tensor(v.type, value=v, name=vi.name)
    for init in graph.initializer:
        try:
            env[init.name] = initializer_tensor(b, init)
        except ConversionError as e:
            raise _err(f"'{filename}': {e}") from None

    def outputs(env: dict[str, Tensor]) -> list[Tensor]:
        missing = [vi.name for vi in graph.output if vi.name not in env]
        if missing:
            raise _err(f"'{filename}': graph output '{missing[0]}' is produced by no node")
        return [env[vi.name] for vi in graph.output]

    results = [b.value(t) for t in convert_nodes(b, list(graph.node), env, filename, outputs)]
    func.block.append(Op("return", results))
    func.result_types = [v.type for v in results]
    func.result_attrs = [{"name": vi.name} for vi in graph.output]
    return module


class Diverge(Exception):
    """Raised by the If converter when its branches give values of different types (a squeeze taken only
    when a size is 1): the node loop then converts the rest of the graph into each branch (`split_at`)."""

    def __init__(self, cond: Tensor, branches: Sequence[Any], message: str):
        super().__init__(message)
        self.cond, self.branches, self.message = cond, list(branches), message


MAX_SPLITS = 3
"""Most Ifs on one path whose branches are each given their own copy of the rest of the graph (each one
doubles what follows it)."""


def convert_nodes(b: Builder, nodes: Sequence[onnx.NodeProto], env: dict[str, Tensor], filename: str,
                  finish: Any, start: int = 0, splits: int = 0) -> list[Tensor]:
    """Convert `nodes` (the graph's from index `start` on) into `b`'s block and return `finish(env)`, the
    graph's outputs. An If whose branches disagree in type (Diverge) becomes an `if` whose regions each
    hold their branch and a copy of the nodes after it, yielding the outputs (the types agree there:
    the branches of silero-vad's decoder squeeze a dim only where it is 1, and its outputs are the same
    either way); specialized to sizes, the condition folds and one copy is left."""
    for i in range(start, len(nodes)):
        try:
            convert_node(b, nodes[i], i, env, filename)
        except Diverge as d:
            where = f"'{filename}': ONNX node '{nodes[i].name or f'If_{i}'}' (If)"
            if splits >= MAX_SPLITS:
                raise _err(f"{where}: {d.message} (and {MAX_SPLITS} Ifs before it on this path already have "
                           "the rest of the graph copied into their branches)") from None
            from .ops.control import split_at

            try:
                return split_at(b, nodes[i], d, env, lambda e, after=i + 1: convert_nodes(
                    b, nodes, e, filename, finish, after, splits + 1))
            except ConversionError as e:
                raise _err(f"{where}: {e}") from None
    return finish(env)


def bind_outputs(node: onnx.NodeProto, outs: Sequence[Tensor | None], env: dict[str, Tensor]) -> None:
    """Record a converted node's outputs in `env` (an IR value takes the ONNX output's name)."""
    for n, t in zip(node.output, outs, strict=False):
        if n and t is not None:  # an output a converter leaves as None (a Dropout mask) must go unused
            if not t.is_const and t.value is not None and t.value.name is None:
                t.value.name = n
            elif t.is_const and t.name is None:  # a folded constant (a ConstantOfShape weight) keeps its name
                t.name = n
            env[n] = t


def convert_node(b: Builder, node: onnx.NodeProto, index: int, env: dict[str, Tensor], filename: str) -> None:
    name = node.name or f"{node.op_type}_{index}"
    b.loc = (f"onnx:{name}",)
    b.node_name = sanitize(name)
    b.outputs = tuple(node.output)
    conv = get_converter(node.op_type, node.domain)
    assert conv is not None

    def fail(message: str, notes: Sequence[str] = ()) -> DiagnosticError:
        shapes = ", ".join(f"{n}: {env[n].type}" if n in env else f"{n}: absent" for n in node.input if n)
        return _err(f"'{filename}': ONNX node '{name}' ({node.op_type}): {message}",
                    ([f"operands: {shapes}"] if shapes else []) + list(notes))

    inputs: list[Tensor | None] = []
    for n in node.input:
        if not n:
            inputs.append(None)
        elif n in env:
            inputs.append(env[n])
        else:
            raise fail(f"input '{n}' is not produced by any earlier node, initializer or graph input "
                       "(or its producer's converter does not support that output)")
    attrs = {k: Subgraph(v, env, filename) if isinstance(v, onnx.GraphProto) else v
             for k, v in attribute_values(node).items()}
    extra = sorted(set(attrs) - conv.attributes) if not conv.takes_any_attribute else []
    if extra:
        raise fail(f"attribute{'s' if len(extra) > 1 else ''} {', '.join(extra)} not supported")
    try:
        with np.errstate(all="ignore"):
            out = conv.fn(b, *inputs, **attrs)
    except (ConversionError, OpError) as e:
        needed = _inputs_needed(b, conv.fn, inputs, attrs) if NEEDS_CONSTANT.search(str(e)) else []
        raise fail(str(e), [constant_hint(needed)] if needed else []) from None
    bind_outputs(node, list(out) if isinstance(out, list | tuple) else [out], env)


class _Watched(Tensor):
    """A run-time operand that records when its converter asks for its value and answers zeros, so that
    the converter goes on to ask for the next (Slice's starts, then its ends...); see `_inputs_needed`."""

    __slots__ = ("asked",)

    def const(self, what: str = "this input") -> np.ndarray:
        if not any(a is self for a in self.asked):
            self.asked.append(self)
        return np.zeros(self.shape, self.type.np_dtype)


def _inputs_needed(b: Builder, fn: Any, inputs: Sequence[Tensor | None], attrs: dict[str, Any]) -> list[str]:
    """The graph inputs that the operands a converter refused for not being constants are computed from.
    The converter runs again (its import is failing anyway) with its run-time operands watched, until it
    finishes or stops on a zero it was given; when it asked none of them for its value (it tested
    `is_const` itself, or wanted a value its subgraph made), every run-time operand counts. The IR from
    each such operand is walked back to the func's arguments."""
    asked: list[Tensor] = []
    watched: list[Tensor | None] = []
    for t in inputs:
        if t is not None and not t.is_const:
            w = _Watched(t.type, None, t.value, t.name)
            w.asked = asked
            t = w
        watched.append(t)
    try:
        with np.errstate(all="ignore"):
            fn(b, *watched, **attrs)
    except Exception:  # noqa: BLE001 - a probe: the first attempt's error is the one reported
        pass
    culprits = asked or [t for t in watched if t is not None and not t.is_const]
    return graph_inputs_of(b, culprits)


def graph_inputs_of(b: Builder, tensors: Sequence[Tensor]) -> list[str]:
    """The graph inputs the run-time values of `tensors` are computed from (walking the IR back)."""
    found: dict[int, str] = {}
    seen: set[int] = set()
    stack = [t.value for t in tensors if t.value is not None]
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        if v.op is not None:
            stack.extend(v.op.operands)
        elif v.owner is b.module.funcs[0].block if b.module.funcs else v.owner is b.block:
            found[v.index] = v.name or f"#{v.index}"  # an argument of the func: a graph input
    return [found[i] for i in sorted(found)]


def constant_hint(names: Sequence[str]) -> str:
    """The note naming the graph inputs whose values a conversion needed, and how to give them."""
    many = len(names) > 1
    flags = " ".join(f"--constant-input {n}=FILE.npy" for n in names)
    return (f"the value comes from graph input{'s' if many else ''} {', '.join(repr(n) for n in names)}, "
            f"unknown until run time; give {'them' if many else 'it'} at import with {flags} "
            "(or --constant-inputs FILE.npz)")


@dataclasses.dataclass(frozen=True)
class Subgraph:
    """A graph attribute (If's branches, Loop's and Scan's body) as its converter receives it: the graph
    and the values of the scope it is nested in, which its nodes may name."""

    graph: onnx.GraphProto
    scope: Mapping[str, Tensor]
    filename: str

    def convert(self, b: Builder, inputs: Sequence[Tensor]) -> list[Tensor]:
        """Convert the graph's nodes into `b`'s block with its inputs bound to `inputs`: the body inlined
        once. Returns its outputs. Raises ConversionError for a node without a converter."""
        g = self.graph
        if len(inputs) != len(g.input):
            raise ConversionError(f"subgraph '{g.name}' takes {len(g.input)} inputs, {len(inputs)} given")
        env = dict(self.scope)
        env.update((vi.name, t) for vi, t in zip(g.input, inputs, strict=True))
        for init in g.initializer:
            env[init.name] = initializer_tensor(b, init)
        for node in g.node:
            conv = get_converter(node.op_type, node.domain)
            if conv is None or (node.domain in CONVERTIBLE_DOMAINS and b.opset < conv.since):
                where = f"opset {b.opset}" if node.domain in DEFAULT_DOMAINS else f"domain '{node.domain}'"
                raise ConversionError(f"subgraph '{g.name}' uses {node.op_type} ({where}), which is not "
                                      "supported (no converter)")
        def outputs(env: dict[str, Tensor]) -> list[Tensor]:
            missing = [vi.name for vi in g.output if vi.name not in env]
            if missing:
                raise ConversionError(f"subgraph '{g.name}' output '{missing[0]}' is produced by no node")
            return [env[vi.name] for vi in g.output]

        saved = b.loc, b.node_name, b.outputs
        try:
            return convert_nodes(b, list(g.node), env, self.filename, outputs)
        except DiagnosticError as e:
            for d in e.diagnostics:
                d.note(f"in subgraph '{g.name}' of {saved[0][0] if saved[0] else 'a node'}")
            raise
        finally:
            b.loc, b.node_name, b.outputs = saved
