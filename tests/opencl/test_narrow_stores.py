"""The vstore8 / vstore16 of programs built for a CPU (device.NARROW_STORES, added at build time by
with_build_preamble): chars and shorts stored as one unaligned vector store, every other type through the
builtin; each writes exactly its elements at any offset, in each address space, after the extension
pragmas; the IR's program source does not hold it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from tessel.targets.opencl import device as dev

from .conftest import here

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


PROBE = r"""
import glob, os
import numpy as np
import pyopencl as cl
from tessel.targets.opencl import device as dev

src = ("__kernel void k(__global const uchar* x, __global uchar* y, int o) "
       "{ vstore16(vload16(0, x + o), 0, y + o); }")
d = dev.pick_device()
ctx = dev.context_for(d)
q = cl.CommandQueue(ctx, d)
x = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 64)
y = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 64)
cl.Program(ctx, dev.with_build_preamble(src, [d])).build().k(q, (1,), (1,), x, y, np.int32(3))
q.finish()
for so in glob.glob(os.path.join(os.environ["POCL_CACHE_DIR"], "**", "k.so"), recursive=True):
    print("so", so)
"""


def test_uchar16_store_is_one_instruction(tmp_path) -> None:  # noqa: ANN001
    """Disassembling PoCL's cache: with the preamble a uchar16 vstore16 stores no single byte (PoCL 3.1's
    builtin stored the 16 bytes one by one). Skips on other devices and without objdump."""
    if dev.opencl_available() is not None or shutil.which("objdump") is None:
        pytest.skip("needs an OpenCL device and objdump")
    if "Portable Computing Language" not in dev.pick_device().platform.name:
        pytest.skip("reads PoCL's kernel cache")
    env = {**os.environ, "POCL_CACHE_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env,
                         check=True).stdout
    (so,) = [line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("so ")]
    text = subprocess.run(["objdump", "-d", "--no-show-raw-insn", so], capture_output=True, text=True,
                          check=True).stdout
    body = text[text.index("<_pocl_kernel_k>:"):]
    byte_stores = re.findall(r"mov\s+%(?:[abcd][lh]|[sd]il|r\d+b),\s*-?(?:0x[0-9a-f]+)?\(", body)
    assert not byte_stores, byte_stores
    assert re.search(r"vmovdq[au]|vmovup[sd]", body), body[:2000]
