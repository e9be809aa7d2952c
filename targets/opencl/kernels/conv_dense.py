"""The direct kernel of dense and grouped conv2d (conv.py's template): a tile of output pixels times
one or more columns of output channels a work-item, over the repacked (or NCHW, read in place) input.
"""

from __future__ import annotations

import math

from .conv_geometry import Geometry, store_pixels, tile_ids
from .gemm import Epilogue, vtype


def column_ids(geo: Geometry, width: int, cw: int, cpg: int, nc: int) -> list[str]:
    """The group and first output channel of work-item column `ob` (and, for a grouped conv's padded
    columns, `lim`, the valid lanes of its column)."""
    if cpg and nc > 1:  # the whole group
        return ["    const int grp = ob;", f"    const int oc0 = grp * {geo.og};"]
    if cpg:
        return [f"    const int grp = ob / {cpg};",
                f"    const int oc0 = grp * {geo.og} + ob % {cpg} * {width};",
                f"    const int lim = {geo.og} - ob % {cpg} * {width};  // valid lanes of this column"]
    return [f"    const int oc0 = ob * {cw};",
            f"    const int grp = oc0 / {geo.og};" if geo.g > 1 else "    const int grp = 0;"]


def dense_source(geo: Geometry, cb: int, width: int, th: int, tw: int, hp: int, wp: int, has_bias: bool,
                 epilogue: Epilogue | None, cpg: int = 0, nc: int = 1, cols_first: bool = False,
                 unroll: int = 0, planar: bool = False) -> str:
    """`cpg` > 0: grouped conv whose groups' output channels are padded to `cpg` columns of `width` each
    (weights packed per group), so a group of 34 channels still gets 16-wide columns; with `nc` == `cpg`
    a work-item computes all of its group's columns. `nc` > 1 (dense convs): each work-item computes `nc`
    adjacent columns (weights packed `nc * width` wide), so each
    broadcast input value feeds `nc` FMAs. `cols_first`: global dimension 0 walks the columns. `unroll`
    > 0: the loop over a block's channels stays rolled, that many channels a trip. `planar`: P is the
    NCHW input itself (hp x wp = the image, blocks of cb planes dividing a group), read with no repack."""
    cbn = math.ceil(geo.cg / cb)
    vt = vtype(width)
    r = th * tw
    accs = [[f"acc{i}" if c == 0 else f"acc{i}_{c}" for i in range(r)] for c in range(nc)]
    # element strides in P: a pixel, a row, an input channel, a block of channels
    px, row, chan = (1, wp, hp * wp) if planar else (cb, wp * cb, 1)
    offs = [i // tw * geo.sh * row + i % tw * geo.sw * px for i in range(r)]
    ins = "__global const float* restrict P, __global const float* restrict W"
    ins += ", __global const float* restrict in2" if has_bias else ""
    cw = width * nc  # output channels a work-item computes
    lines = [
        f"// conv2d {geo.kh}x{geo.kw} stride {geo.sh},{geo.sw} dilation {geo.dh},{geo.dw} groups {geo.g}: "
        f"x [{geo.n}, {geo.c}, {geo.h}, {geo.w}] -> y [{geo.n}, {geo.o}, {geo.ho}, {geo.wo}]",
        f"// tile: {th}x{tw} output pixels x {nc} {vt} of output channels a work-item; input blocks of {cb}",
        f"__kernel void KERNEL({ins}, __global float* restrict Y) {{",
        *tile_ids(geo, th, tw, cols_first, geo.g * (cpg // nc) if cpg else math.ceil(geo.o / cw)),
        *column_ids(geo, width, cw, cpg, nc),
        f"    const __global float* xb = P + (long)(n * {geo.g} + grp) * {cbn * hp * wp * cb}"
        f" + oh0 * {geo.sh * row} + ow0 * {geo.sw * px};",
        f"    const __global float* wp = W + ob * {cbn * geo.kh * geo.kw * cb * cw};",
        *(f"    {vt} {', '.join(f'{a} = 0.0f' for a in col)};" for col in accs),
        f"    for (int cbi = 0; cbi < {cbn}; ++cbi) {{",
        f"        for (int kh = 0; kh < {geo.kh}; ++kh) {{",
        f"            const __global float* xr = xb + cbi * {hp * wp * cb} + kh * {geo.dh * row};",
        f"            for (int kw = 0; kw < {geo.kw}; ++kw, wp += {cb * cw}) {{",
        f"                const __global float* xk = xr + kw * {geo.dw * px};",
    ]
    step = unroll if 0 < unroll < cb else cb  # input channels a loop iteration
    ind, xk, wk = "                ", "xk", "wp"
    if step < cb:
        lines += [f"{ind}const __global float* xc = xk;", f"{ind}const __global float* wc = wp;",
                  f"{ind}#pragma unroll 1",
                  f"{ind}for (int ci = 0; ci < {cb}; ci += {step}, xc += {step * chan}, "
                  f"wc += {step * cw}) {{"]
        ind, xk, wk = ind + "    ", "xc", "wc"
    for ci in range(step):
        if geo.scale:  # the fused input scale's factor of this channel, folded into its weights
            channel = f"grp * {geo.cg} + cbi * {cb} + {'ci + ' if step < cb else ''}{ci}"
            lines.append(f"{ind}const float s{ci} = {geo.scale_of(channel)};")
        for c in range(nc):
            at = ci * nc + c
            load = f"{wk}[{at}]" if width == 1 else f"vload{width}({at}, {wk})"
            load += f" * s{ci}" if geo.scale else ""
            lines.append(f"{ind}const {vt} w{ci}{f'_{c}' if nc > 1 else ''} = {load};")
        for i, off in enumerate(offs):
            if nc == 1:
                lines.append(f"{ind}{accs[0][i]} = fma({xk}[{off + ci * chan}], w{ci}, {accs[0][i]});")
                continue
            lines.append(f"{ind}{{ const float x = {xk}[{off + ci * chan}];")
            lines += [f"{ind}  {accs[c][i]} = fma(x, w{ci}_{c}, {accs[c][i]});" for c in range(nc)]
            lines.append(f"{ind}}}")
    if step < cb:
        lines.append("                }")
    lines += ["            }", "        }", "    }"]
    for c in range(nc):
        oc = "oc0" if c == 0 else f"oc0 + {c * width}"
        stores = store_pixels(geo, th, tw, width, accs[c], has_bias, epilogue, lane_limit=bool(cpg), oc=oc,
                              tag="" if c == 0 else f"_{c}")
        if cpg and nc > 1:  # column c of a whole group: its valid lanes
            lim = f"    {{ const int lim = {geo.og - c * width};"
            stores = [lim, *(f"    {ln}" for ln in stores), "    }"]
        elif c and geo.o % cw:  # a column past the last channel
            stores = [f"    if ({oc} < {geo.o}) {{", *(f"    {ln}" for ln in stores), "    }"]
        lines += stores
    lines.append("}")
    return "\n".join(lines) + "\n"
