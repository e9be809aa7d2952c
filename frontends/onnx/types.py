"""ONNX element types <-> tessel element types."""

from __future__ import annotations

import onnx

from .builder import ConversionError

ONNX_TO_ELEMENT: dict[int, str] = {
    onnx.TensorProto.FLOAT: "f32", onnx.TensorProto.FLOAT16: "f16", onnx.TensorProto.BFLOAT16: "bf16",
    onnx.TensorProto.DOUBLE: "f64", onnx.TensorProto.INT64: "i64", onnx.TensorProto.INT32: "i32",
    onnx.TensorProto.INT8: "i8", onnx.TensorProto.UINT8: "ui8", onnx.TensorProto.BOOL: "i1",
}
ELEMENT_TO_ONNX = {v: k for k, v in ONNX_TO_ELEMENT.items()}


def onnx_type_name(elem: int) -> str:
    try:
        return onnx.TensorProto.DataType.Name(elem)
    except ValueError:
        return f"type {elem}"


def onnx_element_type(elem: int, what: str) -> str:
    """The tessel element type of an ONNX TensorProto data type; ConversionError when there is none."""
    t = ONNX_TO_ELEMENT.get(elem)
    if t is None:
        raise ConversionError(
            f"{what} has element type {onnx_type_name(elem)}, which tessel cannot represent "
            f"(supported: {', '.join(onnx_type_name(k) for k in ONNX_TO_ELEMENT)})"
        )
    return t
