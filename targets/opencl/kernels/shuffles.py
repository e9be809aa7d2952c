"""Interleaves of two 16-lane vectors as kernels write them: clang's `__builtin_shufflevector` with constant
lanes (one LLVM shufflevector: `vpunpcklbw`, `vunpcklps`, ...), where PoCL 3.1's OpenCL `shuffle2` is a
library call taking its mask as a vector (a depthwise repack built on it ran 8x as long); other compilers
get shuffle2. `interleave` is the macros' text for a kernel, `transpose16` a 16x16 transpose by them;
`EVENS` the even lanes of two byte vectors (a stride-2 row split into phases)."""

from __future__ import annotations

_LO = ", ".join(f"{i}, {i + 16}" for i in range(8))
_HI = ", ".join(f"{i}, {i + 16}" for i in range(8, 16))
INTERLEAVE = f"""#if defined(__clang__)
#define KERNEL_ZIP_LO(a, b) __builtin_shufflevector(a, b, \\
    {_LO})
#define KERNEL_ZIP_HI(a, b) __builtin_shufflevector(a, b, \\
    {_HI})
#else
#define KERNEL_ZIP_LO(a, b) shuffle2(a, b, (KERNEL_MASK)({_LO}))
#define KERNEL_ZIP_HI(a, b) shuffle2(a, b, (KERNEL_MASK)({_HI}))
#endif
"""


_EVENS = ", ".join(str(2 * i) for i in range(16))
EVENS = f"""#if defined(__clang__)
#define KERNEL_EVENS(a, b) __builtin_shufflevector(a, b, {_EVENS})
#else
#define KERNEL_EVENS(a, b) shuffle2(a, b, (uchar16)({_EVENS}))
#endif
"""
"""KERNEL_EVENS(a, b): the even lanes of two uchar16s, a's then b's (a stride-2 row's first phase)."""


def transpose16(names: list[str], out: str, et: str) -> list[str]:
    """Statements declaring `out`0..15 (`et`16) as the transpose of the 16 vectors `names` (lane j of
    out<i> = lane i of names[j]; a name "" is a vector of zeros): four rounds of byte interleaves of
    vectors k and k + 8 (x86 `vpunpcklbw` / `vpunpckhbw`, 64 for 256 bytes; INTERLEAVE's macros)."""
    cur = [n or f"(({et}16)(0))" for n in names]
    lines = []
    for r in range(4):
        nxt = [f"{out}{r}_{i}" if r < 3 else f"{out}{i}" for i in range(16)]
        for k in range(8):
            a, b = cur[k], cur[k + 8]
            lines.append(f"const {et}16 {nxt[2 * k]} = KERNEL_ZIP_LO({a}, {b});")
            lines.append(f"const {et}16 {nxt[2 * k + 1]} = KERNEL_ZIP_HI({a}, {b});")
        cur = nxt
    return lines


def interleave(et: str) -> str:
    """INTERLEAVE for vectors of `et` (shuffle2's mask type: the unsigned type of its size)."""
    mask = {"char": "uchar", "short": "ushort", "int": "uint", "float": "uint"}.get(et, et) + "16"
    return f"#define KERNEL_MASK {mask}\n{INTERLEAVE}"
