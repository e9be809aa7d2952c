"""share.py: which literals of a kernel may become its launch's constants, and which kernels a program
keeps. Sharing itself is pinned by lit_tests/targets/opencl/codegen-share-kernels.tsl and checked on
models (tests/opencl)."""

from __future__ import annotations

from types import SimpleNamespace

from tessel.targets.opencl.share import _kernel, drop_unused

KERNEL = """// conv 3x3: [1, 32, 14, 14] -> [1, 16, 14, 14]
static float KERNEL_epi(float v) { return v * 7.0f + 3; }
__kernel void KERNEL(__global const float* restrict X, __global float* restrict Y) {
    __local float L[2288];
    const int t = get_global_id(0) + 12;
    if (t >= 196) return;
    float acc[4];
#pragma unroll 4
    for (int c = 0; c < 32; ++c) {
        acc[c % 4] += X[t * 196 + c * 5];
    }
    Y[t] = KERNEL_epi(acc[0] + 0.5f + 1e-5f) + X[8];
}
"""


def _values(text: str) -> list[int]:
    k = _kernel(text.replace("KERNEL", "k3_conv2d"))
    assert k is not None
    return k.values


def test_only_the_bodys_top_level_literals_may_vary() -> None:
    """12 and 196 (a statement's), 0 and 32 (the loop's bounds, at the top level): yes. 2288 and 4 (array
    sizes), 0 in get_global_id(0), the pragma's 4, the loop body's 196 and 5, the helper's 3, floats, and
    X[8] (in brackets): no."""
    assert _values(KERNEL) == [12, 196, 0, 32]


def test_the_key_ignores_the_kernels_own_name_and_comments() -> None:
    a = _kernel(KERNEL.replace("KERNEL", "k3_conv2d"))
    b = _kernel(KERNEL.replace("KERNEL", "k9_conv2d").replace("32,", "48,").replace("c < 32", "c < 48")
                .replace("// conv 3x3", "// another conv"))
    assert a is not None and b is not None
    assert a.key == b.key and a.values != b.values and b.values == [12, 196, 0, 48]
    c = _kernel(KERNEL.replace("KERNEL", "k4_conv2d").replace("c * 5", "c * 6"))  # inside the loop
    assert c is not None and c.key != a.key


def test_a_program_keeps_the_kernels_its_launches_run() -> None:
    launch = SimpleNamespace(name="cl.launch", attrs={"kernels": [{"name": "k0_relu"}]})
    assembled = SimpleNamespace(name="cl.launch", attrs={"kernels": []})
    block = SimpleNamespace(ops=[launch, assembled, SimpleNamespace(name="const", attrs={})])
    program = ["__kernel void k0_relu(__global float* x) { }\n",
               "// concat\n__kernel void k1_concat(__global float* x) { }\n"]
    assert drop_unused(block, program) == program[:1]
