"""conv2d's sizes and tiling choices (conv.py's template): `Geometry`, the pick_* heuristics and the
schedule's tile, the fused-input descriptors `Upsample` and `InScale`, and the output side every direct
kernel shares (its tile ids, storing a tile to NCHW or NCHWc).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .base import Ctx, NotLowerable
from .gemm import AcrossChannels, Epilogue

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
    hi = max(1, min(hi, cap // nc))  # one pixel at least, even past the registers
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
    ones computed 48 channels, and the zeroing kernel: 0.29 -> 0.14 ms on that stem).

    Not yet a rule from the device: on the AMD EPYC (Zen 4) VM, NCHW outputs, ms for (8, 3) / (16, 2) /
    (16, 3) columns: 3x3/2 3->24 224^2 0.140 / 0.239 / 0.232; 1x1 32->24 56^2 0.059 / 0.051 / 0.064; 3x3
    16->24 112^2 0.452 / 0.524 / 0.433; 1x1 24->72 56^2 0.075 / 0.120 / 0.106; 1x1 64->72 28^2 0.075 /
    0.071 / 0.056; 1x1 40->20 28^2 0.018 / 0.025 / 0.033. Narrow columns win on short reductions (24-40
    channel-taps) and lose on long ones, which neither padded lanes nor vector instructions explain alone;
    the tuner's conv space has `cols` and `vcols` and finds these."""
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
    """A nearest resize of H and W fused into the conv (passes/fuse_inputs.absorbable_resize): in0 is the
    resize's input [N, C, h, w]; row y of the conv's input is its row rows[y], column x its column cols[x]."""

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


@dataclass(frozen=True)
class InScale:
    """A per-channel factor of the conv's input (a fused squeeze-excitation scale, x * s with s of
    [N or 1, C, 1, 1]) that the kernel folds into its weights as it loads them: conv(x * s) is conv(x)
    with W[:, c] * s[c]. `buf` names the factor's buffer; `per_image`: one factor set per image."""

    buf: str
    per_image: bool


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
    # NCHW with a chain that can run on a pixel's channel vector (lanes a plane apart): once a pixel
    across = (epilogue.across if isinstance(epilogue, AcrossChannels) and not geo.out_block and width > 1
              and not lane_limit and not ctail else None)
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
                lines += tail_column(geo, acc, width, has_bias, epilogue, oc, yi, ind)
            else:
                lines.append(f"{ind}vstore{width}({v}, 0, Y + {yi});")
        if across is not None:
            v = acc + (f" + vload{width}(0, in2 + {oc})" if has_bias else "")
            lines.append(f"{ind}const float{width} r{i}{tag} = {across(f'({v})', yi, width)};")
            lines += [f"{ind}Y[{yi} + {j * geo.ho * geo.wo}] = {lane(f'r{i}{tag}', j, width)};"
                      for j in range(width)]
        for j in range(width if not vector and across is None else 0):
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
            else:
                lines.append(f"{ind}if ({oc} + {j} < {geo.o}) {store}" if ctail and j else f"{ind}{store}")
        if conds:
            lines.append("    }")
    return lines


def tail_column(geo: Geometry, acc: str, width: int, has_bias: bool, epilogue: Epilogue | None, oc: str,
                yi: str, ind: str) -> list[str]:
    """The `else` of a blocked output's vector store: the last channel column (72 channels in blocks of
    16), stored lane by lane in a loop, the lanes past the last channel written as zeros (the block's
    padding). A loop, not 16 stores a pixel: a classifier's 1000 channels in a 13x2-accumulator tile made
    416 guarded stores, a quarter of its program's source and 2 of the 9 s PoCL took to compile it."""
    bias = f" + in2[{oc} + j]" if has_bias else ""
    idx = f"{yi} + j"
    v = epilogue(f"(t_[j]{bias})", idx, 1) if epilogue else f"t_[j]{bias}"
    return [f"{ind}else {{  // the last column: lanes past channel {geo.o} are the block's padding",
            f"{ind}    float t_[{width}];",
            f"{ind}    vstore{width}({acc}, 0, t_);",
            f"{ind}    for (int j = 0; j < {width}; ++j) Y[{idx}] = {oc} + j < {geo.o} ? {v} : 0.0f;",
            f"{ind}}}"]


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
