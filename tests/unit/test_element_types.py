"""Every element type: its numpy dtype, its size, and dense literals of it through print -> parse -> print
(splats, nested lists, hex blobs), byte-identically; the values a literal of each type refuses; and that
the tools never import ml_dtypes unless a type from it is used."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from tessel.ir.attributes import DenseAttr
from tessel.ir.diagnostics import DiagnosticError
from tessel.ir.parser import parse_module
from tessel.ir.printer import to_text
from tessel.ir.types import (
    ELEMENT_TYPES,
    FLOAT_TYPES,
    INT_TYPES,
    NARROW_FLOAT_MAX,
    SUB_BYTE_BITS,
    TensorType,
    element_type_of,
    float_max,
    int_range,
)

ALL = list(ELEMENT_TYPES)


def test_type_sets_partition_the_element_types() -> None:
    assert FLOAT_TYPES | INT_TYPES | {"i1"} == set(ALL)
    assert not FLOAT_TYPES & INT_TYPES
    assert len(ALL) == 23


@pytest.mark.parametrize("name", ALL)
def test_dtype_size_and_name(name: str) -> None:
    dtype = ELEMENT_TYPES[name]
    assert element_type_of(dtype) == name
    assert TensorType((3,), name).itemsize == dtype.itemsize
    assert TensorType((3,), name).nbytes == 3 * dtype.itemsize


@pytest.mark.parametrize("name", sorted(INT_TYPES))
def test_int_range(name: str) -> None:
    import ml_dtypes

    info = ml_dtypes.iinfo(ELEMENT_TYPES[name])
    assert int_range(name) == (int(info.min), int(info.max))


@pytest.mark.parametrize("name", sorted(FLOAT_TYPES))
def test_float_max(name: str) -> None:
    import ml_dtypes

    assert float_max(name) == float(ml_dtypes.finfo(ELEMENT_TYPES[name]).max)
    assert (name in NARROW_FLOAT_MAX) == (name not in ("f32", "f16", "f64"))


def _samples(name: str, n: int) -> np.ndarray:
    """n distinct-ish values of the type: every bit pattern in turn for the 8-bit and narrower types."""
    dtype = ELEMENT_TYPES[name]
    if name == "i1":
        return np.arange(n) % 3 == 0
    if dtype.itemsize == 1:
        bits = SUB_BYTE_BITS.get(name, 8)
        return (np.arange(n) % 2**bits).astype(np.uint8).view(dtype)
    if name in INT_TYPES:
        lo, hi = int_range(name)
        step = (hi - lo) // max(n - 1, 1)
        return np.array([hi] if n == 1 else [lo + i * step for i in range(n)], dtype)
    return (np.linspace(-3, 3, n) * 1.7).astype(dtype)


def _roundtrip(attr: DenseAttr) -> DenseAttr:
    t = attr.type
    text = (f"func @f() -> {t} {{\n  %0 = const {{value = {attr}}} : () -> {t}\n  return %0 : {t}\n}}\n")
    first = to_text(parse_module(text, "<test>"))
    module = parse_module(first, "<printed>")
    assert to_text(module) == first
    return module.funcs[0].block.ops[0].attrs["value"]


@pytest.mark.parametrize("n", [1, 5, 40], ids=["splat", "literal", "hex"])
@pytest.mark.parametrize("name", ALL)
def test_dense_round_trip(name: str, n: int) -> None:
    data = _samples(name, n)
    attr = DenseAttr(TensorType((n,), name), data)
    back = _roundtrip(attr)
    assert back.type == attr.type
    got, want = back.array(), attr.array()
    if name in FLOAT_TYPES:  # a NaN keeps its NaN-ness, not its payload or sign
        nan = np.isnan(want.astype(np.float32))
        assert (np.isnan(got.astype(np.float32)) == nan).all()
        got, want = got[~nan], want[~nan]
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize(("literal", "name", "message"), [
    ("1000.0", "f8E4M3FN", "1000.0 is out of range for f8E4M3FN"),
    ("449.0", "f8E4M3FN", "449.0 is out of range for f8E4M3FN"),
    ("inf", "f8E4M3FNUZ", "inf is not a valid f8E4M3FNUZ element"),
    ("70000.0", "f8E5M2", "70000.0 is out of range for f8E5M2"),
    ("7.0", "f4E2M1FN", "7.0 is out of range for f4E2M1FN"),
    ("nan", "f4E2M1FN", "nan is not a valid f4E2M1FN element"),
    ("0.0", "f8E8M0FNU", "0.0 is out of range for f8E8M0FNU"),
    ("-2.0", "f8E8M0FNU", "-2.0 is out of range for f8E8M0FNU"),
    ("8", "i4", "8 is out of range for i4"),
    ("-3", "i2", "-3 is out of range for i2"),
    ("-1", "ui4", "-1 is out of range for ui4"),
    ("65536", "ui16", "65536 is out of range for ui16"),
    ("18446744073709551616", "ui64", "18446744073709551616 is out of range for ui64"),
    ("1.5", "i16", "1.5 is not a valid i16 element"),
    ('"0x1F00"', "i4", "byte 0x1F at element 0 is not a valid i4 element"),
    ('"0x0004"', "ui2", "byte 0x04 at element 1 is not a valid ui2 element"),
])
def test_dense_rejects(literal: str, name: str, message: str) -> None:
    t = f"tensor<2x{name}>"
    text = (f"func @f() -> {t} {{\n  %0 = const {{value = dense<{literal}> : {t}}} : () -> {t}\n"
            f"  return %0 : {t}\n}}\n")
    with pytest.raises(DiagnosticError, match=message):
        parse_module(text, "<test>")


def test_tools_do_not_import_ml_dtypes() -> None:
    """Parsing and printing a module of numpy types leaves ml_dtypes (~0.8 s to import) unloaded."""
    code = ("import sys\n"
            "from tessel.ir.parser import parse_module\n"
            "from tessel.ir.printer import to_text\n"
            "from tessel.ir.verifier import verify_or_raise\n"
            "m = parse_module('func @f(%x: tensor<2xui16>) -> tensor<2xui16> {\\n"
            "  %0 = const {value = dense<[1, 2]> : tensor<2xui16>} : () -> tensor<2xui16>\\n"
            "  %1 = add %x, %0 : (tensor<2xui16>, tensor<2xui16>) -> tensor<2xui16>\\n"
            "  return %1 : tensor<2xui16>\\n}\\n', 'x')\n"
            "verify_or_raise(m)\n"
            "to_text(m)\n"
            "print('ml_dtypes' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
