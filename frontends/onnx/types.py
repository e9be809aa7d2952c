"""ONNX element types <-> tessel element types."""

from __future__ import annotations

import onnx

from .builder import ConversionError

_T = onnx.TensorProto
ONNX_TO_ELEMENT: dict[int, str] = {
    _T.FLOAT: "f32", _T.FLOAT16: "f16", _T.BFLOAT16: "bf16", _T.DOUBLE: "f64",
    _T.FLOAT8E4M3FN: "f8E4M3FN", _T.FLOAT8E4M3FNUZ: "f8E4M3FNUZ", _T.FLOAT8E5M2: "f8E5M2",
    _T.FLOAT8E5M2FNUZ: "f8E5M2FNUZ", _T.FLOAT8E8M0: "f8E8M0FNU", _T.FLOAT4E2M1: "f4E2M1FN",
    _T.INT64: "i64", _T.INT32: "i32", _T.INT16: "i16", _T.INT8: "i8", _T.INT4: "i4", _T.INT2: "i2",
    _T.UINT64: "ui64", _T.UINT32: "ui32", _T.UINT16: "ui16", _T.UINT8: "ui8", _T.UINT4: "ui4",
    _T.UINT2: "ui2", _T.BOOL: "i1",
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
