"""Seeded random-weight copies of ONNX models.

The onnx package's bundled models ship constant-filled weights (every class gets the same score), so
comparisons against onnxruntime on them prove little. `randomize_weights` replaces every float
initializer and every float `ConstantOfShape` fill with seeded values of a similar scale, keeping
BatchNormalization variances positive.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper


def _bn_variances(graph: onnx.GraphProto) -> set[str]:
    """BatchNormalization scales and variances: kept positive, near 1, so activations keep their scale."""
    return {n.input[i] for n in graph.node if n.op_type == "BatchNormalization" for i in (1, 4)
            if len(n.input) > i}


def _random_like(shape: tuple[int, ...], dtype: np.dtype, rng: np.random.Generator,
                 positive: bool) -> np.ndarray:
    if positive:
        return rng.uniform(0.5, 1.5, shape).astype(dtype)
    if len(shape) <= 1:  # biases, BN shifts and means
        return (rng.standard_normal(shape) * 0.1).astype(dtype)
    fan_in = int(np.prod(shape[1:]))
    scale = np.sqrt(2.0 / max(fan_in, 1))  # He initialisation: activations keep their scale through ReLUs
    return (rng.standard_normal(shape) * scale).astype(dtype)


def randomize_weights(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """A copy of `model` whose float weights are seeded random values."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    rng = np.random.default_rng(seed)
    graph = out.graph
    positive = _bn_variances(graph)
    for init in graph.initializer:
        arr = numpy_helper.to_array(init)
        if arr.dtype.kind != "f":
            continue
        new = _random_like(arr.shape, arr.dtype, rng, init.name in positive)
        init.CopyFrom(numpy_helper.from_array(new, init.name))
    # weights made by ConstantOfShape from a constant shape become random initializers (a random fill
    # would still be a splat, and a splat weight scores every class alike)
    shapes = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    keep = []
    for node in graph.node:
        fill = next((a for a in node.attribute if a.name == "value"), None)
        is_float = fill is None or fill.t.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE)
        if node.op_type == "ConstantOfShape" and node.input[0] in shapes and is_float:
            shape = tuple(int(d) for d in shapes[node.input[0]])
            dtype = numpy_helper.to_array(fill.t).dtype if fill is not None else np.dtype(np.float32)
            name = node.output[0]
            value = _random_like(shape, dtype, rng, name in positive)
            graph.initializer.append(numpy_helper.from_array(value, name))
            if out.ir_version < 4:  # IR v3: every initializer is also a graph input
                graph.input.append(onnx.helper.make_tensor_value_info(
                    name, onnx.helper.np_dtype_to_tensor_dtype(dtype), list(shape)))
            continue
        keep.append(node)
    del graph.node[:]
    graph.node.extend(keep)
    used = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
    unused = {i.name for i in graph.initializer if i.name not in used}
    kept_inits = [i for i in graph.initializer if i.name not in unused]
    kept_inputs = [vi for vi in graph.input if vi.name not in unused]
    del graph.initializer[:]
    graph.initializer.extend(kept_inits)
    del graph.input[:]
    graph.input.extend(kept_inputs)
    return out
