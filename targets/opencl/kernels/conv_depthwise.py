"""The direct kernels of depthwise conv2d (conv.py's template): the taps in registers over a repacked
input, or a work-group repacking its channel block into local memory itself (from NCHW, from NCHW16c, or
computing it by a fused 1x1 expansion).
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass

from .conv_geometry import Geometry, store_pixels, tile_ids
from .conv_repack import plane_offset, transposed_row
from .gemm import Epilogue, vtype


def depthwise_source(geo: Geometry, width: int, th: int, tw: int, hp: int, wp: int, has_bias: bool,
                     epilogue: Epilogue | None, cols_first: bool = False, fill: str = "",
                     band: Band | None = None) -> str:
    """One channel block of `width`, a th x tw pixel tile; the KH*KW weight vectors live in registers and
    each input vector is loaded once for every tap of the tile that reads it. `fill`: code that repacks
    the work-group's block into `__local float L[]` (depthwise_local_source), read instead of P; `band`:
    the rows of it that L holds."""
    vt = vtype(width)
    taps = geo.kh * geo.kw
    ins = f"__global const float* restrict {'X' if fill else 'P'}, __global const float* restrict W"
    ins += ", __global const float* restrict in2" if has_bias else ""
    load = (lambda off: f"xb[{off}]") if width == 1 else (lambda off: f"vload{width}(0, xb + {off})")
    block = "0" if fill else f"(n * {math.ceil(geo.c / width)} + ob)"
    row0 = f"oh0 * {geo.sh}" if band is None else f"(oh0 * {geo.sh} - {band.first_row(geo)})"
    lines = [
        f"// depthwise conv2d {geo.kh}x{geo.kw} stride {geo.sh},{geo.sw} dilation {geo.dh},{geo.dw}: "
        f"x [{geo.n}, {geo.c}, {geo.h}, {geo.w}] -> y [{geo.n}, {geo.o}, {geo.ho}, {geo.wo}]",
        f"// tile: {th}x{tw} output pixels x one {vt} of channels per work-item"
        + ("; the work-group's input block repacked into local memory first" if fill else ""),
        f"__kernel void KERNEL({ins}, __global float* restrict Y) {{",
        *([fill] if fill else []),
        *tile_ids(geo, th, tw, cols_first, math.ceil(geo.c / width)),
        f"    const int oc0 = ob * {width};",
        f"    const {'__local' if fill else '__global'} float* xb = {'L' if fill else 'P'}"
        f" + ((long){block} * {hp} + {row0}) * {wp * width} + ow0 * {geo.sw * width};",
        f"    const __global float* wp = W + ob * {taps * width};",
    ]
    factor = ""
    if geo.scale:  # the fused input scale's factors of this work-item's channels, folded into the weights
        lanes = [geo.scale_of(f"oc0 + {j}") for j in range(width)]
        value = lanes[0] if width == 1 else f"({vt})({', '.join(lanes)})"
        lines.append(f"    const {vt} sc = {value};")
        factor = " * sc"
    accs = [f"acc{i}" for i in range(th * tw)]
    rolled = geo.kh > 1 and th * tw * taps > UNROLLED_FMAS
    weight = (lambda t: f"wp[{t}]") if width == 1 else (lambda t: f"vload{width}({t}, wp)")
    if not rolled:
        lines += [f"    const {vt} w{t} = {weight(t)}{factor};" for t in range(taps)]
    lines.append(f"    {vt} {', '.join(f'{a} = 0.0f' for a in accs)};")
    # group the (pixel, tap) pairs by the input vector they read (of a row of taps when rolled)
    reads: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for i in range(th * tw):
        y, x = divmod(i, tw)
        for kh in range(1 if rolled else geo.kh):
            for kw in range(geo.kw):
                at = (y * geo.sh + kh * geo.dh, x * geo.sw + kw * geo.dw)
                reads.setdefault(at, []).append((i, kh * geo.kw + kw))
    ind = "    "
    if rolled:  # one row of taps an iteration, its KW weight vectors loaded there
        lines.append("    #pragma unroll 1")
        lines.append(f"    for (int ky = 0; ky < {geo.kh}; ++ky, xb += {geo.dh * wp * width}, "
                     f"wp += {geo.kw * width}) {{")
        lines += [f"        const {vt} w{t} = {weight(t)}{factor};" for t in range(geo.kw)]
        ind = "        "
    for (row, col), uses in sorted(reads.items()):
        lines.append(f"{ind}{{")
        lines.append(f"{ind}    const {vt} v = {load((row * wp + col) * width)};")
        lines += [f"{ind}    acc{i} = fma(v, w{t}, acc{i});" for i, t in uses]
        lines.append(f"{ind}}}")
    if rolled:
        lines.append("    }")
    lines += store_pixels(geo, th, tw, width, accs, has_bias, epilogue)
    lines.append("}")
    return "\n".join(lines) + "\n"


UNROLLED_FMAS = 200
"""Past this many (pixel, tap) FMAs a tile's taps are not all unrolled: a loop over the kernel's rows
runs one row of taps an iteration (its KW weight vectors loaded there). PoCL's compile time grows with the
unrolled body: EfficientNet-B0's 5x5 convs with 18-pixel tiles (450 FMAs, 25 weight vectors and 18
accumulators: past the 32 registers) took 2-4 s each at their first launch."""


@dataclass(frozen=True)
class Band:
    """The output rows one work-group of a local-repack depthwise conv computes: `rows` output rows (whole
    tile rows) a group, starting at group id 0 times `rows`, from `plane` rows of the padded input
    (halo included), which its work-items (`items` of them) fill into local memory first."""

    rows: int
    plane: int
    items: int

    def first_row(self, geo: Geometry) -> str:
        """The band's first padded input row."""
        return f"get_group_id(0) * {self.rows * geo.sh}"


def band_for(geo: Geometry, th: int, tw: int, hp: int, blocks: int, workers: int, rows: int = 0,
             row_bytes: int = 0, local_bytes: int = 0) -> Band:
    """Tile rows a work-group: all of them when the (image, channel block) pairs give the device's
    `workers` enough work-groups (4 each), else bands of at least twice the halo, so a 16-channel conv on
    a large plane (mobilenet_v2's first depthwise: one block of 80x80) runs on every core; and no more
    than the input rows of `row_bytes` each that fit in `local_bytes` of local memory (0: no limit), so
    a device with less local memory than PoCL's 1 MiB (Intel's CPU runtime: 256 KiB) takes narrower
    bands instead of losing the local-memory kernel (efficientnet_b0's 16->96 expansion and 96-channel
    96x96 depthwise there: the expansion alone 1.15 ms plus 0.63 of pack and unpack launches, against
    0.35 ms fused in one; the model 8.97 -> 7.03 ms). `rows` (a schedule's band_rows, in tile rows)
    overrides."""
    trows, tcols = math.ceil(geo.ho / th), math.ceil(geo.wo / tw)
    band = trows
    if blocks * geo.n < 4 * workers:
        halo = max(1, math.ceil((geo.kh - 1) * geo.dh / (th * geo.sh)))
        want = math.ceil(4 * workers / (blocks * geo.n))
        band = max(min(trows, 2 * halo), math.ceil(trows / want))
    if row_bytes and local_bytes:
        out_rows = ((local_bytes // row_bytes) - (geo.kh - 1) * geo.dh - 1) // geo.sh + 1
        band = min(band, max(1, out_rows // th))
    band = rows or band
    band = math.ceil(trows / math.ceil(trows / band))  # even bands
    plane = min(hp, (band * th - 1) * geo.sh + (geo.kh - 1) * geo.dh + 1)
    return Band(band * th, plane, band * tcols)


def depthwise_local_source(geo: Geometry, th: int, tw: int, band: Band, wp: int, has_bias: bool,
                           epilogue: Epilogue | None, channel_map: str | None) -> str:
    """depthwise_source with its input repack inside: a work-group is one (image, 16-channel block, band
    of output rows), a work-item per output tile. Its work-items first fill the band's zero-padded input
    rows (halo included) in local memory (rows of repack_input_transposed, transposed in registers), meet
    at one barrier, then each computes its tile from local memory: one launch instead of two, and no
    scratch buffer."""
    row = transposed_row(geo, geo.c, wp, plane_offset(geo, channel_map), "__local", "continue")
    fill = f"""    __local float L[{band.plane * wp * 16}];
    {{  // the band's padded input rows, a row a work-item at a time
        const int n = get_global_id(2);
        const int cin = get_global_id(1) * 16, c0 = cin;
        for (int hl = get_local_id(0); hl < {band.plane}; hl += {band.items}) {{
            const int hh = {band.first_row(geo)} + hl;
            __local float* prow = L + hl * {wp * 16};
{textwrap.indent(row, "        ")}        }}
    }}
    barrier(CLK_LOCAL_MEM_FENCE);"""
    return depthwise_source(geo, 16, th, tw, band.plane, wp, has_bias, epilogue, fill=fill, band=band)


def depthwise_local_blocked_source(geo: Geometry, th: int, tw: int, band: Band, wp: int, has_bias: bool,
                                   epilogue: Epilogue | None) -> str:
    """depthwise_local_source for an NCHW16c input: the work-group's 16-channel block is already one
    plane of 16-float pixels, so filling its zero-padded copy in local memory is a vector copy a pixel
    (pads as zeros), a row a work-item at a time. It replaces repack_blocked's launch and scratch buffer:
    mobilenet_v2 spent 44 of its 98 launches on those repacks."""
    fill = f"""    __local float L[{band.plane * wp * 16}];
    {{  // the band's padded input rows, a row a work-item at a time
        const int n = get_global_id(2);
        const __global float* xs = X + ((long)n * {geo.cbn_in} + get_global_id(1)) * {geo.h * geo.w * 16};
        for (int hl = get_local_id(0); hl < {band.plane}; hl += {band.items}) {{
            const int ih = {band.first_row(geo)} + hl - {geo.pt};
            const bool row = ih >= 0 && ih < {geo.h};
            __local float* prow = L + hl * {wp * 16};
            for (int ww = 0; ww < {wp}; ++ww) {{
                const int iw = ww - {geo.pl};
                vstore16(row && iw >= 0 && iw < {geo.w} ? vload16(0, xs + (ih * {geo.w} + iw) * 16)
                                                          : (float16)(0.0f), ww, prow);
            }}
        }}
    }}
    barrier(CLK_LOCAL_MEM_FENCE);"""
    return depthwise_source(geo, 16, th, tw, band.plane, wp, has_bias, epilogue, fill=fill, band=band)


EXPAND_PIXELS = 8
"""Pixels a fused expansion computes at once: one accumulator chain a pixel stalls on FMA latency
(mobilenet_v2's fused kernels ran at 41-52 GFLOP/s that way, against 110-160 for the 1x1 conv alone)."""


def expand_step(w: int) -> int:
    """Pixels of a row a fused expansion step computes: 4 to EXPAND_PIXELS (whole rows when narrower),
    the fewest computed in all (the last step of a row overlaps the one before), then the widest."""
    if w <= EXPAND_PIXELS:
        return w
    return min(range(4, EXPAND_PIXELS + 1), key=lambda p: (math.ceil(w / p) * p, -p))


@dataclass(frozen=True)
class Expand:
    """A 1x1 conv (and its elementwise chain) computing a depthwise conv's input from a narrower x: an
    inverted residual's expansion, fused into the depthwise conv's local-memory fill so the expanded
    tensor is never written. `x`: x's buffer, `channels` its channel count, `block` its NCHWc block (0:
    NCHW); `weights`: [C/16, K/16, 1, 1, 16, 16] (PackSpec((1, 0), (16, 16)) of [C, K, 1, 1]: for each
    16-channel output block, the K inputs' 16-wide weight vectors, K padded to whole blocks); `bias`: [C]
    or ""; `act`: a C expression of a float16 `{}` (the chain's helper, for str.format) or ""."""

    x: str
    channels: int
    block: int
    weights: str
    bias: str
    act: str

    @property
    def inputs(self) -> int:
        """K padded to whole 16-channel blocks: the packed weights' rows per output block."""
        return math.ceil(self.channels / 16) * 16


def depthwise_expand_source(geo: Geometry, th: int, tw: int, band: Band, wp: int, has_bias: bool,
                            epilogue: Epilogue | None, ex: Expand, serial: bool) -> str:
    """depthwise_local_source whose fill computes the input: each pixel of the work-group's 16-channel
    block is act(bias + sum_k x[k] * W[k]), a step of `expand_step` pixels at a time (one weight vector
    load for that many FMAs with x[k] broadcast), the pads zeros, written to local memory; the expanded
    tensor of an inverted residual never goes to global memory. `serial` (a CPU): work-item 0 fills every
    row: PoCL vectorized the rows of several work-items across its work-item loop, which ran
    mobilenet_v3_small's fused kernels 1.5x slower."""
    hw = geo.h * geo.w
    if ex.block:
        blocks = math.ceil(ex.channels / ex.block)
        def x_of(p: str) -> str:
            return f"xs[((k / {ex.block}) * {hw} + {p}) * {ex.block} + k % {ex.block}]"

        image = blocks * ex.block * hw
        count = ex.inputs if ex.block == 16 else ex.channels
    else:
        def x_of(p: str) -> str:
            return f"xs[k * {hw} + {p}]"

        image, count = ex.channels * hw, ex.channels
    bias = f"vload16(cb, {ex.bias})" if ex.bias else "(float16)(0.0f)"
    px = expand_step(geo.w)
    accs = ", ".join(f"a{i} = b" for i in range(px))
    steps = "\n".join(f"                    a{i} = fma((float16)({x_of(f'p + {i}')}), wk, a{i});"
                      for i in range(px))
    act = ex.act or "{}"
    stores = "\n".join(f"                vstore16({act.format(f'a{i}')}, s0 + {i + geo.pl}, prow);"
                       for i in range(px))
    pads = [f"for (int ww = 0; ww < {geo.pl}; ++ww) vstore16((float16)(0.0f), ww, prow);"] if geo.pl else []
    if wp > geo.pl + geo.w:
        pads.append(f"for (int ww = {geo.pl + geo.w}; ww < {wp}; ++ww) vstore16((float16)(0.0f), ww, prow);")
    pad_cols = "".join(f"            {ln}\n" for ln in pads)
    rows = (f"if (get_local_id(0) == 0) for (int hl = 0; hl < {band.plane}; ++hl)" if serial
            else f"for (int hl = get_local_id(0); hl < {band.plane}; hl += {band.items})")
    fill = f"""    __local float L[{band.plane * wp * 16}];
    {{  // the band's padded input rows, computed from x by the fused 1x1 expansion, {px} pixels a step
        const int n = get_global_id(2), cb = get_global_id(1);
        const __global float* xs = {ex.x} + (long)n * {image};
        const __global float* we = {ex.weights} + cb * {ex.inputs * 16};
        const float16 b = {bias};
        {rows} {{
            const int ih = {band.first_row(geo)} + hl - {geo.pt};
            __local float* prow = L + hl * {wp * 16};
            if (ih < 0 || ih >= {geo.h}) {{
                for (int ww = 0; ww < {wp}; ++ww) vstore16((float16)(0.0f), ww, prow);
                continue;
            }}
{pad_cols}            for (int iw = 0; iw < {geo.w}; iw += {px}) {{
                const int s0 = min(iw, {geo.w - px}), p = ih * {geo.w} + s0;  // the last step overlaps
                float16 {accs};
                for (int k = 0; k < {count}; ++k) {{
                    const float16 wk = vload16(k, we);
{steps}
                }}
{stores}
            }}
        }}
    }}
    barrier(CLK_LOCAL_MEM_FENCE);"""
    return depthwise_source(geo, 16, th, tw, band.plane, wp, has_bias, epilogue, fill=fill, band=band)
