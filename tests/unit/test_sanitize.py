"""The --check-bounds rewrite (targets/opencl/sanitize.py) on hand-written kernels: which accesses it checks
against which root, the hidden arguments it threads through helpers, and what it refuses."""

from __future__ import annotations

import re

import pytest
from tessel.targets.opencl.sanitize import (
    PREAMBLE,
    SanitizeError,
    Violation,
    instrument,
    kernel_names,
    tokenize,
)


def test_index_deref_and_vector_accesses_are_checked_against_their_root() -> None:
    src = """__kernel void KERNEL(__global const float* restrict X, __global float* restrict Y) {
    const int g = get_global_id(0);
    const __global float* x = X + g * 4;
    const float a = x[1] + *(x + 2);
    Y[g] = a;
    vstore4(vload4(0, x), g, Y);
}"""
    out = instrument(src, [64, 32])
    assert "const ulong tsl_n_X = 64UL; const int tsl_a_X = 0;" in out
    assert "const ulong tsl_n_Y = 32UL; const int tsl_a_Y = 1;" in out
    assert "(*TSL_G(float, x + (1), X, 0, sizeof(float)))" in out  # a derived pointer keeps its root
    assert "(*TSL_G(float, (x + 2), X, 0, sizeof(float)))" in out
    assert "(*TSL_G(float, Y + (g), Y, 1, sizeof(float))) = a;" in out  # a store: kind 1
    assert ("vstore4(vload4(0, TSL_G(float, (x) + (0) * 4, X, 0, 16)), 0, "
            "TSL_G(float, (Y) + (g) * 4, Y, 1, 16))") in out
    assert out.count("__global int* restrict tsl_err, const int tsl_step)") == 1


def test_helpers_take_their_pointer_roots_and_the_error_buffer() -> None:
    src = """static inline float KERNEL_epi(float v, int p, __global const float* restrict ep) {
    return v + ep[p];
}
__kernel void KERNEL(__global const float* restrict B, __global float* restrict Y) {
    const int g = get_global_id(0);
    Y[g] = KERNEL_epi(1.0f, g, B + 2);
}"""
    out = instrument(src, [40, 40])
    assert ("KERNEL_epi(float v, int p, __global const float* restrict ep, __global const char* tsl_b_ep, "
            "const ulong tsl_n_ep, const int tsl_a_ep, __global int* restrict tsl_err, "
            "const int tsl_step)") in out
    assert "(*TSL_G(float, ep + (p), ep, 0, sizeof(float)))" in out
    assert "KERNEL_epi(1.0f, g, B + 2, tsl_b_B, tsl_n_B, tsl_a_B, tsl_err, tsl_step)" in out


def test_a_pointer_assigned_one_of_several_buffers_carries_its_root() -> None:
    src = """__kernel void KERNEL(__global const float* A, __global float* Y0, __global float* Y1) {
    const int g = get_global_id(0);
    __global float* Ys;
    if (g < 8) Ys = Y0; else Ys = Y1 + 1;
    Ys[g] = A[g];
}"""
    out = instrument(src, [64, 32, 32])
    assert "__global const char* tsl_b_Ys = 0; ulong tsl_n_Ys = 0; int tsl_a_Ys = 0;" in out
    assert "Ys = Y0, tsl_b_Ys = tsl_b_Y0, tsl_n_Ys = tsl_n_Y0, tsl_a_Ys = tsl_a_Y0;" in out
    assert "Ys = Y1 + 1, tsl_b_Ys = tsl_b_Y1" in out
    assert "(*TSL_G(float, Ys + (g), Ys, 1, sizeof(float)))" in out


def test_local_arrays_are_roots_and_get_a_local_sink() -> None:
    src = """__kernel void KERNEL(__global const float* X, __global float* Y) {
    __local float L[2 * 8];
    const int l = get_local_id(0);
    __local float* row = L + l;
    row[0] = X[get_global_id(0)];
    barrier(CLK_LOCAL_MEM_FENCE);
    Y[get_global_id(0)] = L[15 - l];
}"""
    out = instrument(src, [64, 64])
    assert "__local ulong tsl_lsink[32];" in out
    assert "const ulong tsl_n_L = 64UL; const int tsl_a_L = -1;" in out
    assert "(*TSL_L(float, row + (0), L, 1, sizeof(float))) = " in out
    assert "TSL_L(float, L + (15 - l), L, 0, sizeof(float))" in out
    assert kernel_names(out.replace("KERNEL", "k0"), "k0") == (["X", "Y", "tsl_err", "tsl_step"], ["L"])


def test_kernel_names_numbers_the_local_arrays_as_the_checks_do() -> None:
    src = """__kernel void KERNEL(__global const float* X, __global float* Y) {
    __local float A[8], B[4];
    local const int C[2];
    __local float* p = A + 1;
    A[get_local_id(0)] = X[get_global_id(0)];
    B[0] = A[0]; p[0] = (float)C[0];
    Y[get_global_id(0)] = B[1];
}"""
    out = instrument(src, [64, 64])
    assert "const int tsl_a_A = -1;" in out and "const int tsl_a_B = -2;" in out and "tsl_a_C = -3;" in out
    program = PREAMBLE + out.replace("KERNEL", "k1") + src.replace("KERNEL", "k2")
    assert kernel_names(program, "k1") == (["X", "Y", "tsl_err", "tsl_step"], ["A", "B", "C"])
    assert kernel_names(program, "k2") == (["X", "Y"], ["A", "B", "C"])
    assert kernel_names(program, "k3") == ([], [])
    assert kernel_names("__kernel void k1(@", "k1") == ([], [])


def test_names_that_are_not_pointers_and_address_taking_are_left_alone() -> None:
    src = """__kernel void KERNEL(__global const float* X, __global float* Y) {
    const float16 v = vload16(0, X);
    float acc[4];
    acc[0] = v.s0;
    __global const float* p = &X[4];
    Y[0] = acc[0] + p[0];
}"""
    out = instrument(src, [64, 4])
    assert "acc[0] = v.s0;" in out  # a private array
    assert "__global const float* p = &X[4];" in out
    assert "(*TSL_G(float, p + (0), X, 0, sizeof(float)))" in out


@pytest.mark.parametrize("src, why", [
    ("""__kernel void KERNEL(__global const float* A, __global const float* B, __global float* Y) {
    const __global float* p = get_global_id(0) ? A : B;
    Y[0] = p[0];
}""", "derives from more than one buffer (A, B)"),
    ("""__kernel void KERNEL(__global float* Y) {
    int i = 0;
    Y[i++] = 1.0f;
}""", "an index with a side effect"),
    ("""__kernel void KERNEL(__global float* Y) {
    __global float* p = (__global float*)(0x1000);
    p[0] = 1.0f;
}""", "has no buffer it derives from"),
])
def test_what_it_cannot_follow_is_refused_not_guessed(src: str, why: str) -> None:
    with pytest.raises(SanitizeError, match=re.escape(why)):
        instrument(src, [64, 64, 64])


def test_a_kernel_parameter_without_an_extent_is_refused() -> None:
    with pytest.raises(SanitizeError, match="no extent for its argument 'Y'"):
        instrument("__kernel void KERNEL(__global const float* X, __global float* Y) { Y[0] = X[0]; }", [4])


def test_the_tokenizer_keeps_every_character() -> None:
    src = '#pragma unroll 1\n/* c */ x = 0x1Fu + 1.5e-3f; // done\n a <<= 2;'
    assert "".join(t for _, t in tokenize(src)) == src


def test_a_record_reads_back_as_a_violation() -> None:
    assert Violation.read([0] * 11) is None
    v = Violation.read([3, 7, 1, 1, 42, 4, 200704, 0, 200704, 0, 64])
    assert v is not None and (v.count, v.step, v.arg, v.store, v.local, v.line) == (3, 7, 1, True, False, 42)
    assert (v.offset // v.esize, v.extent // v.esize, v.width) == (50176, 50176, 64)
    neg = Violation.read([1, 0, 0, 2, 1, 4, -4, -1, 16, 0, 4])
    assert neg is not None and neg.offset == -4 and neg.local
