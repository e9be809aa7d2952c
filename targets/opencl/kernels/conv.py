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

The template's pieces: conv_geometry.py (sizes, tiles, the pick_* heuristics, storing a tile),
conv_repack.py (the input repacks), conv_dense.py and conv_depthwise.py (the direct kernels),
winograd.py (3x3 stride-1 convs by Winograd transforms) and conv_pointwise.py (1x1 stride-1 convs on NCHW
in and out as GEMMs over the pixels); this module holds the template, `lower_conv2d`
(the choice among them) and the schedule space.
"""

from __future__ import annotations

import math

from ..space import Constraint, Knob, Point, Space, around, space
from .base import Ctx, Kernel, Lowered, NotLowerable, PackSpec, template
from .conv_dense import dense_source
from .conv_depthwise import (
    Expand,
    band_for,
    depthwise_expand_source,
    depthwise_local_blocked_source,
    depthwise_local_source,
    depthwise_source,
)
from .conv_geometry import (
    DEPTHWISE_FEW_REGISTERS,
    Geometry,
    InScale,
    Upsample,
    dense_columns,
    group_columns,
    pick_block,
    pick_unroll,
    pick_vcols,
    pixel_cap,
    planar_block,
    tile_override,
)
from .conv_pointwise import lower_pointwise, pointwise_fits, pointwise_legal
from .conv_repack import repack_blocked, repack_input, zero_channel_tail
from .gemm import Epilogue, check_float32, pick_cols
from .winograd import lower_winograd, winograd_fits


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
    if pointwise_fits(ctx, geo, fused=bool(expand or channel_map)):
        return lower_pointwise(ctx, geo, epilogue)  # 1x1 on NCHW: a GEMM over pixel vectors
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
                        int(ctx.schedule.get("band_rows", 0)), 4 * wp * 16, ctx.device.local_mem_size // 2)
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
    Pointwise convs (a GEMM over pixels): the output channels and pixel vectors a work-item, the work-group
    size, or the direct kernel instead.
    Direct dense convs: the output tile (tile_h x tile_w pixels), the columns a work-item (vcols, dense
    convs only) and their width (cols), the input channels a block (cin_block); the accumulators
    (pixels x columns x lanes) must fit the registers (DeviceInfo.accumulators_to_try). Depthwise convs:
    the tile, and, where the default repacks its input band in local memory without a fused expansion,
    whether it does (local_repack). A direct 3x3 stride-1 conv Winograd could take also tries Winograd."""
    from .winograd import (
        TRANSFORMS,
        WINOGRAD_SCRATCH,
        pick_gemm_rows,
        pick_tile,
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

        def registers(p: Point) -> bool:
            v = int(p["vcols"])
            return v == 1 or int(p["rows"]) * v <= ctx.device.accumulators_to_try(16, v)

        return Space("conv2d/1", [
            Knob("tile", tuple(sorted(TRANSFORMS)), "Winograd F(m x m, 3x3): output tile side m"),
            Knob("rows", around(int(chosen["rows"]), 1, 32, (4, 6, 8, 10, 12, 14, 16)),
                 "tiles a work-item of the batched GEMM"),
            Knob("vcols", (1, 2), "16-channel column vectors a work-item of the batched GEMM"),
        ], {"tile": chosen["tile"], "rows": chosen["rows"], "vcols": chosen.get("vcols", 1)},
            [Constraint(f"Winograd scratch at most {WINOGRAD_SCRATCH >> 20} MiB", fits),
             Constraint("two columns of rows accumulators within the registers", registers)],
            extra=[{"winograd": 0}])
    if chosen.get("pointwise"):
        return Space("conv2d/1", [
            Knob("rows", around(int(chosen["rows"]), 1, min(32, geo.og), (2, 4, 6, 7, 8, 10, 12, 14, 16)),
                 "output channels a work-item"),
            Knob("vcols", (1, 2, 3, 4), "16-pixel vectors a work-item"),
            Knob("local", (1, 2, 4, 8), "work-items a work-group"),
        ], {"rows": chosen["rows"], "vcols": chosen["vcols"], "local": _default_local(default)},
            [Constraint("rows x vcols accumulators within the registers",
                        lambda p: p["rows"] * p["vcols"] <= ctx.device.accumulators_to_try(16, p["vcols"]))],
            extra=[{"pointwise": 0}])
    if "tile_h" not in chosen:
        return None  # an empty result, or a kernel with no tile
    th, tw = int(chosen["tile_h"]), int(chosen["tile_w"])
    depthwise = geo.g > 1 and geo.cg == 1 and geo.og == 1
    sides_h = around(th, 1, max(geo.ho, 1), TILE_SIDES)
    sides_w = around(tw, 1, max(geo.wo, 1), TILE_SIDES)
    extra: list[Point] = []
    if (not depthwise and not fused and ctx.is_constant(1) and ctx.device.is_cpu
            and not winograd_legal(ctx, geo, False) and not chosen.get("in_block")):
        m = pick_tile(ctx, geo)  # the tile Winograd's own default picks
        if sum(scratch_bytes(geo, m, pick_gemm_rows(ctx, tile_count(geo, m)))) <= WINOGRAD_SCRATCH:
            extra.append({"winograd": 1})
    if not depthwise and not fused and not chosen.get("in_block") and not chosen.get("out_block") and (
            not pointwise_legal(geo)):
        extra.append({"pointwise": 1})  # a direct kernel kept by a record's keys: the pixel GEMM too
    if depthwise:
        knobs = [Knob("tile_h", sides_h), Knob("tile_w", sides_w)]
        point = {"tile_h": th, "tile_w": tw}
        if chosen.get("local_repack") and not chosen.get("expand"):
            # the input band repacked in local memory by the conv's own work-groups, or by a launch of its
            # own into scratch: which is faster depends on the device (PoCL on Zen 4: the separate repack
            # on 144 channels 48x48, 0.14 against 0.22 ms; Intel's CPU runtime: local, 0.14 against 0.18)
            knobs.append(Knob("local_repack", (0, 1), "the input band repacked in local memory"))
            point["local_repack"] = 1
        cap = 30 if ctx.device.accumulators_to_try(16) >= 12 else DEPTHWISE_FEW_REGISTERS
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
        pixels = p["tile_h"] * p["tile_w"] * int(p.get("vcols", nc))
        return pixels <= min(32, ctx.device.accumulators_to_try(lanes))

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
