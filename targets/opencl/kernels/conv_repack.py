"""conv2d's input repacks (conv.py's template): NCHW or NCHWc input -> zero-padded channel blocks
[N, G, C/G/cb, Hp, Wp, cb] in scratch, maybe through a fused channel shuffle or nearest resize, and the
kernel zeroing a blocked output's padding channels.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from .base import Kernel, launch_1d
from .conv_geometry import Geometry
from .gemm import vtype


def repack_prelude(geo: Geometry, groups: int, cg: int, cb: int, wp: int) -> str:
    """The head of a 16-columns-a-work-item repack kernel: its columns `w0`, row `hh` and block `blk`,
    image `n`, first channel `cin` (in its group) and `c0` (in x), input row `ih` (inside x: `row`)."""
    cbn = math.ceil(cg / cb)
    return f"""__kernel void KERNEL(__global const float* restrict X, __global float* restrict P) {{
    const int w0 = get_global_id(0) * 16;
    const int hh = get_global_id(1);
    const int blk = get_global_id(2);  // (n * {groups} + group) * {cbn} + channel block
    if (w0 >= {wp}) return;
    const int n = blk / {groups * cbn};
    const int cin = blk % {cbn} * {cb};  // first channel of the block within its group
    const int c0 = (blk / {cbn}) % {groups} * {cg} + cin;
    const int ih = hh - {geo.pt}, iw0 = w0 - {geo.pl};
    const bool row = ih >= 0 && ih < {geo.h};
"""


def plane_offset(geo: Geometry, channel_map: str | None) -> Callable[[int | str], str]:
    """C expression of the offset of the conv's channel c0 + i from x's channel c0 plane (through
    `channel_map`, a C expression of `c`, when a channel shuffle is fused in)."""
    hw = geo.plane

    def plane(i: int | str) -> str:
        if channel_map is None:
            return str(i * hw) if isinstance(i, int) else f"{i} * {hw}"
        src = re.sub(r"\bc\b", f"(c0 + {i})", channel_map)
        return f"({src} - c0) * {hw}"

    return plane


def repack_input(geo: Geometry, groups: int, cg: int, cb: int, hp: int, wp: int,
                 channel_map: str | None = None) -> Kernel:
    """x [N, C, H, W] -> tmp0 [N, groups, ceil(cg/cb), Hp, Wp, cb], zero outside x (pads, channel tail).
    `channel_map` (a C expression of `c`): channel c of the conv's input is x's channel channel_map(c)
    (a channel shuffle fused into the conv), read where it is. With `geo.up` (a fused nearest resize), x is
    the resize's input and each pixel is read from its source pixel through the resize's index tables."""
    cbn = math.ceil(cg / cb)
    chunks = math.ceil(wp / 16)
    plane = plane_offset(geo, channel_map)
    if geo.up is not None and not (cb == 16 and geo.up.period):
        return repack_upsampled(geo, groups, cg, cb, hp, wp, plane)
    if cb == 16:
        return repack_input_transposed(geo, groups, cg, hp, wp, plane)
    head = repack_prelude(geo, groups, cg, cb, wp)
    src = f"""// repack x [{geo.n}, {geo.c}, {geo.h}, {geo.w}] into channel blocks
// [{geo.n}, {groups}, {cbn}, {hp}, {wp}, {cb}], zero-padded (pads top/left {geo.pt}/{geo.pl});
// 16 columns a work-item
{head}    const __global float* x = X + ((long)(n * {geo.c} + c0) * {geo.h} + ih) * {geo.w} + iw0;
    __global float* p = P + (((long)blk * {hp} + hh) * {wp} + w0) * {cb};
    for (int w = 0; w < min(16, {wp} - w0); ++w) {{
        const bool inside = row && iw0 + w >= 0 && iw0 + w < {geo.w};
        for (int ci = 0; ci < {cb}; ++ci)
            p[w * {cb} + ci] = inside && cin + ci < {cg} ? x[{plane("ci")} + w] : 0.0f;
    }}
}}
"""
    local = 4 if chunks >= 4 else 1
    global_size = (math.ceil(chunks / local) * local, hp, geo.n * groups * cbn)
    return Kernel(src, global_size, (local, 1, 1), ("in0", "tmp0"))


def repack_upsampled(geo: Geometry, groups: int, cg: int, cb: int, hp: int, wp: int,
                     plane: Callable[[int | str], str]) -> Kernel:
    """repack_input through a fused nearest resize (`geo.up`): x is the resize's input [N, C, h, w]; the
    repacked pixel (y, x) is x's pixel (uy[y], ux[x]), found once per row and column from the tables. A
    pixel's cb channels are gathered into one vector and stored whole (a scalar copy through the tables
    cost as much as the resize and the plain repack together)."""
    up = geo.up
    assert up is not None
    cbn = math.ceil(cg / cb)
    chunks = math.ceil(wp / 16)
    head = repack_prelude(geo, groups, cg, cb, wp)
    tail = cg % cb  # channels of a partial last block; the lanes past them are zeros
    lanes = [f"x[{plane(i)} + sx]" if not tail else f"(cin + {i} < {cg} ? x[{plane(i)} + sx] : 0.0f)"
             for i in range(cb)]
    if cb in (2, 4, 8, 16):
        vec = f"float{cb}"
        store = f"vstore{cb}(inside ? ({vec})({', '.join(lanes)}) : ({vec})(0.0f), w, p);"
    else:  # no vector type of cb lanes: a scalar a channel
        store = " ".join(f"p[w * {cb} + {i}] = inside ? {lane} : 0.0f;" for i, lane in enumerate(lanes))
    src = f"""// repack {up.what(geo)} into channel blocks
// [{geo.n}, {groups}, {cbn}, {hp}, {wp}, {cb}], zero-padded (pads top/left {geo.pt}/{geo.pl});
// 16 columns a work-item, a pixel's channels gathered into one vector
{up.tables()}{head}    const __global float* x = X + {up.row_start(geo, "(row ? KERNEL_uy[ih] : 0)")};
    __global float* p = P + (((long)blk * {hp} + hh) * {wp} + w0) * {cb};
    for (int w = 0; w < min(16, {wp} - w0); ++w) {{
        const bool inside = row && iw0 + w >= 0 && iw0 + w < {geo.w};
        const int sx = inside ? KERNEL_ux[iw0 + w] : 0;
        {store}
    }}
}}
"""
    local = 4 if chunks >= 4 else 1
    global_size = (math.ceil(chunks / local) * local, hp, geo.n * groups * cbn)
    return Kernel(src, global_size, (local, 1, 1), ("in0", "tmp0"))


def repack_input_transposed(geo: Geometry, groups: int, cg: int, hp: int, wp: int,
                            plane: Callable[[int | str], str]) -> Kernel:
    """repack_input for 16-channel blocks: a work-item fills one row of one block, 16 input columns at a
    time: it loads those columns of each of the block's 16 channel planes as one vector and stores them
    transposed, a pixel's channels a vector (~1.4x faster than a scalar copy on shufflenet's depthwise
    convs, whose padded rows never held a whole aligned chunk). It also zeroes the row's pad columns. A
    chunk past a row's end over-reads the plane's next rows (harmless, not stored); a chunk that would
    run past the plane's end (the last row, or the last rows of a plane under 16 columns wide) takes a
    scalar loop. Channels past the group's (a partial last block) are zeros."""
    cbn = math.ceil(cg / 16)
    row = transposed_row(geo, cg, wp, plane, "__global", "return")
    what = geo.up.what(geo) if geo.up else f"x [{geo.n}, {geo.c}, {geo.h}, {geo.w}]"
    tables = geo.up.tables() if geo.up else ""
    src = f"""// repack {what} into channel blocks
// [{geo.n}, {groups}, {cbn}, {hp}, {wp}, 16], zero-padded (pads top/left {geo.pt}/{geo.pl});
// a row of a block a work-item, 16 input columns at a time, transposed in registers
{tables}__kernel void KERNEL(__global const float* restrict X, __global float* restrict P) {{
    const int hh = get_global_id(0);
    const int blk = get_global_id(1);  // (n * {groups} + group) * {cbn} + channel block
    if (hh >= {hp}) return;
    const int n = blk / {groups * cbn};
    const int cin = blk % {cbn} * 16;  // first channel of the block within its group
    const int c0 = (blk / {cbn}) % {groups} * {cg} + cin;
    __global float* prow = P + ((long)blk * {hp} + hh) * {wp * 16};
{row}}}
"""
    local = 4 if hp >= 16 else 1
    return Kernel(src, (math.ceil(hp / local) * local, geo.n * groups * cbn), (local, 1), ("in0", "tmp0"))


def transposed_row(geo: Geometry, cg: int, wp: int, plane: Callable[[int | str], str], space: str,
                   done: str) -> str:
    """The body of repack_input_transposed for row `hh` of the block of channels c0.. (`cin`.. within
    their group) of image `n`, stored at `prow` (a `space` pointer); `done` ends a row of pads early."""
    wc = max(min(geo.w, wp - geo.pl), 0)  # input columns the repacked rows hold
    ind = " " * 12
    s = geo.up.period if geo.up else 1  # through a fused resize: 16 / s source columns widen to 16
    widen = {1: "", 2: ".s0011223344556677", 4: ".s0000111122223333"}[s]
    loads = "".join(
        f"{ind}const float16 v{i:x} = cin + {i} < {cg} ? vload{16 // s}(0, x + {plane(i)}){widen} "
        f": (float16)(0.0f);\n" for i in range(16))
    if geo.up:
        x = f"X + {geo.up.row_start(geo, 'KERNEL_uy[ih]')} + iw0 / {s}"
        whole = f"iw0 + 16 <= {geo.w}"  # no source column past the row's end
        col = f"KERNEL_ux[iw0 + w] - iw0 / {s}"
    else:
        x = f"X + ((long)(n * {geo.c} + c0) * {geo.h} + ih) * {geo.w} + iw0"
        # a chunk may run past its row into the plane's next rows (harmless, not stored), never past the
        # plane's end: in the tensor's last plane that is past the end of x (found by --check-bounds)
        whole = f"ih * {geo.w} + iw0 + 16 <= {geo.h * geo.w}"
        col = "w"
    pixel = [", ".join(f"v{i:x}.s{w:x}" for i in range(16)) for w in range(16)]
    stores = "".join(f"{ind}if ({w} < nw) vstore16((float16)({pixel[w]}), {w}, p);\n" for w in range(16))
    return f"""    const int ih = hh - {geo.pt};
    for (int w = 0; w < {geo.pl}; ++w) vstore16((float16)(0.0f), w, prow);
    for (int w = {geo.pl + wc}; w < {wp}; ++w) vstore16((float16)(0.0f), w, prow);
    if (ih < 0 || ih >= {geo.h}) {{
        for (int w = 0; w < {wc}; ++w) vstore16((float16)(0.0f), w + {geo.pl}, prow);
        {done};
    }}
    for (int iw0 = 0; iw0 < {wc}; iw0 += 16) {{
        const int nw = min(16, {wc} - iw0);
        {space} float* p = prow + (iw0 + {geo.pl}) * 16;
        const __global float* x = {x};
        if ({whole}) {{
{loads}{stores}        }} else {{
            for (int w = 0; w < nw; ++w)
                for (int ci = 0; ci < 16; ++ci)
                    p[w * 16 + ci] = cin + ci < {cg} ? x[{plane("ci")} + {col}] : 0.0f;
        }}
    }}
"""


def repack_blocked(geo: Geometry, groups: int, cg: int, cb: int, hp: int, wp: int) -> Kernel:
    """x NCHWc [N, ceil(C/b), H, W, b] -> tmp0 [N, groups, ceil(cg/cb), Hp, Wp, cb], zero outside x. When a
    block of tmp0 is a block of x (cb == b, blocks aligned), each pixel is one vector copy."""
    b = geo.in_block
    cbn = math.ceil(cg / cb)
    chunks = math.ceil(wp / 16)
    if cb == b and (groups == 1 or cg % b == 0):
        vt = vtype(cb)
        x = f"X + (((long)n * {geo.cbn_in} + c0 / {b}) * {geo.h} + ih) * {geo.w * b}"
        body = f"""    const __global float* x = {x};
    for (int w = 0; w < min(16, {wp} - w0); ++w) {{
        const int iw = iw0 + w;
        const bool inside = row && iw >= 0 && iw < {geo.w};
        vstore{cb}(inside ? vload{cb}(0, x + iw * {b}) : ({vt})(0.0f), w, p);
    }}"""
    else:
        load = f"X[{geo.x_index('n', 'c0 + ci', 'ih', 'iw')}]"
        body = f"""    for (int w = 0; w < min(16, {wp} - w0); ++w) {{
        const int iw = iw0 + w;
        const bool inside = row && iw >= 0 && iw < {geo.w};
        for (int ci = 0; ci < {cb}; ++ci)
            p[w * {cb} + ci] = inside && cin + ci < {cg} ? {load} : 0.0f;
    }}"""
    head = repack_prelude(geo, groups, cg, cb, wp)
    src = f"""// repack blocked x [{geo.n}, {geo.cbn_in}, {geo.h}, {geo.w}, {b}] (C = {geo.c}) into channel
// blocks [{geo.n}, {groups}, {cbn}, {hp}, {wp}, {cb}], zero-padded (pads top/left {geo.pt}/{geo.pl});
// 16 columns a work-item
{head}    __global float* p = P + (((long)blk * {hp} + hh) * {wp} + w0) * {cb};
{body}
}}
"""
    local = 4 if chunks >= 4 else 1
    global_size = (math.ceil(chunks / local) * local, hp, geo.n * groups * cbn)
    return Kernel(src, global_size, (local, 1, 1), ("in0", "tmp0"))


def zero_channel_tail(geo: Geometry) -> Kernel:
    """Zero the padding lanes (channels O.. of the last block) of a blocked out0."""
    b, hw = geo.out_block, geo.ho * geo.wo
    src = f"""// zero channels {geo.o}..{geo.obn * b - 1} of the blocked output
// [{geo.n}, {geo.obn}, {geo.ho}, {geo.wo}, {b}]
__kernel void KERNEL(__global float* restrict Y) {{
    const int q = get_global_id(0);  // (n, pixel)
    if (q >= {geo.n * hw}) return;
    __global float* y = Y + (((long)(q / {hw}) * {geo.obn} + {geo.obn - 1}) * {hw} + q % {hw}) * {b};
    for (int j = {geo.o % b}; j < {b}; ++j) y[j] = 0.0f;
}}
"""
    k = launch_1d(geo.n * hw)
    return Kernel(src, k.global_size, k.local_size, ("out0",))
