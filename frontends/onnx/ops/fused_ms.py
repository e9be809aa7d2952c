"""Converters for onnxruntime's `com.microsoft` fused float operators, the ones its graph optimizer writes
into a model it saves (`SessionOptions.optimized_model_filepath`): FusedMatMul, SkipLayerNormalization,
FastGelu, BiasGelu and Gelu. Each becomes the ops it fused, which tessel's own passes fuse again.
"""

from __future__ import annotations

from ..builder import Builder, ConversionError, Tensor
from ..registry import converter
from .common import _float_input, _scalar, _transpose, _wants
from .norm import LayerNormalization

MS = "com.microsoft"


@converter("FusedMatMul", domain=MS)
def FusedMatMul(b: Builder, A: Tensor, B: Tensor, *, alpha: float = 1.0, transA: int = 0, transB: int = 0,
                transBatchA: int = 0, transBatchB: int = 0) -> Tensor:
    """alpha * A' @ B' (onnxruntime folds Transposes and a scale into its MatMuls so): transBatch moves an
    operand's first dim to just before its last (a [M, batch.., K] operand read as [batch.., M, K]), then
    trans swaps the last two dims (as onnxruntime's kernel computes it, checked against it)."""

    def operand(x: Tensor, batch: int, trans: int) -> Tensor:
        if x.rank < 2 or not (batch or trans):
            return x
        perm = list(range(x.rank))
        if batch:
            perm = perm[1:-1] + [0, perm[-1]]
        if trans:
            perm[-2], perm[-1] = perm[-1], perm[-2]
        return _transpose(b, x, perm)

    if (transBatchA or transBatchB) and (A.rank < 3 or A.rank != B.rank):
        raise ConversionError(f"FusedMatMul with transBatchA or transBatchB takes two operands of one rank "
                              f"of at least 3 (as onnxruntime does), got {A.type} and {B.type}")
    y = b.op("matmul", [operand(A, transBatchA, transA), operand(B, transBatchB, transB)])
    return y if float(alpha) == 1.0 else b.op("mul", [y, _scalar(b, float(alpha), y)])


@converter("SkipLayerNormalization", domain=MS)
def SkipLayerNormalization(b: Builder, x: Tensor, skip: Tensor, gamma: Tensor, beta: Tensor | None = None,
                           bias: Tensor | None = None, *, epsilon: float = 1e-12) -> list[Tensor | None]:
    """LayerNormalization over the last axis of x + skip (+ bias); outputs the normalized sum, its mean
    and inverse standard deviation when asked for, and the sum itself (input_skip_bias_sum)."""
    _float_input(x, "SkipLayerNormalization")
    s = b.op("add", [x, b.cast(skip, x.dtype)])
    if bias is not None:
        s = b.op("add", [s, b.cast(bias, x.dtype)])
    y, mean, inv = LayerNormalization(b, s, gamma, beta, axis=-1, epsilon=float(epsilon))
    return [y, mean if _wants(b, 1) else None, inv if _wants(b, 2) else None, s if _wants(b, 3) else None]


def _gelu(b: Builder, x: Tensor, bias: Tensor | None, approximate: str, op: str) -> Tensor:
    _float_input(x, op)
    if bias is not None:
        x = b.op("add", [x, b.cast(bias, x.dtype)])
    return b.op("gelu", [x], {"approximate": approximate})


@converter("FastGelu", domain=MS)
def FastGelu(b: Builder, X: Tensor, bias: Tensor | None = None) -> Tensor:
    """The tanh approximation of GELU of X (+ bias)."""
    return _gelu(b, X, bias, "tanh", "FastGelu")


@converter("BiasGelu", domain=MS)
def BiasGelu(b: Builder, A: Tensor, B: Tensor) -> Tensor:
    """GELU (erf) of A + B."""
    return _gelu(b, A, B, "none", "BiasGelu")


@converter("Gelu", domain=MS)
def Gelu(b: Builder, X: Tensor) -> Tensor:
    """GELU (erf), onnxruntime's contrib op (ONNX has its own since opset 20)."""
    return _gelu(b, X, None, "none", "Gelu")
