"""A hypothesis strategy for random *valid* ONNX graphs built from the ops tessel supports.

`graphs()` draws a `GraphCase`: an onnx.ModelProto (float32 throughout, 1-3 inputs, 1-2 outputs, up to
about a dozen generator steps, every tensor at most `MAX_ELEMENTS` elements) and the input arrays to feed
it. The builder tracks every value's shape while it generates, so each graph passes
`onnx.checker.check_model(full_check=True)` and strict shape inference (checked in `finish`: a graph that
does not is a bug in this file, not a finding). It also tracks a rough bound on each value's magnitude
(`Val.scale`) and inserts a `Tanh` in front of ops that would overflow or lose all precision (Exp, Pow,
large products), and feeds Log/Sqrt/Reciprocal/Div only `Abs(x) + 1`, so the comparison with onnxruntime
measures tessel, not float32 overflow.

Everything random that is not structure (weights, input data) comes from one drawn numpy seed, so
hypothesis shrinks the structure and the data stays small and reproducible. The per-op generators live
in graph_ops.py, the multi-op patterns the -O2 passes look for in graph_patterns.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from .draws import Draws

OPSETS = (11, 13, 17, 18, 21)
"""Default-domain opsets the graphs use: each changes how some op takes its arguments (axes as an
attribute or an input, Softmax's 2-D coercion before 13, Pad's axes from 18, wrap padding from 19)."""
IR_VERSION = {11: 6, 13: 7, 17: 8, 18: 8, 21: 10}
MAX_ELEMENTS = 4096
EDGE_SIZES = (7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65)
"""Dims just below, at and above the tile sizes and vector widths kernels are specialised for."""
MAX_NODES = 24
F32 = TensorProto.FLOAT
I32, I64, BOOL = TensorProto.INT32, TensorProto.INT64, TensorProto.BOOL
NP_DTYPE = {F32: np.float32, I32: np.int32, I64: np.int64, BOOL: np.bool_}


@dataclass
class Val:
    """A value of the graph being built: float32 unless `dtype` says int32, int64 or bool."""

    name: str
    shape: tuple[int, ...]
    scale: float  # a rough upper bound on max |x|
    kind: str  # "input", "const" or "node"
    dtype: int = F32
    exact: bool = False
    """Computed without rounding (inputs, constants, and what Neg, Abs, Max, Round, Cast to int, data
    movement... make of them): any two implementations agree on it bit for bit, so Equal, Round, Floor and
    ArgMax on it cannot flip on a last-ulp difference."""

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass
class GraphCase:
    """One generated graph and its inputs."""

    model: onnx.ModelProto
    feeds: dict[str, np.ndarray]
    ops: list[str] = field(default_factory=list)  # the op types, in node order
    generators: list[str] = field(default_factory=list)  # the generators that made its nodes ("fallback":
    # a unary op where the drawn generator found no value to work on), in order of first use

    @property
    def opset(self) -> int:
        return next(o.version for o in self.model.opset_import if o.domain in ("", "ai.onnx"))

    def __repr__(self) -> str:  # what hypothesis prints for a falsifying example
        shapes = {k: list(v.shape) for k, v in self.feeds.items()}
        return f"GraphCase(opset={self.opset}, inputs={shapes}, ops={self.ops})"


class GraphBuilder(Draws):
    """Builds one graph from hypothesis draws. Op generators (graph_ops.py) call `node`, `weight`,
    `ints`, `pick` and the draw helpers."""

    max_elements = MAX_ELEMENTS

    def __init__(self, draw: Callable[[st.SearchStrategy[Any]], Any], opset: int, seed: int,
                 max_inputs: int = 3):
        self.draw = draw
        self.opset = opset
        self.rng = np.random.default_rng(seed)
        self.max_inputs = max_inputs
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[TensorProto] = []
        self.inputs: list[Val] = []
        self.feeds: dict[str, np.ndarray] = {}
        self.values: list[Val] = []  # float operands for later ops: inputs and node outputs
        self.typed: list[Val] = []  # the int32, int64 and bool ones (graph_typed.py's generators read them)
        self._count = 0

    # values -------------------------------------------------------------------------------------------
    def fresh(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}{self._count}"

    def add_input(self, shape: Sequence[int], dtype: int = F32, data: np.ndarray | None = None) -> Val:
        """A graph input: `data`, or floats uniform in [-2, 2], ints in [-4, 4], bools half true."""
        if data is None:
            data = random_array(self.rng, tuple(shape), dtype)
        data = np.asarray(data, NP_DTYPE[dtype]).reshape(tuple(shape))
        scale = float(np.max(np.abs(data.astype(np.float64)), initial=0.0)) if dtype != F32 else 2.0
        v = Val(self.fresh("x"), tuple(shape), max(scale, 1.0), "input", dtype, exact=True)
        self.feeds[v.name] = data
        self.inputs.append(v)
        self._track(v)
        return v

    def _track(self, v: Val) -> None:
        (self.values if v.dtype == F32 else self.typed).append(v)

    def can_add_input(self) -> bool:
        return len(self.inputs) < self.max_inputs

    def weight(self, shape: Sequence[int], scale: float = 1.0, low: float | None = None) -> Val:
        """A float32 constant, uniform in [low, scale] (low defaults to -scale): an initializer, or now
        and then a Constant node (the importer must treat both as constants)."""
        lo = -scale if low is None else low
        arr = self.rng.uniform(lo, scale, size=tuple(shape)).astype(np.float32)
        return self.constant(arr)

    def constant(self, arr: np.ndarray) -> Val:
        """An initializer or a Constant node holding `arr` (float32, int32, int64 or bool)."""
        name = self.fresh("w")
        tensor = numpy_helper.from_array(arr, name)
        if self.chance(20) and len(self.nodes) < MAX_NODES:
            self.nodes.append(helper.make_node("Constant", [], [name], name=f"Constant_{name}", value=tensor))
        else:
            self.inits.append(tensor)
        dtype = helper.np_dtype_to_tensor_dtype(arr.dtype)
        scale = float(np.max(np.abs(arr.astype(np.float64)), initial=0.0))
        return Val(name, tuple(arr.shape), scale, "const", dtype, exact=True)

    def ints(self, values: Sequence[int]) -> str:
        """An int64 1-D constant (axes, shape, pads, starts...) for ops that take it as an input."""
        return self.constant_int(np.array(list(values), np.int64))

    def constant_int(self, arr: np.ndarray) -> str:
        name = self.fresh("k")
        self.inits.append(numpy_helper.from_array(arr, name))
        return name

    def node(self, op: str, inputs: Sequence[str], shape: Sequence[int], scale: float, *, dtype: int = F32,
             exact: bool = False, **attrs: Any) -> Val:
        """Append one node; its result (of element type `dtype`) becomes an operand for later ops."""
        out = self.fresh("t")
        attrs = {k: v for k, v in attrs.items() if v is not None}
        self.nodes.append(helper.make_node(op, list(inputs), [out], name=f"{op}_{out}", **attrs))
        v = Val(out, tuple(int(d) for d in shape), min(float(scale), 1e30), "node", dtype, exact)
        self._track(v)
        return v

    def pick(self, pred: Callable[[Val], bool] = lambda v: True,
             dtypes: Sequence[int] = (F32,)) -> Val | None:
        """A value for an operand (float32 unless `dtypes` says otherwise), recent ones more likely (so
        graphs grow deep, not wide)."""
        pool = self.values if tuple(dtypes) == (F32,) else sorted(
            [v for v in self.values + self.typed if v.dtype in dtypes], key=lambda v: int(v.name[1:]))
        cands = [v for v in pool if pred(v)]
        if not cands:
            return None
        back = self.integer(0, len(cands) - 1)
        return cands[len(cands) - 1 - back]

    def tame(self, x: Val, limit: float) -> Val:
        """`x`, or Tanh(x) when its magnitude bound exceeds `limit` (before Exp, Pow, big products)."""
        if x.scale <= limit:
            return x
        return self.node("Tanh", [x.name], x.shape, 1.0)

    def positive(self, x: Val) -> Val:
        """Abs(x) + 1: an operand for Log, Sqrt, Reciprocal and Div's denominator."""
        a = self.node("Abs", [x.name], x.shape, x.scale)
        one = self.constant(np.array(1.0, np.float32))
        return self.node("Add", [a.name, one.name], x.shape, x.scale + 1)

    def room(self) -> bool:
        return len(self.nodes) < MAX_NODES

    # shapes -------------------------------------------------------------------------------------------
    def dims(self, rank: int, budget: int = 1024) -> tuple[int, ...]:
        """Mostly 1-6, now and then a size around an OpenCL tile or vector width (15-17, 31-33...)."""
        shape: list[int] = []
        for _ in range(rank):
            left = max(budget // max(math.prod(shape), 1), 1)
            shape.append(min(self.size(), left))
        return tuple(shape)

    def size(self) -> int:
        if self.chance(12):
            return int(self.choice(EDGE_SIZES))
        return self.integer(1, 6)

    def partner_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """A shape that broadcasts with `shape` (scalar, size-1 dims, a suffix, extra leading dims)."""
        kind = self.choice(["same", "ones", "suffix", "scalar", "up"])
        if kind == "scalar" or not shape:
            return () if kind == "scalar" or self.chance(50) else (1,) * self.integer(1, 2)
        if kind == "same":
            return shape
        if kind == "ones":
            return tuple(1 if self.chance(50) else d for d in shape)
        if kind == "suffix":
            k = self.integer(0, len(shape))
            return tuple(1 if self.chance(30) else d for d in shape[k:])
        # "up": expand size-1 dims and/or prepend dims, staying within MAX_ELEMENTS
        grown = [self.integer(2, 4) if d == 1 and self.chance(60) else d for d in shape]
        if len(grown) < 4 and self.chance(50):
            grown = [self.integer(1, 3)] + grown
        out = tuple(grown)
        return out if math.prod(np.broadcast_shapes(out, shape)) <= MAX_ELEMENTS else shape

    # the model ----------------------------------------------------------------------------------------
    def finish(self, outputs: Sequence[Val]) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes,
            "fuzz",
            [helper.make_tensor_value_info(v.name, v.dtype, list(v.shape)) for v in self.inputs],
            [helper.make_tensor_value_info(v.name, v.dtype, list(v.shape)) for v in outputs],
            initializer=self.inits,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)],
                                  producer_name="tessel-fuzz")
        model.ir_version = IR_VERSION[self.opset]
        onnx.checker.check_model(model, full_check=True)
        inferred = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
        for vi, v in zip(inferred.graph.output, outputs, strict=True):
            got = tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)
            assert got == v.shape, f"generator bug: {v.name} tracked as {v.shape}, onnx infers {got}"
        return model


def random_array(rng: np.random.Generator, shape: tuple[int, ...], dtype: int) -> np.ndarray:
    """Input data: floats uniform in [-2, 2], ints in [-4, 4], bools half true."""
    if dtype == BOOL:
        return rng.random(shape) < 0.5
    if dtype in (I32, I64):
        return rng.integers(-4, 5, size=shape).astype(NP_DTYPE[dtype])
    return rng.uniform(-2, 2, size=shape).astype(np.float32)


def default_feeds(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs of each graph input's type (for a graph read back without its saved inputs). Int
    inputs may be indices (Gather): they are -1 or 0, in range for any non-empty axis (ONNX's index ops
    take negative indices)."""
    rng = np.random.default_rng(seed)
    inits = {i.name for i in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        t = vi.type.tensor_type
        shape = tuple(d.dim_value for d in t.shape.dim)
        feeds[vi.name] = (rng.integers(-1, 1, size=shape).astype(NP_DTYPE[t.elem_type])
                          if t.elem_type in (I32, I64) else random_array(rng, shape, t.elem_type))
    return feeds


def infer_shape(op: str, inputs: Sequence[tuple[str, tuple[int, ...], np.ndarray | None]],
                opset: int, **attrs: Any) -> tuple[int, ...]:
    """The output shape onnx infers for one node (pooling with ceil_mode, auto_pad, Resize): inputs are
    (name, shape, constant value or None), an empty name for an omitted optional input."""
    vis, inits = [], []
    for name, shape, value in inputs:
        if not name:  # an omitted optional input
            continue
        if value is None:
            vis.append(helper.make_tensor_value_info(name, F32, list(shape)))
        else:
            inits.append(numpy_helper.from_array(value, name))
    node = helper.make_node(op, [n for n, _, _ in inputs], ["out"], **attrs)
    graph = helper.make_graph([node], "one", vis, [helper.make_tensor_value_info("out", F32, None)],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = IR_VERSION.get(opset, 8)
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    dims = inferred.graph.output[0].type.tensor_type.shape.dim
    return tuple(int(d.dim_value) for d in dims)


@st.composite
def graphs(draw: Callable[[st.SearchStrategy[Any]], Any], max_steps: int = 12, max_inputs: int = 3,
           opsets: Sequence[int] = OPSETS, ops: Sequence[str] | None = None) -> GraphCase:
    """A random valid ONNX graph; `ops` restricts the generators used (names from graph_ops.GENERATORS,
    graph_patterns.PATTERNS, graph_typed.TYPED and graph_index.INDEXING)."""
    opset = draw(st.sampled_from(list(opsets)))
    seed = draw(st.integers(0, 2**32 - 1))
    b = GraphBuilder(draw, opset, seed, max_inputs)
    for _ in range(b.integer(1, max_inputs)):
        rank = b.choice([4, 2, 3, 1, 0, 4])
        b.add_input(b.dims(rank))
    gens = [(n, g) for n, g in all_generators() if ops is None or n in ops]
    steps = b.integer(1, max_steps)
    used: list[str] = []
    for _ in range(steps):
        if not b.room():
            break
        name, gen = b.choice(gens)
        if gen(b) is None:  # no value fits the generator: a unary op instead
            fallback(b)
            name = "fallback"
        used.append(name)
    produced = sorted((v for v in b.values + b.typed if v.kind == "node"), key=lambda v: int(v.name[1:]))
    if not produced:
        fallback(b)
        used.append("fallback")
        produced = [v for v in b.values if v.kind == "node"]
    outputs = [produced[-1]]
    read = {i for n in b.nodes for i in n.input}
    dangling = [v for v in produced[:-1] if v.name not in read]  # results nothing else reads
    if dangling and b.chance(60) or len(produced) > 1 and b.chance(20):
        outputs.insert(0, b.choice(dangling or produced[:-1]))
    model = b.finish(outputs)
    return GraphCase(model, b.feeds, [n.op_type for n in model.graph.node], list(dict.fromkeys(used)))


def fallback(b: GraphBuilder) -> Val | None:
    from .graph_ops import fallback as unary_fallback

    return unary_fallback(b)


def all_generators() -> list[tuple[str, Callable[[GraphBuilder], Val | None]]]:
    """Every generator by name: single ops, exporter patterns, typed (int, bool, compare, select) ops and
    indexing/resampling ops."""
    from .graph_index import INDEXING
    from .graph_ops import GENERATORS
    from .graph_patterns import PATTERNS
    from .graph_typed import TYPED

    return GENERATORS + PATTERNS + TYPED + INDEXING
