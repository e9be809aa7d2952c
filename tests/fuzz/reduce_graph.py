"""Shrink a failing ONNX graph further than hypothesis can: hypothesis shrinks the generator's choices,
which keeps every op the generator made before the culprit; this works on the graph itself.

Greedy, to a fixpoint, each step kept only while `still_fails(case)` holds:
1. keep one graph output;
2. cut the graph at an intermediate value (it becomes the only output; what it does not need goes);
3. bypass a node whose output has the shape and type of one of its inputs (its users read that input);
4. replace an initializer by a splat of its first value, or shrink an input to zeros.
Unused nodes, initializers and inputs are pruned after each step.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import onnx
from onnx import numpy_helper

from .graphs import GraphCase

Feeds = dict[str, np.ndarray]


def _prune(model: onnx.ModelProto, feeds: Feeds) -> tuple[onnx.ModelProto, Feeds]:
    g = model.graph
    needed = {o.name for o in g.output}
    keep = []
    for node in reversed(list(g.node)):
        if any(o in needed for o in node.output):
            keep.append(node)
            needed.update(i for i in node.input if i)
    keep.reverse()
    del g.node[:]
    g.node.extend(keep)
    inits = [i for i in g.initializer if i.name in needed]
    del g.initializer[:]
    g.initializer.extend(inits)
    inputs = [vi for vi in g.input if vi.name in needed]
    del g.input[:]
    g.input.extend(inputs)
    return model, {k: v for k, v in feeds.items() if k in needed}


def _copy(case: GraphCase) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    m = onnx.ModelProto()
    m.CopyFrom(case.model)
    return m, dict(case.feeds)


def _make(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> GraphCase | None:
    model, feeds = _prune(model, feeds)
    if not model.graph.node:
        return None
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception:
        return None
    return GraphCase(model, feeds, [n.op_type for n in model.graph.node])


def _value_types(model: onnx.ModelProto) -> dict[str, onnx.ValueInfoProto]:
    inferred = onnx.shape_inference.infer_shapes(model)
    g = inferred.graph
    return {vi.name: vi for vi in [*g.value_info, *g.output, *g.input]}


def candidates(case: GraphCase):  # noqa: ANN201 - a generator of GraphCase | None
    """Smaller variants of `case`, biggest cuts first."""
    g = case.model.graph
    if len(g.output) > 1:
        for keep in range(len(g.output)):
            m, f = _copy(case)
            outs = [m.graph.output[keep]]
            del m.graph.output[:]
            m.graph.output.extend(outs)
            yield _make(m, f)
    types = _value_types(case.model)
    for node in g.node:  # cut: an early value as the only output
        for name in node.output:
            if name in types and name not in {o.name for o in g.output}:
                m, f = _copy(case)
                del m.graph.output[:]
                m.graph.output.append(types[name])
                yield _make(m, f)
    for i, node in enumerate(g.node):  # bypass
        out = types.get(node.output[0]) if node.output else None
        for inp in node.input:
            t = types.get(inp)
            if out is None or t is None or t.type != out.type:
                continue
            m, f = _copy(case)
            target = m.graph.node[i].output[0]
            for other in m.graph.node:
                for j, name in enumerate(other.input):
                    if name == target:
                        other.input[j] = inp
            for o in m.graph.output:
                if o.name == target:
                    yield None  # a graph output keeps its producer
                    break
            else:
                yield _make(m, f)
            break
    for k, init in enumerate(g.initializer):  # simpler data
        arr = numpy_helper.to_array(init)
        if arr.size > 1 and arr.dtype.kind == "f" and not np.all(arr == arr.flat[0]):
            m, f = _copy(case)
            splat = numpy_helper.from_array(np.full_like(arr, arr.flat[0]), init.name)
            m.graph.initializer[k].CopyFrom(splat)
            yield _make(m, f)
    for name, arr in case.feeds.items():
        if np.any(arr != 1):
            m, f = _copy(case)
            f[name] = np.ones_like(arr)
            yield _make(m, f)


def reduce_case(case: GraphCase, still_fails: Callable[[GraphCase], bool],
                seconds: float = 60.0) -> GraphCase:
    """The smallest variant of `case` reachable by the steps above that still fails."""
    end = time.monotonic() + seconds
    changed = True
    while changed and time.monotonic() < end:
        changed = False
        for cand in candidates(case):
            if time.monotonic() > end:
                break
            if cand is None or _rank(cand) >= _rank(case):
                continue
            if still_fails(cand):
                case, changed = cand, True
                break
    return case


def _rank(case: GraphCase) -> tuple[int, int]:
    """Smaller is simpler: fewer nodes, then less distinct data."""
    return len(case.model.graph.node), _size(case)


def _size(case: GraphCase) -> int:
    distinct = sum(len(np.unique(numpy_helper.to_array(i))) for i in case.model.graph.initializer)
    return distinct + sum(int(np.any(a != 1)) * a.size for a in case.feeds.values())
