"""Kernel-level ops: `kernel`, a region of graph ops that becomes one device kernel (made by `fuse`).

```
%y = kernel %x, %w, %b {kind = "epilogue"} ({
^bb0(%a: tensor<1x64x56x56xf32>, %k: tensor<64x64x1x1xf32>, %c: tensor<64xf32>):
  %0 = conv2d %a, %k, %c {...} : (...) -> tensor<1x64x56x56xf32> loc("onnx:Conv_3")
  %1 = relu %0 : (...) -> tensor<1x64x56x56xf32> loc("onnx:Relu_4")
  yield %1 : tensor<1x64x56x56xf32>
}) : (...) -> tensor<1x64x56x56xf32> loc(fused["onnx:Conv_3", "onnx:Relu_4"])
```

The region is isolated from above: its block arguments are the operands, in order, and its `yield`
gives the results. Small literal constants (`dense<...>`) may live inside; weights come in as operands.
`kind` says which template shape the fusion formed, for the reader and the lowering:
- `elementwise`: a chain of elementwise ops computed per output element;
- `epilogue`: one contraction (`conv2d`, `matmul`, `gemm`) whose result flows through elementwise ops;
  after a `matmul` or `gemm` also through a `layer_norm` over the last axis (and more elementwise ops),
  and into a `split` along the last axis whose pieces are the region's results; a `matmul` or `gemm` may
  read its A from a `layer_norm` over the last axis of an operand (maybe through a `reshape` keeping the
  last axis) that the template applies as A's rows are read; a `conv2d` may read its input through an
  NCHWc `unpack`, a channel shuffle (`reshape`, `transpose`, `reshape`; depthwise only) or a nearest
  `resize` of H and W (its one reader), each of an operand, that its input repack applies, or a `mul` of
  two operands by a per-channel factor ([N or 1, C, 1, 1]) that it folds into its weights, or (a
  depthwise conv2d on 16-channel blocks) through the `unpack` of an expansion: a 1x1 `conv2d` of an
  operand (maybe through its NCHWc `unpack`), its NCHW16c `pack` and an elementwise chain on literals,
  which its kernel computes as it fills its local memory; the chain
  after the anchor may read a value more than once (x * sigmoid(x)) as long as one value leaves it;
- `reduction`: a reduction or normalization (`softmax`, `layer_norm`, `reduce_*`, `global_avg_pool`, ...)
  with elementwise prologue on its input and epilogue on its output;
- `gate`: a global pool over H and W (`reduce_mean` or `reduce_max` over [2, 3] keeping dims,
  `global_avg_pool`, `global_max_pool`) and the FCs on its features that follow it (`conv2d` 1x1 of one
  pixel, one group, no padding), each with an elementwise chain on its result: squeeze-excitation's gate,
  computed per image;
- `generic`: anything else (the lowering runs its ops one kernel after another).
Its reference semantics are its body's: the numpy target runs the region.
"""

from __future__ import annotations

import numpy as np

from ..types import TensorType
from .registry import Cost, OpDef, Sig, attr, register

KINDS = ("elementwise", "epilogue", "reduction", "gate", "generic")


def _reference(sig: Sig, *args: np.ndarray) -> list[np.ndarray]:
    raise NotImplementedError("kernel runs its region")  # the interpreter runs the body instead


def _cost(sig: Sig) -> Cost:
    """Traffic at the kernel's boundary only: what it reads (operands) and writes (results). The FLOPs
    are its body's; `kernel_cost` in passes/analysis.py sums them (a Sig does not carry the region)."""
    return Cost(0, sum(t.nbytes for t in sig.operands), sum(t.nbytes for t in sig.results))


def _infer(sig: Sig) -> list[TensorType]:
    return list(sig.results)  # the yield decides; the verifier checks the region against them


register(OpDef(
    "kernel", ("args*",),
    infer=_infer,
    reference=_reference,
    results="*",
    regions=1,
    attrs={"kind": attr("str", "generic", allowed=KINDS)},
    traits=frozenset({"pure", "region-body"}),
    cost=_cost,
    doc="A region of graph ops that becomes one device kernel (made by `fuse`). The region's block "
    "arguments are the operands; its `yield` gives the results. `kind`: elementwise, epilogue, reduction, "
    "gate or generic.",
))
