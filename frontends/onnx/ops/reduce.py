"""Converters for ArgMax/ArgMin and the Reduce ops (axes as an attribute, or as an input from opset 13
for ReduceSum and 18 for the rest; keepdims; noop_with_empty_axes)."""

from __future__ import annotations

import math

import numpy as np

from ..builder import Builder, Tensor
from ..registry import converter
from .tensor import _axes_from


# reductions -------------------------------------------------------------------------------------------
@converter("ArgMax")
def ArgMax(b: Builder, x: Tensor, *, axis: int = 0, keepdims: int = 1, select_last_index: int = 0) -> Tensor:
    return b.op("argmax", [x], {"axis": axis, "keepdims": bool(keepdims),
                                "select_last_index": bool(select_last_index)})


@converter("ArgMin")
def ArgMin(b: Builder, x: Tensor, *, axis: int = 0, keepdims: int = 1, select_last_index: int = 0) -> Tensor:
    return b.op("argmin", [x], {"axis": axis, "keepdims": bool(keepdims),
                                "select_last_index": bool(select_last_index)})


REDUCTIONS = {  # ONNX op -> (tessel op, first opset with axes as an input)
    "ReduceSum": ("reduce_sum", 13), "ReduceMean": ("reduce_mean", 18), "ReduceMax": ("reduce_max", 18),
    "ReduceMin": ("reduce_min", 18), "ReduceProd": ("reduce_prod", 18), "ReduceL1": ("reduce_l1", 18),
    "ReduceL2": ("reduce_l2", 18), "ReduceLogSum": ("reduce_sum", 18),
    "ReduceLogSumExp": ("reduce_log_sum_exp", 18), "ReduceSumSquare": ("reduce_sum_square", 18),
}


def _reduction(onnx_op: str, tessel_op: str, axes_since: int) -> None:
    def convert(b: Builder, data: Tensor, axes_input: Tensor | None = None, *, axes: list[int] | None = None,
                keepdims: int = 1, noop_with_empty_axes: int = 0) -> Tensor:
        given = _axes_from(b, axes, axes_input, axes_since) or []
        if not given and noop_with_empty_axes:
            # reducing no axis skips the reduction but not the elementwise steps: ReduceL2 is sqrt(x^2) =
            # |x|, ReduceSumSquare x^2, ReduceLogSum log(x) (the spec's note; found by tests/fuzz)
            if onnx_op in ("ReduceL1", "ReduceL2"):
                return b.op("abs", [data])
            if onnx_op == "ReduceSumSquare":
                return b.op("mul", [data, data])
            if onnx_op == "ReduceLogSum":
                return b.op("log", [data])
            return data
        attrs = {"axes": given, "keepdims": bool(keepdims)}
        x = data
        if data.dtype == "i1" and onnx_op in ("ReduceMax", "ReduceMin"):  # opset 20 bools: max = any
            x = b.cast(data, "ui8")
        elif not data.type.is_float and onnx_op == "ReduceMean":  # integer mean: sum, then divide
            total = b.op("reduce_sum", [data], attrs)
            count = math.prod(data.shape) // max(math.prod(total.shape), 1)
            return b.op("div", [total, b.const(np.array(count, data.type.np_dtype))])
        y = b.op(tessel_op, [x], attrs)
        if onnx_op == "ReduceLogSum":
            y = b.op("log", [y])
        return b.cast(y, data.dtype)

    convert.__name__ = onnx_op
    converter(onnx_op)(convert)


for _o, (_t, _since) in REDUCTIONS.items():
    _reduction(_o, _t, _since)
