"""`conv2d`: direct convolution in channel blocks (NCHWc, DESIGN §5), NCHW at the op boundary.

A first kernel repacks the NCHW input into scratch `tmp0` as [N, G, C/G/cb, Hp, Wp, cb]: channel blocks of
cb, the spatial pads (and the over-read of partial output tiles) written as zeros, so the main loop has
no bounds checks. An unpadded (non-depthwise) conv whose tiles divide the output reads an NCHW input in
place instead, plane by plane (an RGB stem, shufflenet's grouped 1x1 convs). Weights are packed (a
`pack` op, once at load time for constants) to [O/(V*vcols), C/G/cb, KH, KW, cb, V*vcols].

- dense and grouped conv: each work-item computes a tile of TH x TW output pixels x `vcols` `float<V>` columns
  of output channels (V = 16 unless a group has fewer); per (channel, tap) it loads `vcols` weight vectors and
  does TH*TW*vcols FMAs with broadcast input scalars, like the GEMM micro-kernel. Dense convs of more than 16
  output channels take two columns (three when that pads less: 48, or 8-wide for 24) and tiles of 6..9 pixels
  (up to 14 on images of at most 14x14), the loop over a block's channels rolled 4 channels a trip (fully
  unrolled, LLVM hoists the broadcasts and spills them); a grouped conv of 2..6 columns a group (shufflenet's
  68 channels: 5) all of its group's columns on 2..5-pixel tiles (each input value loaded once for all:
  ~1.2-1.6x on shufflenet's grouped 1x1 convs); others one column, 14..24 pixels, fully unrolled (pick_vcols,
  pick_tile, pick_unroll, chosen from bench/conv_sweep.py: on this machine's Zen 5 cores the light models'
  convs went from 200-370 to 350-450 GFLOP/s). The FMAs are `fma()`: PoCL builds without -cl-mad-enable, so
  `mad()` would become a multiply and an add;
- depthwise (groups == channels): channels vectorized by 16, the KH*KW weight vectors held in registers,
  each input vector loaded once for all the taps that use it. Reading NCHW with 16-wide channel vectors, a
  work-group (one image's 16-channel block, a work-item per output tile) repacks its block into `__local`
  memory itself and meets at one barrier before computing (depthwise_local_source): one launch instead
  of two and no scratch, when twice the padded block fits the device's local memory (PoCL: 1 MiB).

A depthwise conv reading NCHW may take a `channel_map` (a fused channel shuffle): its repack reads channel c
from the input's channel channel_map(c), so the shuffle needs no copy of its own.

Bias and an optional fused `epilogue` (see gemm.Epilogue) are applied per output element before its
store, with the output index in out0's layout.

Schedule overrides (ctx.schedule): tile_h, tile_w, cols (V), vcols, cin_block (cb), unroll (channels a
trip of the rolled loop; 0: unrolled), local (work-group size along global dimension 0), cols_first
(global dimension 0 walks the output-channel columns instead of the tiles) and local_repack (0: a
depthwise conv's repack stays a kernel of its own).

Blocked operands (`lower_conv2d(ctx, in_block=b, out_block=b)`, used by fused regions
`unpack -> conv2d -> pack`): in0 or out0 then holds NCHWc, [N, ceil(C/b), H, W, b] with zero channel
padding, while the op's signature stays NCHW. A blocked input whose blocks are the kernel's own (dense conv
with 16-channel blocks, or depthwise with 16-wide channel vectors) and that needs no spatial padding is read
in place, with no repack; otherwise the repack reads whole channel vectors from the blocked source. A
blocked output is stored a vector per pixel (its lanes are consecutive), the epilogue getting the blocked
flat index; its channel padding is zeroed by a small extra kernel.
"""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass

from ..space import Constraint, Knob, Point, Space, around, space
from .base import Ctx, Kernel, Lowered, NotLowerable, PackSpec, launch_1d, template
from .gemm import Epilogue, check_float32, pick_cols, vtype
from .winograd import lower_winograd, winograd_fits

LANES = "0123456789abcdef"


def lane(v: str, j: int, width: int) -> str:
    return v if width == 1 else f"{v}.s{LANES[j]}"


def pick_block(cg: int) -> int:
    """Input channels per block: all when few, else the size in 8..16 padding least (largest first)."""
    if cg <= 16:
        return cg
    return min(range(16, 7, -1), key=lambda b: math.ceil(cg / b) * b)


def pick_tile(ho: int, wo: int, hi: int = 24, exact: bool = False, nc: int = 1,
              window: tuple[int, int, int, int] = (1, 1, 1, 1), cap: int = 30) -> tuple[int, int]:
    """(TH, TW) output pixels per work-item. One column (`nc` == 1): ~14-24 pixels, padding the output
    least. Several columns: 6..9 pixels (6..14 on images of at most 14x14 pixels), minimizing the padded
    pixels times (1 + 2 / pixels), the loads per FMA beside the broadcasts, then the input pixels the
    tile reads through `window` (KH, KW, SH, SW). `exact`: only tiles dividing the output, of at least
    7 pixels (6..14 for several columns; 2/3 of `cap` where it holds fewer); (0, 0) when there are none.
    `cap`: the accumulators (pixels x columns) the device holds in registers (pixel_cap), which bounds
    all of these."""
    lo = 7 if nc == 1 else 6 if nc == 2 else 2  # whole-group columns (3..6) leave room for few pixels
    if nc > 1:
        hi = min(28 // nc, 14 if exact or ho * wo <= 196 else 9)
    hi = min(hi, cap // nc)
    if lo > hi:  # a device with few registers (pixel_cap, AVX2: 6) takes the tiles it can hold, and down
        lo = max(1, 2 * hi // 3)  # to 2/3 of them where that divides the output (a blocked input read in
        # place instead of a repack launch: 40x40 has no 6-pixel tile, but 2x2 and 1x5)
    kh, kw, sh, sw = window
    best: tuple[float, ...] | None = None
    for tw in range(1, min(wo, hi) + 1):
        for th in range(1, min(ho, hi // tw) + 1):
            r = tw * th
            if exact and (ho % th or wo % tw or r < lo):
                continue
            padded = math.ceil(ho / th) * th * math.ceil(wo / tw) * tw
            if nc == 1:
                key: tuple[float, ...] = (padded / min(r, 14), abs(r - 16), th, tw)
            elif r < min(lo, ho * wo):
                continue
            else:
                reads = ((th - 1) * sh + kh) * ((tw - 1) * sw + kw)
                key = (padded * (1 + 2 / r), reads / r, th, tw)
            if best is None or key < best:
                best = key
    if best is None:
        return (0, 0) if exact else (min(ho, hi), 1)
    return int(best[-2]), int(best[-1])


def group_columns(og: int) -> tuple[int, int]:
    """(width, columns) of a group of `og` output channels: the widest power-of-2 divisor up to 16, or,
    when that is under 8 (34 channels), 8- or 16-wide columns with the group's channels padded."""
    width = math.gcd(og, 16)
    if width < 8 and og >= 8:
        width = 16 if og >= 12 else 8
    return width, math.ceil(og / width)


def dense_columns(o: int, out_block: int = 0) -> tuple[int, int]:
    """(width, columns) a work-item of a dense conv of `o` > 16 output channels: two 16-wide columns, or
    three when that pads the channels less (48, 144: 0.037 -> 0.019 ms on inception's 5x5 16 -> 48);
    24 channels take three 8-wide columns, none padded (shufflenet's 3 -> 24 stem: 0.205 -> 0.138 ms),
    unless the output is in blocks of 16: then two 16-wide columns cover both blocks and store the padding
    lanes' zeros themselves (three 8-wide ones would leave lanes 24..31 to a zeroing kernel; three 16-wide
    ones computed 48 channels, and the zeroing kernel: 0.29 -> 0.14 ms on that stem)."""
    if o == 24 and out_block != 16:
        return 8, 3
    return (16, 3) if math.ceil(o / 48) * 48 < math.ceil(o / 32) * 32 else (16, 2)


DEPTHWISE_FEW_REGISTERS = 8
"""Pixels of a depthwise tile on a device of few registers (AVX2), where its float16 weights spill either
way: on an AVX2 Zen 3, 3x3 144ch 56^2 took 0.39 ms at 1x8 against 0.78 at the AVX-512 choice, 7x7 64ch
32^2 0.22 against 0.29 (bench/micro_gemm_conv.py, a schedule sweep)."""


def pixel_cap(ctx: Ctx) -> int:
    """The float16 accumulators (pixels x columns) a tile may hold: DeviceInfo.accumulators, 30 with
    AVX-512 (where the tile sizes below were tuned) and 6 with AVX2."""
    return ctx.device.accumulators(16)


def pick_vcols(geo: Geometry, cap: int = 30) -> int:
    """Columns of output channels a work-item: for dense convs of more than 16 channels dense_columns'
    (each broadcast input value feeds two or three FMAs: 0.6 loads an FMA instead of 1.1; 380-450 GFLOP/s
    against 200-370 on the light models' convs); for a grouped conv of 2..6 columns a group, all of them
    (the work-item computes its whole group: shufflenet's 68-channel groups, 5 columns, went from one load
    per FMA to 0.4), else one."""
    if cap < 12:  # too few registers for several columns of several pixels
        return 1
    if geo.g == 1:
        return dense_columns(geo.o, geo.out_block)[1] if geo.o > 16 else 1
    if geo.cg == 1 and geo.og == 1:  # depthwise
        return 1
    cols = group_columns(geo.og)[1]
    return cols if 2 <= cols <= 6 else 1


def planar_block(cg: int) -> int:
    """Input channels per block when the kernel reads NCHW planes in place: the largest divisor of the
    group's channels up to 24 (no block may reach into the next group or past the tensor)."""
    return max(d for d in range(1, min(cg, 24) + 1) if cg % d == 0)


def pick_unroll(cb: int, nc: int) -> int:
    """Input channels a trip of the channel loop: with several columns the loop stays rolled, 4 channels
    a trip (fully unrolled, LLVM hoists the broadcasts of later channels and spills them); one column:
    fully unrolled (0), its broadcasts fold into the FMAs as memory operands."""
    if nc == 1:
        return 0
    return next(u for u in (4, 2, 1) if cb % u == 0)


@dataclass(frozen=True)
class Upsample:
    """A nearest resize of H and W fused into the conv (passes/fuse.absorbable_resize): in0 is the resize's
    input [N, C, h, w]; row y of the conv's input is its row rows[y], column x its column cols[x]."""

    h: int
    w: int
    rows: tuple[int, ...]
    cols: tuple[int, ...]

    def tables(self) -> str:
        """The index tables as `__constant` arrays of the repack kernel."""
        return "".join(f"__constant int KERNEL_{name}[{len(t)}] = {{{', '.join(map(str, t))}}};\n"
                       for name, t in (("uy", self.rows), ("ux", self.cols)))

    def what(self, geo: Geometry) -> str:
        return (f"x [{geo.n}, {geo.c}, {self.h}, {self.w}] upsampled to [{geo.h}, {geo.w}] (nearest: "
                "pixel (y, x) is the source's (KERNEL_uy[y], KERNEL_ux[x]))")

    def row_start(self, geo: Geometry, source_row: str) -> str:
        """Offset in x of channel c0's source row `source_row` of image n."""
        return f"((long)(n * {geo.c} + c0) * {self.h} + {source_row}) * {self.w}"

    @property
    def period(self) -> int:
        """s when column x is source column x / s (s = 1, 2 or 4: whole source vectors widen to 16
        columns), else 0."""
        for s in (1, 2, 4):
            if all(c == x // s for x, c in enumerate(self.cols)):
                return s
        return 0


class Geometry:
    """Sizes of one conv2d, derived once."""

    def __init__(self, ctx: Ctx) -> None:
        x, w = ctx.operands[:2]
        y = ctx.results[0]
        self.n, self.c, self.h, self.w = x.dims
        self.o, self.cg, self.kh, self.kw = w.dims
        self.ho, self.wo = y.dims[2:]
        self.g = int(ctx.attr("groups"))
        self.og = self.o // self.g
        self.sh, self.sw = (int(v) for v in ctx.attr("strides"))
        self.pt, self.pl = (int(v) for v in ctx.attr("pads")[:2])
        self.dh, self.dw = (int(v) for v in ctx.attr("dilations"))
        self.pads = [int(v) for v in ctx.attr("pads")]
        self.in_block = self.out_block = 0  # NCHWc blocks of in0 / out0 (0: NCHW)
        self.up: Upsample | None = None  # in0 is the source of a fused nearest resize
        self.scale: InScale | None = None  # a fused per-channel factor of the input, folded into W

    def scale_of(self, channel: str) -> str:
        """The C expression of the fused input scale's factor for input channel `channel` (clamped: a
        padded channel's input is zero, any factor will do)."""
        assert self.scale is not None
        image = f"n * {self.c} + " if self.scale.per_image else ""
        return f"{self.scale.buf}[{image}min({channel}, {self.c - 1})]"

    @property
    def plane(self) -> int:
        """Elements of one channel plane of in0."""
        return self.up.h * self.up.w if self.up else self.h * self.w

    @property
    def cbn_in(self) -> int:
        """Channel blocks of a blocked in0."""
        return math.ceil(self.c / self.in_block)

    @property
    def obn(self) -> int:
        """Channel blocks of a blocked out0."""
        return math.ceil(self.o / self.out_block)

    def x_index(self, n: str, c: str, h: str, w: str) -> str:
        """Flat index of x[n, c, h, w] in in0's layout."""
        if not self.in_block:
            return f"(((long)({n}) * {self.c} + ({c})) * {self.h} + ({h})) * {self.w} + ({w})"
        b = self.in_block
        return (f"((((long)({n}) * {self.cbn_in} + ({c}) / {b}) * {self.h} + ({h})) * {self.w} + ({w})) * {b}"
                f" + ({c}) % {b}")

    def y_index(self, oc: str, y: int, x: int) -> str:
        """Flat index of y[n, oc, oh0 + y, ow0 + x] in out0's layout."""
        if not self.out_block:
            return f"(n * {self.o} + {oc}) * {self.ho * self.wo} + (oh0 + {y}) * {self.wo} + ow0 + {x}"
        b = self.out_block
        return (f"((n * {self.obn} + ({oc}) / {b}) * {self.ho} + oh0 + {y}) * {self.wo * b}"
                f" + (ow0 + {x}) * {b} + ({oc}) % {b}")

    def padded_input(self, th: int, tw: int) -> tuple[int, int]:
        """(Hp, Wp) of the repacked input: every row/column a padded tile of outputs reads."""
        hp = (math.ceil(self.ho / th) * th - 1) * self.sh + (self.kh - 1) * self.dh + 1
        wp = (math.ceil(self.wo / tw) * tw - 1) * self.sw + (self.kw - 1) * self.dw + 1
        return hp, wp


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
    chunk past a row's end over-reads the next row (harmless, not stored), except in the input's last
    row, which takes a scalar loop. Channels past the group's (a partial last block) are zeros."""
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
        whole = f"iw0 + 16 <= {geo.w} || ih + 1 < {geo.h}"  # an over-read inside x is harmless
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


def store_pixels(geo: Geometry, th: int, tw: int, width: int, accs: list[str], has_bias: bool,
                 epilogue: Epilogue | None, lane_limit: bool = False, oc: str = "oc0",
                 tag: str = "") -> list[str]:
    """Store accumulator i (pixel (i // tw, i % tw) of the tile, lanes = output channels `oc`..) to out0,
    NCHW or blocked (geo.out_block). `lane_limit`: a grouped column whose valid lanes are `lim`; `tag`
    makes the index names unique when several columns are stored in one scope."""
    lines = []
    ctail = geo.o % width != 0
    # blocked output, lanes consecutive in memory: one vector store a pixel; with a channel tail (72
    # channels in blocks of 16) the columns that are whole still store a vector, the last one lane by lane
    vector = bool(geo.out_block) and width > 1 and geo.out_block % width == 0 and not lane_limit
    for i, acc in enumerate(accs):
        y, x = divmod(i, tw)
        conds = []
        if geo.ho % th:
            conds.append(f"oh0 + {y} < {geo.ho}")
        if geo.wo % tw:
            conds.append(f"ow0 + {x} < {geo.wo}")
        ind = "    "
        if conds:
            lines.append(f"    if ({' && '.join(conds)}) {{")
            ind = "        "
        yi = f"y{i}{tag}"
        lines.append(f"{ind}const int {yi} = {geo.y_index(oc, y, x)};")
        if vector:
            v = acc + (f" + vload{width}(0, in2 + {oc})" if has_bias else "")
            v = epilogue(f"({v})", yi, width) if epilogue else v
            if ctail:
                lines.append(f"{ind}if ({oc} + {width} <= {geo.o}) {{ vstore{width}({v}, 0, Y + {yi}); }}")
                lines.append(f"{ind}else {{")
            else:
                lines.append(f"{ind}vstore{width}({v}, 0, Y + {yi});")
        for j in range(width if not vector or ctail else 0):
            v = lane(acc, j, width) + (f" + in2[{oc} + {j}]" if has_bias else "")
            if not geo.out_block:
                idx = f"{yi} + {j * geo.ho * geo.wo}"
            elif geo.out_block % width == 0 and not lane_limit:
                idx = f"{yi} + {j}"
            else:
                idx = f"{yi}j{j}"
                lines.append(f"{ind}const int {idx} = {geo.y_index(f'{oc} + {j}', y, x)};")
            if epilogue:
                v = epilogue(v, idx, 1)
            store = f"Y[{idx}] = {v};"
            if lane_limit and j:
                lines.append(f"{ind}if ({j} < lim) {store}")
            elif vector and ctail and j:  # the last column's padding lanes: zeros, written here
                lines.append(f"{ind}if ({oc} + {j} < {geo.o}) {store} else Y[{idx}] = 0.0f;")
            else:
                lines.append(f"{ind}if ({oc} + {j} < {geo.o}) {store}" if ctail and j else f"{ind}{store}")
        if vector and ctail:
            lines.append(f"{ind}}}")
        if conds:
            lines.append("    }")
    return lines


def tile_ids(geo: Geometry, th: int, tw: int, cols_first: bool, blocks: int) -> list[str]:
    """The kernel's first lines: this work-item's tile `t`, column `ob` (of `blocks`), image `n` and tile
    origin; work-items past the last tile or column (global dimension 0 is rounded up to the work-group
    size) return."""
    t, ob = ("get_global_id(0)", "get_global_id(1)")[::-1 if cols_first else 1]
    bound = f"ob >= {blocks}" if cols_first else f"t >= {math.ceil(geo.ho / th) * math.ceil(geo.wo / tw)}"
    return [
        f"    const int t = {t};  // output tile",
        f"    const int ob = {ob};  // output channel column",
        "    const int n = get_global_id(2);",
        f"    if ({bound}) return;",
        f"    const int oh0 = t / {math.ceil(geo.wo / tw)} * {th};",
        f"    const int ow0 = t % {math.ceil(geo.wo / tw)} * {tw};",
    ]


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
    lines += [f"    const {vt} w{t} = {'wp[' + str(t) + ']' if width == 1 else f'vload{width}({t}, wp)'}"
              f"{factor};" for t in range(taps)]
    accs = [f"acc{i}" for i in range(th * tw)]
    lines.append(f"    {vt} {', '.join(f'{a} = 0.0f' for a in accs)};")
    # group the (pixel, tap) pairs by the input vector they read
    reads: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for i in range(th * tw):
        y, x = divmod(i, tw)
        for kh in range(geo.kh):
            for kw in range(geo.kw):
                at = (y * geo.sh + kh * geo.dh, x * geo.sw + kw * geo.dw)
                reads.setdefault(at, []).append((i, kh * geo.kw + kw))
    for (row, col), uses in sorted(reads.items()):
        lines.append("    {")
        lines.append(f"        const {vt} v = {load((row * wp + col) * width)};")
        lines += [f"        acc{i} = fma(v, w{t}, acc{i});" for i, t in uses]
        lines.append("    }")
    lines += store_pixels(geo, th, tw, width, accs, has_bias, epilogue)
    lines.append("}")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class InScale:
    """A per-channel factor of the conv's input (a fused squeeze-excitation scale, x * s with s of
    [N or 1, C, 1, 1]) that the kernel folds into its weights as it loads them: conv(x * s) is conv(x)
    with W[:, c] * s[c]. `buf` names the factor's buffer; `per_image`: one factor set per image."""

    buf: str
    per_image: bool


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


def band_for(geo: Geometry, th: int, tw: int, hp: int, blocks: int, workers: int, rows: int = 0) -> Band:
    """Tile rows a work-group: all of them when the (image, channel block) pairs give the device's
    `workers` enough work-groups (4 each), else bands of at least twice the halo, so a 16-channel conv on
    a large plane (mobilenet_v2's first depthwise: one block of 80x80) runs on every core. `rows` (a
    schedule's band_rows, in tile rows) overrides."""
    trows, tcols = math.ceil(geo.ho / th), math.ceil(geo.wo / tw)
    band = trows
    if blocks * geo.n < 4 * workers:
        halo = max(1, math.ceil((geo.kh - 1) * geo.dh / (th * geo.sh)))
        want = math.ceil(4 * workers / (blocks * geo.n))
        band = max(min(trows, 2 * halo), math.ceil(trows / want))
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


def tile_override(ctx: Ctx, geo: Geometry, exact: bool = False, nc: int = 1) -> tuple[int, int]:
    """The schedule's tile, else pick_tile's (for `nc` columns a work-item); `exact`: prefer a tile
    dividing the output (no over-read, so a blocked input can be read in place) when one exists."""
    window = (geo.kh, geo.kw, geo.sh, geo.sw)
    depthwise = geo.g > 1 and geo.cg == 1 and geo.og == 1
    cap = pixel_cap(ctx)
    if geo.g > 1 and not depthwise and nc == 1:
        # a grouped conv's column is as wide as its group allows: 8 lanes (136 channels a group) are one
        # AVX2 register, so its tile may hold 14 pixels instead of 6 (shufflenet's 544-channel 1x1 convs:
        # 55 -> 90 GFLOP/s); the same 30 with AVX-512
        cap = ctx.device.accumulators(group_columns(geo.og)[0])
    if depthwise:  # its KH*KW weight vectors fill the registers anyway: a tile of its own size
        cap = 30 if cap >= 12 else DEPTHWISE_FEW_REGISTERS
    th, tw = pick_tile(geo.ho, geo.wo, 24 // nc, nc=nc, window=window, cap=cap)
    if exact and (geo.ho % th or geo.wo % tw):
        eh, ew = pick_tile(geo.ho, geo.wo, 24 // nc, exact=True, nc=nc, window=window, cap=cap)
        th, tw = (eh, ew) if eh else (th, tw)
    th, tw = int(ctx.schedule.get("tile_h", th)), int(ctx.schedule.get("tile_w", tw))
    if th < 1 or tw < 1 or th * tw > 32:
        raise NotLowerable(f"'conv2d' schedule tile {th}x{tw} must be positive with at most 32 pixels")
    return th, tw


@template("conv2d")
def conv2d(ctx: Ctx) -> Lowered:
    return lower_conv2d(ctx)


def lower_conv2d(ctx: Ctx, epilogue: Epilogue | None = None, *, in_block: int = 0,
                 out_block: int = 0, channel_map: str | None = None,
                 upsample: Upsample | None = None, in_scale: InScale | None = None,
                 expand: Expand | None = None) -> Lowered:
    """`in_block`/`out_block` b > 0: in0 / out0 holds the NCHWc layout (pack inner_dims_pos=[1],
    inner_tiles=[b], channels zero-padded to a multiple of b) while ctx.sig describes the NCHW op; the
    epilogue's index is then the flat index in the blocked out0. `upsample`: in0 is the input of a fused
    nearest resize (ctx.sig's operand 0 its result), read through its tables by the input repack, which
    every conv then takes (no in-place or local-memory read). `in_scale`: in0 times a per-channel factor
    (a fused squeeze-excitation scale), folded into the weights as they are loaded. `expand`: in0 is the
    input of a fused 1x1 expansion (ctx.sig's operand 0 its result, in 16-channel blocks: in_block 16)
    that a depthwise conv's local-memory fill computes."""
    check_float32("conv2d", *ctx.operands, *ctx.results)
    for b in (in_block, out_block):
        if b and b not in (2, 4, 8, 16):
            raise NotLowerable(f"'conv2d' channel block {b}: blocked layouts of 2, 4, 8 or 16 channels only")
    if upsample and in_block:
        raise NotLowerable("a fused resize reads an NCHW input")
    geo = Geometry(ctx)
    geo.in_block, geo.out_block, geo.up, geo.scale = in_block, out_block, upsample, in_scale
    if winograd_fits(ctx, geo, fused=bool(upsample or in_scale or expand or channel_map)):
        return lower_winograd(ctx, geo, epilogue)  # 3x3 stride 1: 16 multiplications a tile, not 36
    has_bias = len(ctx.operands) > 2
    nc = int(ctx.schedule.get("vcols", pick_vcols(geo, pixel_cap(ctx))))
    asked = int(ctx.schedule.get("tile_h", 1)) * int(ctx.schedule.get("tile_w", 1))
    if "vcols" not in ctx.schedule and asked * nc > 32:
        nc = 1  # a tile too large for two columns of accumulators
    # with no pads, a tile dividing the output lets the kernel read its input in place: a blocked one, or
    # an NCHW one plane by plane (an RGB stem, shufflenet's grouped 1x1 convs)
    depthwise = geo.g > 1 and geo.cg == 1 and geo.og == 1
    if channel_map and not (depthwise and not in_block):
        raise NotLowerable("only a depthwise conv reading NCHW takes a channel map (a fused channel shuffle)")
    direct = not any(geo.pads) and (geo.g == 1 or depthwise if in_block else not depthwise) and not upsample
    th, tw = tile_override(ctx, geo, exact=direct, nc=max(nc, 1))
    if nc > 1 and direct and (geo.ho % th or geo.wo % tw) and "vcols" not in ctx.schedule:
        # tiles would over-read an unpadded input that could be read in place: whole-group tiles give way
        # to one column, three dense columns (at most 9 pixels) to two (up to 14: 13x13 images)
        nc = 1 if geo.g > 1 else min(nc, 2)
        th, tw = tile_override(ctx, geo, exact=direct, nc=nc)
    whole_group = geo.g > 1 and not depthwise and nc > 1  # a work-item computes all columns of its group
    if nc < 1 or nc * th * tw > 32 or (whole_group and nc != group_columns(geo.og)[1]) or (
            nc > 1 and depthwise):
        raise NotLowerable(f"'conv2d' schedule vcols={nc}: 1 or more columns a work-item, at most 32 "
                           f"accumulators ({th}x{tw} tile), several only for dense convs or all of a "
                           f"group's")
    hp, wp = geo.padded_input(th, tw)
    tiles = math.ceil(geo.ho / th) * math.ceil(geo.wo / tw)
    # read a blocked in0 in place when its blocks are the kernel's and no pads or tile over-read are needed
    in_place = bool(in_block) and not any(geo.pads) and hp <= geo.h and wp <= geo.w
    cols_first = bool(ctx.schedule.get("cols_first", False))
    if depthwise:
        default = in_block or out_block or pick_cols(geo.c)
        width = int(ctx.schedule.get("cols", default))
        if width not in (1, 2, 4, 8, 16):
            raise NotLowerable(f"'conv2d' schedule cols={width} must be 1, 2, 4, 8 or 16")
        pack = {1: PackSpec((0,), (width,))}
        in_place = in_place and width == in_block and not expand
        if in_place:
            hp, wp = geo.h, geo.w
        # an NCHW input repacked by the conv's own work-groups (a work-item per tile) into local memory
        band = band_for(geo, th, tw, hp, math.ceil(geo.c / width), ctx.device.compute_units,
                        int(ctx.schedule.get("band_rows", 0)))
        local_repack = (bool(int(ctx.schedule.get("local_repack", 1))) and in_block in (0, 16)
                        and not in_place and width == 16 and not upsample
                        and not cols_first and "local" not in ctx.schedule
                        and band.items <= ctx.device.max_work_group_size
                        and 4 * band.plane * wp * 16 <= ctx.device.local_mem_size // 2)
        if expand and not (local_repack and in_block == 16 and geo.c % 16 == 0):
            raise NotLowerable("a fused expansion needs the local-memory depthwise kernel, 16-channel blocks")
        if expand:
            src = depthwise_expand_source(geo, th, tw, band, wp, has_bias, epilogue, expand,
                                          serial=ctx.device.is_cpu)
        elif local_repack and in_block:
            src = depthwise_local_blocked_source(geo, th, tw, band, wp, has_bias, epilogue)
        elif local_repack:
            src = depthwise_local_source(geo, th, tw, band, wp, has_bias, epilogue, channel_map)
        else:
            if in_block:
                first = repack_blocked(geo, 1, geo.c, width, hp, wp)
            else:
                first = repack_input(geo, 1, geo.c, width, hp, wp, channel_map)
            scratch = 4 * geo.n * math.ceil(geo.c / width) * width * hp * wp
            src = depthwise_source(geo, width, th, tw, hp, wp, has_bias, epilogue, cols_first)
        blocks, cb = math.ceil(geo.c / width), width
    else:
        # a column of output channels stays inside one group: when the group size has no wide power-of-2
        # divisor (34 channels), each group's channels are padded to whole 8- or 16-wide columns instead
        cpg = 0
        width = pick_cols(geo.o) if geo.g == 1 else math.gcd(geo.og, 16)
        if geo.g == 1 and geo.o > 16 and nc == dense_columns(geo.o)[1] and not geo.out_block:
            width = dense_columns(geo.o)[0]  # 8-wide columns (24 channels) only for an NCHW output
        if geo.g > 1 and (whole_group or width < 8 and geo.og >= 8) and "cols" not in ctx.schedule:
            width, cpg = group_columns(geo.og)
        width = int(ctx.schedule.get("cols", width))
        if width not in (1, 2, 4, 8, 16) or (geo.g > 1 and not cpg and geo.og % width):
            raise NotLowerable(f"'conv2d' schedule cols={width} must be 1, 2, 4, 8 or 16 and divide the "
                               f"{geo.og} output channels of a group")
        planar = direct and not in_block and hp <= geo.h and wp <= geo.w
        planar = planar and planar_block(geo.cg) >= min(geo.cg, 4)
        default = planar_block(geo.cg) if planar else pick_block(geo.cg)
        default = in_block if in_block and geo.g == 1 else default
        cb = int(ctx.schedule.get("cin_block", default))
        planar = planar and geo.cg % cb == 0  # a block never reads past its group's channels
        if cpg:  # per group: [G, cpg / nc, C/G/cb, KH, KW, cb, width * nc], padded channels zero
            pack = {1: PackSpec((2, 1), (cb, width * nc), reshape=(geo.g, geo.og, geo.cg, geo.kh, geo.kw))}
        else:
            pack = {1: PackSpec((1, 0), (cb, width * nc))}
        in_place = in_place and geo.g == 1 and cb == in_block
        if in_place or planar:
            hp, wp, in_place = geo.h, geo.w, True
        first = (repack_blocked if in_block else repack_input)(geo, geo.g, geo.cg, cb, hp, wp)
        scratch = 4 * geo.n * geo.g * math.ceil(geo.cg / cb) * cb * hp * wp
        unroll = int(ctx.schedule.get("unroll", pick_unroll(cb, nc)))
        if unroll < 0 or (unroll and cb % unroll):
            raise NotLowerable(f"'conv2d' schedule unroll={unroll} must divide the {cb} channels of a block")
        src = dense_source(geo, cb, width, th, tw, hp, wp, has_bias, epilogue, cpg, nc, cols_first, unroll,
                           planar)
        local_repack = False
        blocks = geo.g * (cpg // nc) if cpg else math.ceil(geo.o / (width * nc))
    along = blocks if cols_first else tiles  # work-items along global dimension 0
    local = band.items if local_repack else int(ctx.schedule.get("local", 4))
    if "local" not in ctx.schedule and not local_repack:
        while local > 1 and math.ceil(along / local) * (tiles * blocks // along) * geo.n < 16:
            local //= 2
    if local < 1:
        raise NotLowerable(f"'conv2d' schedule local={local} must be positive")
    x = "in0" if in_place or local_repack else "tmp0"
    args = (x, "in1", "in2", "out0") if has_bias else (x, "in1", "out0")
    grid = (math.ceil(along / local) * local, tiles * blocks // along, geo.n)
    main = Kernel(src, grid, (local, 1, 1), args)
    kernels = [main] if in_place or local_repack else [first, main]
    if out_block and geo.o % out_block and not (width == out_block and (nc == 1 or depthwise or not cpg)):
        # else store_pixels writes the padding lanes' zeros itself: a column is a block, and the columns
        # of a dense conv past its last block are skipped
        kernels.append(zero_channel_tail(geo))
    schedule: dict[str, int | bool] = {"tile_h": th, "tile_w": tw, "cols": width}
    if not depthwise:
        schedule["cin_block"] = cb
    if nc > 1:
        schedule["vcols"] = nc
    if cols_first:
        schedule["cols_first"] = True
    if not depthwise and 0 < unroll < cb:
        schedule["unroll"] = unroll
    if local_repack:
        schedule["local_repack"] = 1
        schedule["band_rows"] = band.rows // th
    if upsample:
        schedule["upsample"] = 1  # the repack reads through a fused nearest resize
    if expand:
        schedule["expand"] = 1  # the fill computes the input from a narrower x
    if in_block or out_block or in_place:  # in place: the input read with no repack
        schedule.update(in_block=in_block, out_block=out_block, in_place=in_place)
    if "local" in ctx.schedule:
        schedule["local"] = local
    return Lowered(kernels, [] if in_place or local_repack else [scratch], pack, schedule)


# the schedule space (space.py): what tessel-tune may try ------------------------------------------------
def _default_local(low: Lowered) -> int:
    """The work-group size of the main kernel (the last)."""
    k = low.kernels[-1]
    return int(k.local_size[0]) if k.local_size else 1


TILE_SIDES = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16)


@space("conv2d")
def conv2d_space(ctx: Ctx, default: Lowered) -> Space | None:
    """Winograd convs: the tile (F(2x2) or F(4x4)) and the GEMM's rows, or the direct kernel instead.
    Direct dense convs: the output tile (tile_h x tile_w pixels), the columns a work-item (vcols, dense
    convs only) and their width (cols), the input channels a block (cin_block); the accumulators
    (pixels x columns x lanes) must fit the registers. Depthwise convs: the tile, and whether the input is
    repacked in local memory. A direct 3x3 stride-1 conv Winograd could take also tries Winograd."""
    from .winograd import (
        TRANSFORMS,
        WINOGRAD_SCRATCH,
        pick_gemm_rows,
        scratch_bytes,
        tile_count,
        winograd_legal,
    )

    geo = Geometry(ctx)
    chosen = default.schedule
    fused = any(chosen.get(k) for k in ("upsample", "expand")) or ctx.op_name != "conv2d"
    if chosen.get("winograd"):
        def fits(p: Point) -> bool:
            rows = int(p["rows"])
            return sum(scratch_bytes(geo, int(p["tile"]), rows)) <= WINOGRAD_SCRATCH

        return Space("conv2d/1", [
            Knob("tile", tuple(sorted(TRANSFORMS)), "Winograd F(m x m, 3x3): output tile side m"),
            Knob("rows", around(int(chosen["rows"]), 1, 32, (4, 6, 8, 10, 12, 14, 16)),
                 "tiles a work-item of the batched GEMM"),
        ], {"tile": chosen["tile"], "rows": chosen["rows"]},
            [Constraint(f"Winograd scratch at most {WINOGRAD_SCRATCH >> 20} MiB", fits)],
            extra=[{"winograd": 0}])
    if "tile_h" not in chosen:
        return None  # an empty result, or a kernel with no tile
    th, tw = int(chosen["tile_h"]), int(chosen["tile_w"])
    depthwise = geo.g > 1 and geo.cg == 1 and geo.og == 1
    sides_h = around(th, 1, max(geo.ho, 1), TILE_SIDES)
    sides_w = around(tw, 1, max(geo.wo, 1), TILE_SIDES)
    extra: list[Point] = []
    if (not depthwise and not fused and ctx.is_constant(1) and ctx.device.is_cpu
            and not winograd_legal(ctx, geo, False) and not chosen.get("in_block")):
        m = 4 if tile_count(geo, 4) >= 32 else 2
        if sum(scratch_bytes(geo, m, pick_gemm_rows(ctx, tile_count(geo, m)))) <= WINOGRAD_SCRATCH:
            extra.append({"winograd": 1})
    if depthwise:
        knobs = [Knob("tile_h", sides_h), Knob("tile_w", sides_w)]
        point = {"tile_h": th, "tile_w": tw}
        cap = 30 if pixel_cap(ctx) >= 12 else DEPTHWISE_FEW_REGISTERS
        return Space("conv2d/1", knobs, point,
                     [Constraint(f"at most {cap} pixels a tile", lambda p: p["tile_h"] * p["tile_w"] <= cap)],
                     extra)
    nc = int(chosen.get("vcols", 1))
    cols, cb = int(chosen["cols"]), int(chosen.get("cin_block", 1))
    grouped = geo.g > 1
    knobs = [Knob("tile_h", sides_h, "output rows a tile"), Knob("tile_w", sides_w, "output columns a tile")]
    point: Point = {"tile_h": th, "tile_w": tw}
    if not grouped:
        knobs.append(Knob("vcols", (1, 2, 3), "columns of output channels a work-item"))
        knobs.append(Knob("cols", tuple(c for c in (8, 16) if c <= max(16, cols)), "lanes a column"))
        point.update(vcols=nc, cols=cols)
    if not chosen.get("in_block"):
        blocks = {b for b in (4, 8, 16) if b <= geo.cg} | {cb}
        knobs.append(Knob("cin_block", tuple(sorted(blocks)), "input channels a block"))
        point["cin_block"] = cb
    knobs.append(Knob("local", (1, 2, 4, 8), "work-items a work-group"))
    point["local"] = _default_local(default)
    o = geo.o

    def registers(p: Point) -> bool:
        lanes = int(p.get("cols", cols))
        return p["tile_h"] * p["tile_w"] * int(p.get("vcols", nc)) <= min(32, ctx.device.accumulators(lanes))

    def no_idle_columns(p: Point) -> bool:  # a work-item's columns should not be mostly padding
        span = int(p.get("cols", cols)) * int(p.get("vcols", nc))
        return grouped or math.ceil(o / span) * span < 2 * o

    def enough_items(p: Point) -> bool:  # every core gets work-items
        tiles = math.ceil(geo.ho / p["tile_h"]) * math.ceil(geo.wo / p["tile_w"])
        span = int(p.get("cols", cols)) * int(p.get("vcols", nc))
        return tiles * math.ceil(o / span) * geo.n >= 2 * ctx.device.compute_units

    return Space("conv2d/1", knobs, point, [
        Constraint("tile pixels x columns within the accumulator registers", registers),
        Constraint("columns a work-item under twice the output channels", no_idle_columns),
        Constraint("two work-items a compute unit at least", enough_items),
    ], extra)
