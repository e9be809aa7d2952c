"""What programs built for a CPU get (device.BUILD_PREAMBLE, added at build time by with_build_preamble,
after the extension pragmas; the IR's program source does not hold it): vstore8 / vstore16 of 8-, 16- and
32-bit types as one unaligned vector store, 64-bit ones through the builtin, each writing exactly its
elements at any offset in each address space; vload8 / vload16 of the same types as one unaligned vector
load, reading exactly their elements at any offset from each address space; rint of floats by the 2^23
addition, equal to numpy's for every kind of float (halves, -0.0, 2^23 and past, inf, NaN), doubles and
halves through the builtin."""

from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest
from tessel.targets.opencl import device as dev

from .conftest import here, pocl_probe

TYPES = {"char": np.int8, "uchar": np.uint8, "short": np.int16, "ushort": np.uint16, "int": np.int32,
         "float": np.float32}


def kernel(t: str, n: int) -> str:
    """Three stores of the vector 1..n at element offset 3 (unaligned): into a global buffer, a local and
    a private array copied out after it."""
    iota = ", ".join(f"({t}){i + 1}" for i in range(n))
    return f"""__kernel void k(__global {t}* g, __global {t}* l_out, __global {t}* p_out) {{
    __local {t} l[{n + 8}];
    {t} p[{n + 8}];
    for (int i = 0; i < {n + 8}; ++i) {{ l[i] = 0; p[i] = 0; }}
    const {t}{n} v = ({t}{n})({iota});
    vstore{n}(v, 0, g + 3);
    vstore{n}(v, 0, l + 3);
    vstore{n}(v, 0, p + 3);
    for (int i = 0; i < {n + 8}; ++i) {{ l_out[i] = l[i]; p_out[i] = p[i]; }}
}}
"""


@pytest.mark.parametrize("n", [8, 16])
@pytest.mark.parametrize("t", list(TYPES))
def test_vector_stores_write_their_elements(t: str, n: int) -> None:
    import pyopencl as cl

    info = here()
    device = dev.pick_device()
    source = dev.preamble(info) + kernel(t, n)
    built = dev.with_build_preamble(source, [device])
    assert ("tessel_vstore16" in built) == info.is_cpu and "tessel_vstore16" not in source
    if info.is_cpu and "#pragma" in source:  # after the pragmas that enable the types it names
        assert built.index("tessel_vstore16") > built.rindex("#pragma OPENCL EXTENSION")
    ctx = dev.context_for(device)
    queue = cl.CommandQueue(ctx, device)
    prg = cl.Program(ctx, built).build(options=["-w"])
    dtype = TYPES[t]
    bufs = [np.zeros(n + 8, dtype) for _ in range(3)]
    mem = [cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=b) for b in bufs]
    prg.k(queue, (1,), (1,), *mem)
    want = np.zeros(n + 8, dtype)
    want[3:3 + n] = np.arange(1, n + 1)
    for b, m in zip(bufs, mem, strict=True):
        cl.enqueue_copy(queue, b, m)
    queue.finish()
    for b in bufs:
        np.testing.assert_array_equal(b, want)


def load_kernel(t: str, n: int) -> str:
    """Loads of n elements at element offset 3 (unaligned) from a global, a constant, a local and a private
    array (the last two filled from the global one), each stored to its own row of the output."""
    return f"""__kernel void k(__global const {t}* g, __constant {t}* c, __global {t}* out) {{
    __local {t} l[{n + 8}];
    {t} p[{n + 8}];
    for (int i = 0; i < {n + 8}; ++i) {{ l[i] = g[i]; p[i] = g[i]; }}
    barrier(CLK_LOCAL_MEM_FENCE);
    const {t}{n} a = vload{n}(0, g + 3), b = vload{n}(0, c + 3);
    const {t}{n} d = vload{n}(0, l + 3), e = vload{n}(0, p + 3);
    for (int i = 0; i < {n}; ++i) {{
        out[i] = a[i]; out[{n} + i] = b[i]; out[{2 * n} + i] = d[i]; out[{3 * n} + i] = e[i];
    }}
}}
"""


@pytest.mark.parametrize("n", [8, 16])
@pytest.mark.parametrize("t", [*TYPES, "long"])
def test_vector_loads_read_their_elements(t: str, n: int) -> None:
    import pyopencl as cl

    info = here()
    device = dev.pick_device()
    source = dev.preamble(info) + load_kernel(t, n)
    built = dev.with_build_preamble(source, [device])
    assert ("tessel_vload16" in built) == info.is_cpu and "tessel_vload16" not in source
    ctx = dev.context_for(device)
    queue = cl.CommandQueue(ctx, device)
    prg = cl.Program(ctx, built).build(options=["-w"])
    dtype = {**TYPES, "long": np.int64}[t]
    x = (np.arange(n + 8) * 3 + 1).astype(dtype)
    mf = cl.mem_flags
    g = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x)
    c = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x)
    out = np.zeros(4 * n, dtype)
    o = cl.Buffer(ctx, mf.WRITE_ONLY, out.nbytes)
    prg.k(queue, (1,), (1,), g, c, o)
    cl.enqueue_copy(queue, out, o)
    queue.finish()
    np.testing.assert_array_equal(out, np.tile(x[3:3 + n], 4))


RINT_VALUES = np.concatenate([
    np.arange(-40, 41) * 0.25,
    [0.0, -0.0, 0.49999997, -0.49999997, 2**22 + 0.5, 2**23 - 0.5, -(2**23 - 0.5), 2**23, 2**23 + 2,
     2**24 + 2, 1e30, -1e30, 1e-40, -1e-40, np.inf, -np.inf, np.nan],
    np.random.default_rng(0).uniform(-2**24, 2**24, 200), np.random.default_rng(1).uniform(-300, 300, 200),
]).astype(np.float32)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 8, 16])
def test_rint_is_numpys(n: int) -> None:
    import pyopencl as cl

    device = dev.pick_device()
    ctx = dev.context_for(device)
    queue = cl.CommandQueue(ctx, device)
    t = "float" if n == 1 else f"float{n}"
    load, store = ("x[i]", "y[i] = v;") if n == 1 else (f"vload{n}(i, x)", f"vstore{n}(v, i, y);")
    src = f"__kernel void k(__global const float* x, __global float* y) {{ const int i = get_global_id(0); " \
          f"const {t} v = rint({load}); {store} }}"
    prg = cl.Program(ctx, dev.with_build_preamble(src, [device])).build(options=["-w"])
    count = -(-RINT_VALUES.size // n)
    x = np.zeros(count * n, np.float32)
    x[:RINT_VALUES.size] = RINT_VALUES
    mf = cl.mem_flags
    xb = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x)
    yb = cl.Buffer(ctx, mf.WRITE_ONLY, x.nbytes)
    prg.k(queue, (count,), None, xb, yb)
    y = np.empty_like(x)
    cl.enqueue_copy(queue, y, yb)
    queue.finish()
    want = np.rint(x)
    nan = np.isnan(want)
    assert np.isnan(y[nan]).all()
    np.testing.assert_array_equal(y[~nan].view(np.uint32), want[~nan].view(np.uint32))  # -0.0 too


@pytest.mark.parametrize("t", ["double", "half"])
def test_rint_of_doubles_and_halves_is_the_builtin(t: str) -> None:
    import pyopencl as cl

    if not (here().fp64 if t == "double" else here().fp16):
        pytest.skip(f"no {t} on this device")
    device = dev.pick_device()
    ctx = dev.context_for(device)
    queue = cl.CommandQueue(ctx, device)
    src = dev.preamble(here()) + f"__kernel void k(__global const {t}* x, __global {t}* y) {{ " \
        f"const int i = get_global_id(0); y[i] = rint(x[i]); }}"
    prg = cl.Program(ctx, dev.with_build_preamble(src, [device])).build(options=["-w"])
    big = [2.0**52 + 1, 4503599627370495.5, 1e300] if t == "double" else [1024.5, 2049.0, 60000.0]
    x = np.array([0.5, 1.5, -2.5, *big], np.float64 if t == "double" else np.float16)
    mf = cl.mem_flags
    xb = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x)
    yb = cl.Buffer(ctx, mf.WRITE_ONLY, x.nbytes)
    prg.k(queue, (x.size,), None, xb, yb)
    y = np.empty_like(x)
    cl.enqueue_copy(queue, y, yb)
    queue.finish()
    np.testing.assert_array_equal(y, np.rint(x))


PROBE = r"""
import glob, os
import numpy as np
import pyopencl as cl
from tessel.targets.opencl import device as dev

src = ("__kernel void k(__global const uchar* x, __global uchar* y, int o) "
       "{ vstore16(vload16(0, x + o), 0, y + o); }\n"
       "__kernel void r(__global const float* x, __global float* y) "
       "{ vstore16(rint(vload16(0, x)), 0, y); }\n"
       "__kernel void f(__global const float* x, __global float* y, int o) "
       "{ vstore16(vload16(0, x + o) * 2.0f, 0, y + o); }")
d = dev.pick_device()
ctx = dev.context_for(d)
q = cl.CommandQueue(ctx, d)
x = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 64)
y = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 64)
prg = cl.Program(ctx, dev.with_build_preamble(src, [d])).build()
prg.k(q, (1,), (1,), x, y, np.int32(3))
prg.r(q, (1,), (1,), x, y)
prg.f(q, (1,), (1,), x, y, np.int32(3))
q.finish()
for name in ("k", "r", "f"):
    for so in glob.glob(os.path.join(os.environ["POCL_CACHE_DIR"], "**", name + ".so"), recursive=True):
        print("so", name, so)
"""


def test_disassembly(tmp_path) -> None:  # noqa: ANN001
    """Disassembling PoCL's cache: with the preamble a uchar16 vstore16 stores no single byte (PoCL 3.1's
    builtin stored the 16 bytes one by one), rint of a float16 converts nothing to integers (PoCL's
    emulation truncated with vcvttps2dq and fixed up), and a float16 vload16 / vstore16 at an unaligned
    offset is one zmm load and one zmm store (PoCL's builtin loaded pairs of floats and shuffled them
    together: the same code in the end, but selecting it took LLVM most of a kernel's compile time).
    Skips on other devices and without objdump."""
    out = pocl_probe(tmp_path, PROBE)
    so = dict(line.split(" ", 2)[1:] for line in out.splitlines() if line.startswith("so "))

    def body(name: str) -> str:
        text = subprocess.run(["objdump", "-d", "--no-show-raw-insn", so[name]], capture_output=True,
                              text=True, check=True).stdout
        return text[text.index(f"<_pocl_kernel_{name}>:"):]

    k = body("k")
    byte_stores = re.findall(r"mov\s+%(?:[abcd][lh]|[sd]il|r\d+b),\s*-?(?:0x[0-9a-f]+)?\(", k)
    assert not byte_stores, byte_stores
    assert re.search(r"vmovdq[au]|vmovup[sd]", k), k[:2000]
    r = body("r")
    assert "vaddps" in r and "cvttps2dq" not in r, r[:2000]
    f = body("f")
    f = f[:f.index("ret")]
    assert len(re.findall(r"vmovups\s+\S*\(%\w+(?:,%\w+,\d)?\),%zmm", f)) == 1, f[:2000]
    assert len(re.findall(r"vmovups\s+%zmm\d+,", f)) == 1, f[:2000]
    assert not re.search(r"vmov[lh]ps|vmovsd|vinsertf", f), f[:2000]
