"""The integer conv with 16 output channels in the lanes and input channels taken in pairs: each step one
16-bit multiply-add of pairs (x86's `vpmaddwd`: 32 products summed in adjacent pairs into 16 i32 lanes,
where the plain kernel of qlinear.py multiplies 16 i32 lanes with `vpmulld`, two uops for half the
products).

A first kernel writes x - x_zero_point as shorts with each pair of a group's channels interleaved, [N, G,
ceil(Cg / 2), Hp, Wp, 2] (padded and phase-split as qlinear's repack: a tap's inputs for consecutive output
columns are consecutive), the odd group's last channel paired with a zero. The weights are packed at load
time [G, ceil(og / 16), ceil(Cg / 2), KH, KW, 16, 2]: each tap's 16 lanes x 2 channels are 32 consecutive
bytes, widened to shorts with the weight zero point subtracted. Per channel pair and tap a work-item loads
them once and, for each of its `px` output columns, broadcasts the column's input pair (one 32-bit load)
and multiply-adds it into the column's accumulator.

LLVM 15 (PoCL 3.1) forms `vpmaddwd` from none of the plain OpenCL C forms of the pair product (even / odd
swizzles of loaded or broadcast vectors gave `vpmulld`), so where the device compiler targets AVX-512BW
(or AVX2) the step is clang's `__builtin_ia32_pmaddwd512` (`pmaddwd256` on two halves) on 32-short vectors
(`ext_vector_type`), chosen by the compiler's own `__AVX512BW__` / `__AVX2__` macros; elsewhere (another
OpenCL compiler, a GPU) the same sums in plain int arithmetic. Both are exact: |x - xz| <= 255 and
|w - wz| <= 255, so each pair sum is below 2^17.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .base import Ctx, Kernel, Lowered, NotLowerable, PackSpec, ctype
from .gemm import Epilogue

PREAMBLE = """typedef short KERNEL_short32 __attribute__((ext_vector_type(32)));
typedef short KERNEL_short16x __attribute__((ext_vector_type(16)));
// acc + the 16 sums w[2l] * x.s0 + w[2l + 1] * x.s1 (x a short pair as an int, w the lanes' pairs)
static inline int16 KERNEL_pair_madd(int16 acc, int x, KERNEL_short32 w) {
#if defined(__AVX512BW__)
    const KERNEL_short32 xs = __builtin_astype((int16)(x), KERNEL_short32);
    return acc + __builtin_astype(__builtin_ia32_pmaddwd512(xs, w), int16);
#elif defined(__AVX2__)
    const KERNEL_short16x xs = __builtin_astype((int8)(x), KERNEL_short16x);
    const int8 lo = __builtin_astype(__builtin_ia32_pmaddwd256(xs, w.lo), int8);
    const int8 hi = __builtin_astype(__builtin_ia32_pmaddwd256(xs, w.hi), int8);
    return acc + (int16)(lo, hi);
#else
    const int x0 = (short)(x & 0xffff), x1 = x >> 16;
    return acc + convert_int16(w.even) * x0 + convert_int16(w.odd) * x1;
#endif
}
"""


def repack_pairs(ctx: Ctx, g: Any, groups: int, cp: int) -> Kernel:
    """x - x_zero_point as shorts, channel pairs of each group interleaved, padded and phase-split (`g`:
    qlinear's Geo)."""
    xt = ctype(ctx.operands[0])
    cg = g.c // groups
    shape = f"[{g.n}][{groups}][{cp}][{g.hp}][{g.wp}][2]"
    src = f"""// {ctx.op_name} input: x - x_zero_point as shorts, channel pairs interleaved: {shape},
// {g.sw} phases a row
__kernel void KERNEL(__global const {xt}* restrict in0, __global const {xt}* restrict in2,
                     __global short* restrict tmp0) {{
    const int yp = get_global_id(0), z = get_global_id(1);
    if (yp >= {g.hp}) return;
    const int pc = z % {cp}, ng = z / {cp};
    const int c0 = (ng % {groups}) * {cg} + 2 * pc;
    const int iy = yp - {g.pt}, xz = in2[0];
    const bool second = 2 * pc + 1 < {cg}, row = iy >= 0 && iy < {g.h};
    const __global {xt}* s0 = in0 + ((long)(ng / {groups}) * {g.c} + c0) * {g.h * g.wd} + (long)iy * {g.wd};
    const __global {xt}* s1 = s0 + {g.h * g.wd};
    __global short* dst = tmp0 + ((long)z * {g.hp} + yp) * {2 * g.wp};
    for (int q = 0; q < {g.wp}; ++q) {{
        const int ix = (q % {g.wq}) * {g.sw} + q / {g.wq} - {g.pl};
        const bool in = row && ix >= 0 && ix < {g.wd};
        dst[2 * q] = in ? (short)((int)s0[ix] - xz) : 0;
        dst[2 * q + 1] = in && second ? (short)((int)s1[ix] - xz) : 0;
    }}
}}
"""
    ly = min(g.hp, 16)
    return Kernel(src, (math.ceil(g.hp / ly) * ly, g.n * groups * cp), (ly, 1), ("in0", "in2", "tmp0"))


def channel_lane_stores(ctx: Ctx, geo: Any, accs: list[str], whole: bool, epilogue: Epilogue | None = None,
                        channel_epilogue: Epilogue | None = None) -> list[str]:
    """The stores of a channel-lane integer conv's work-item: column ox0 + p's 16 output channels from
    accumulator accs[p] (requantized for qconv2d), one static lane at a time, columns past the row's end
    skipped (qlinear.lane_stores)."""
    from . import qlinear as q

    y, m = ctx.results[0], ctx.operands[1].dims[0]
    out = []
    for p, acc in enumerate(accs):
        val = q._requant(ctx, acc, 16, "oc0", m, whole)
        at = f"((long)(b * {geo.m} + oc0) * {geo.ho} + oy) * {geo.wo} + ox0 + {p}"
        out.append(f"""    if (ox0 + {p} < {geo.wo}) {{
        {q.lane_stores(f"{ctype(y)}16", val, 16, at, geo.ho * geo.wo, whole, epilogue, channel_epilogue)}
    }}""")
    return out


def channel_lane_kernel(ctx: Ctx, src: str, geo: Any, px: int, blocks: int) -> Kernel:
    """The launch of a channel-lane integer conv: `px` columns an item, up to 8 items a row and 16 in a
    work-group, `blocks` (batch x groups x lane blocks) in the third dimension."""
    xb = math.ceil(geo.wo / px)
    lx = min(xb, 8)
    ly = int(ctx.schedule.get("local", max(1, 16 // lx)))
    grid = (math.ceil(xb / lx) * lx, math.ceil(geo.ho / ly) * ly, blocks)
    return Kernel(src, grid, (lx, ly, 1), ("tmp0", *(f"in{i}" for i in range(1, len(ctx.operands))), "out0"))


def pixel_gemm_stores(ctx: Ctx, og: int, hw: int, vcols: int, accs: list[list[str]],
                      epilogue: Epilogue | None = None) -> list[str]:
    """The stores of a 1x1 integer conv's pixel-GEMM work-item: row i's pixel vector j from accs[i][j]
    (requantized for qconv2d), rows past the group's channels skipped, a plane's last partial vector by
    its new lanes (conv_pointwise.plane_store)."""
    from . import qlinear as q
    from .conv_pointwise import plane_store

    yt, rows = ctype(ctx.results[0]), len(accs)
    panels, rem = math.ceil(hw / 16), hw % 16

    def piece(lane: int, size: int) -> str:
        part, at = f"v.s{'0123456789abcdef'[lane:lane + size]}", f"out0 + yb + {hw - 16 + lane}"
        return f"*({at}) = {part};" if size == 1 else f"vstore{size}({part}, 0, {at});"

    lines = []
    for i in range(rows):
        guard = og % rows and i >= og % rows
        ind = "        " if guard else "    "
        if guard:
            lines.append(f"    if (o0 + {i} < {og}) {{")
        lines.append(f"{ind}{{ const long yb = ((long)b * {og} + o0 + {i}) * {hw};")
        for j in range(vcols):
            val = q.stored(q._requant(ctx, accs[i][j], 16, f"grp * {og} + o0 + {i}"), f"yb + p{j}", 16,
                           epilogue)  # a plane's last vector ends at its end: every lane a real position
            lines.append(f"{ind}  {{ const {yt}16 v = {val};")
            lines += plane_store(j, panels, vcols, rem, f"vstore16(v, 0, out0 + yb + p{j});", piece,
                                 f"{ind}    ")
            lines.append(f"{ind}  }}")
        lines.append(f"{ind}}}")
        if guard:
            lines.append("    }")
    return lines


def conv_pairs(ctx: Ctx, px: int, epilogue: Epilogue | None = None,
               channel_epilogue: Epilogue | None = None) -> Lowered:
    """The paired-channel kernel: 16 output channels in the lanes, `px` output columns an item."""
    from . import qlinear as q  # its helpers; qlinear chooses this kernel

    x, w, _, wz = ctx.operands[:4]
    y = ctx.results[0]
    groups = int(ctx.attr("groups"))
    og = w.dims[0] // groups
    geo = q._geo(ctx, px)
    cg = geo.cg
    cp = math.ceil(cg / 2)
    gb = math.ceil(og / 16)
    whole = og % 16 == 0
    wz16 = q._channels("in3", wz, "short", 16, "oc0", w.dims[0], whole)
    wt = ctype(w)
    taps = []
    for ky in range(geo.kh):
        for kx in range(geo.kw):
            t = (ky * geo.kw + kx) * 32
            macs = "\n".join(f"            a{p} = KERNEL_pair_madd(a{p}, xr[{geo.tap(ky, kx)} + {p}], wv);"
                             for p in range(px))
            taps.append(f"""        {{
            const {wt}16 w0 = vload16(0, wc + {t}), w1 = vload16(0, wc + {t + 16});
            KERNEL_short32 wv;
            wv.lo = convert_short16(w0);
            wv.hi = convert_short16(w1);
            wv -= wz2;
{macs}
        }}""")
    accs = "\n".join(f"    int16 a{p} = 0;" for p in range(px))
    stores = channel_lane_stores(ctx, geo, [f"a{p}" for p in range(px)], whole, epilogue, channel_epilogue)
    src = f"""{PREAMBLE}
// {ctx.op_name}: {x} * {w} -> {y}
// strides {geo.sh}x{geo.sw}, dilations {geo.dh}x{geo.dw}, groups {groups}
// 16 channels (lanes) x {px} columns an item, input channels in pairs (16-bit multiply-adds)
__kernel void KERNEL({q._params(ctx, "__global const int* restrict tmp0")}) {{
    const int xi = get_global_id(0), oy = get_global_id(1), z = get_global_id(2);
    const int ox0 = xi * {px};
    if (ox0 >= {geo.wo} || oy >= {geo.ho}) return;
    const int b = z / {groups * gb}, grp = (z / {gb}) % {groups}, oc0 = grp * {og} + (z % {gb}) * 16;
    const int nch = min(16, {og} - (z % {gb}) * 16);
    const short16 wz = {wz16};
    KERNEL_short32 wz2;
    wz2.even = wz;
    wz2.odd = wz;
{accs}
    const __global int* xb = tmp0 + (long)(b * {groups} + grp) * {cp * geo.plane}
                             + oy * {geo.sh * geo.wp} + ox0;
    const __global {wt}* wb = in1 + (long)(grp * {gb} + z % {gb}) * {cp * geo.kh * geo.kw * 32};
    for (int pc = 0; pc < {cp}; ++pc) {{
        const __global int* xr = xb + pc * {geo.plane};
        const __global {wt}* wc = wb + pc * {geo.kh * geo.kw * 32};
{chr(10).join(taps)}
    }}
{chr(10).join(stores)}
}}
"""
    main = channel_lane_kernel(ctx, src, geo, px, geo.n * groups * gb)
    low = Lowered([repack_pairs(ctx, geo, groups, cp), main], scratch=[4 * geo.n * groups * cp * geo.plane],
                  schedule={"lanes": 16, "cols": px, "pairs": 1})
    # [O, Cg, KH, KW] -> [G, ceil(og / 16), ceil(Cg / 2), KH, KW, 16, 2]
    low.pack[1] = PackSpec((1, 2), (16, 2), reshape=(groups, og, cg, geo.kh, geo.kw))
    low.flops_kernel = 1
    return low


def in_group(ctx: Ctx) -> bool:
    """schedule `group_repack` (default 1): each work-group of a 1x1 pixel GEMM (pointwise_pairs,
    qdot.pointwise_quads) interleaves its own panel of the input (`GroupPanel`) instead of a repack launch
    interleaving all of it first."""
    return bool(int(ctx.schedule.get("group_repack", 1)))


@dataclass(frozen=True)
class GroupPanel:
    """A 1x1 pixel GEMM whose work-groups interleave their own input: a work-group is up to ITEMS of the
    `blocks` output-channel blocks of one panel of `vcols` 16-pixel vectors (more blocks take more
    work-groups along dim 0, each interleaving the panel again); its items first write the panel's
    channel pairs or quads (`steps` of them, `vcols` x 16 ints each) into the work-group's own slice of
    scratch, meet at a barrier, then compute from it while it is in cache. The slice is global memory:
    PoCL 3.1 hands a `__local` pointer to an out-of-line function (the VNNI helper) as garbage."""

    blocks: int
    panels: int
    vcols: int
    steps: int
    ITEMS = 32

    @property
    def items(self) -> int:
        return min(self.blocks, self.ITEMS)

    @property
    def slices(self) -> int:
        return math.ceil(self.panels / self.vcols)

    @property
    def groups_x(self) -> int:
        return math.ceil(self.blocks / self.items)

    @property
    def ints(self) -> int:
        return self.steps * self.vcols * 16

    @property
    def at(self) -> str:
        """The work-group's slice: its offset in ints from the scratch's start."""
        return (f"((long)(get_global_id(2) * {self.slices} + get_group_id(1)) * {self.groups_x} "
                f"+ get_group_id(0)) * {self.ints}")

    @property
    def local(self) -> tuple[int, int, int]:
        return (self.items, 1, 1)

    def grid(self, planes: int) -> tuple[int, int, int]:
        return (self.groups_x * self.items, self.slices, planes)

    def scratch(self, planes: int) -> int:
        return 4 * planes * self.slices * self.groups_x * self.ints

    def lowered(self, ctx: Ctx, source: str, planes: int, in_group: bool, repack: Callable[[], Kernel],
                repack_bytes: int, schedule: dict[str, int]) -> Lowered:
        """The GEMM kernel `source` over `planes` (batch x groups): one launch whose work-groups take
        their panels (`in_group`), or the `repack` launch (scratch of `repack_bytes`) then the GEMM, one
        work-item a work-group."""
        if in_group:
            main = Kernel(source, self.grid(planes), self.local,
                          ("tmp0", *(f"in{i}" for i in range(len(ctx.operands))), "out0"))
            return Lowered([main], scratch=[self.scratch(planes)], schedule=schedule)
        main = Kernel(source, (self.blocks, self.slices, planes), (1, 1, 1),
                      ("tmp0", *(f"in{i}" for i in range(1, len(ctx.operands))), "out0"))
        low = Lowered([repack(), main], scratch=[repack_bytes], schedule=schedule)
        low.flops_kernel = 1
        return low


def pointwise_pairs_fits(ctx: Ctx) -> bool:
    """An unpadded stride-1 1x1 integer conv of at least 16 pixels and 2 input channels a group: the pixel
    GEMM below (schedule `pointwise`: 0 keeps the channel-lane kernel)."""
    x, w = ctx.operands[:2]
    strides, pads, dil = ctx.attr("strides"), ctx.attr("pads"), ctx.attr("dilations")
    ok = (w.dims[2:] == (1, 1) and list(strides) == [1, 1] and not any(pads) and list(dil) == [1, 1]
          and w.dims[1] >= 2 and x.dims[2] * x.dims[3] >= 16)
    return ok and bool(int(ctx.schedule.get("pointwise", 1)))


def pointwise_pairs(ctx: Ctx, epilogue: Epilogue | None = None) -> Lowered:
    """A 1x1 integer conv as a GEMM over pixels: `rows` output channels x `vcols` vectors of 16 pixels a
    work-item, input channels in pairs. Per pair it loads each pixel vector's 16 x 2 shorts (x less its
    zero point; one 64-byte load), the rows' weight pairs at once (2 x rows bytes, widened, the zero points
    off), and multiply-adds every row's broadcast pair into each vector; the 16 pixels of a channel are
    stored as one vector (the plane's last one loaded ending at its end, storing only its new lanes, as
    conv_pointwise's f32 kernel). The pairs come from the work-group's own slice (`GroupPanel`), or with
    schedule `group_repack = 0` from a repack launch (`repack_pairs`)."""
    from . import qlinear as q

    x, w, _, wz = ctx.operands[:4]
    y = ctx.results[0]
    groups = int(ctx.attr("groups"))
    o_all, cg = w.dims[0], w.dims[1]
    og = o_all // groups
    hw = x.dims[2] * x.dims[3]
    n = x.dims[0]
    geo = q._geo(ctx, 1)
    cp = math.ceil(cg / 2)
    rows = int(ctx.schedule.get("rows", 8 if og >= 8 else 4))
    vcols = int(ctx.schedule.get("vcols", 2))
    if rows not in (4, 8) or not 1 <= vcols <= 4:
        raise NotLowerable(f"'{ctx.op_name}' schedule rows={rows} (4 or 8), vcols={vcols} (1..4)")
    panels, mb = math.ceil(hw / 16), math.ceil(og / rows)
    local = in_group(ctx)
    panel = GroupPanel(mb, panels, vcols, cp)
    wt, xt = ctype(w), ctype(x)
    zps = ", ".join(f"(short){'in3[0]' if wz.numel == 1 else f'in3[min(grp * {og} + o0 + {i}, {o_all - 1})]'}"
                    for i in range(rows) for _ in range(2))
    first = (f"__global int* restrict tmp0, __global const {xt}* restrict in0" if local
             else "__global const int* restrict tmp0")
    lines = [PREAMBLE,
             f"// {ctx.op_name} 1x1: {x} * {w} -> {y}, groups {groups}, as a GEMM over pixels: {rows} output",
             f"// channels x {vcols} vectors of 16 pixels an item, input channels in pairs (16-bit "
             "multiply-adds)" + ("; a work-group interleaves its pixels' pairs" if local else ""),
             f"__kernel void KERNEL({q._params(ctx, first)}) {{"]
    if local:
        cvt = f"convert_int16(as_{xt}16(vload16(0, src + {{}} + p0)))"
        lines += ["    {  // the fill (self-contained, so that cooperative execution can run it as a phase)",
                  f"        __global int* xl = tmp0 + {panel.at};",
                  "        const int lid = get_local_id(0), nw = get_global_id(1), b = get_global_id(2);",
                  "        const int xz = in2[0];",
                  f"        const __global {xt}* xs = in0 + ((long)(b / {groups}) * {x.dims[1]}"
                  f" + (b % {groups}) * {cg}) * {hw};",
                  f"        for (int pc = lid; pc < {cp}; pc += {panel.items}) {{",
                  f"            const __global {xt}* src = xs + (long)2 * pc * {hw};",
                  f"            const bool second = 2 * pc + 1 < {cg};"]
        for j in range(vcols):
            lines += [f"            {{ const int p0 = min((nw * {vcols} + {j}) * 16, {hw - 16});",
                      f"              const int16 lo = {cvt.format(0)} - xz;",
                      f"              const int16 hi = second ? {cvt.format(hw)} - xz : (int16)(0);",
                      "              vstore16(as_int16((as_uint16(lo) & 0xffff) | (as_uint16(hi) << 16)), 0, "
                      f"xl + (pc * {vcols} + {j}) * 16); }}"]  # unsigned: no shift of a negative int
        lines += ["        }", "    }", "    barrier(CLK_GLOBAL_MEM_FENCE);"]
    lines += ["    const int mb = get_global_id(0), nw = get_global_id(1), b = get_global_id(2);",
              f"    if (mb >= {mb}) return;",
              f"    const int grp = b % {groups}, o0 = mb * {rows};",
              f"    const __global int* xp = tmp0 + {panel.at if local else f'(long)b * {cp * hw}'};",
              f"    const __global {wt}* wp = in1 + (long)(grp * {mb} + mb) * {cp * 2 * rows};",
              f"    const short{2 * rows} wz2 = (short{2 * rows})({zps});"]
    for j in range(vcols):
        lines.append(f"    const int q{j} = nw * {vcols} + {j}, p{j} = min(q{j} * 16, {hw - 16});")
    accs = [[f"c{i}_{j}" for j in range(vcols)] for i in range(rows)]
    for row in accs:
        lines.append(f"    int16 {', '.join(f'{c} = 0' for c in row)};")
    step = vcols * 16 if local else hw
    lines.append(f"    for (int pc = 0; pc < {cp}; ++pc, xp += {step}, wp += {2 * rows}) {{")
    widened = f"convert_short{2 * rows}(vload{2 * rows}(0, wp))"
    lines.append(f"        const int{rows} wi = as_int{rows}({widened} - wz2);")
    for j in range(vcols):
        at = f"{j}, xp" if local else f"0, xp + p{j}"
        lines.append(f"        const KERNEL_short32 x{j} = __builtin_astype(vload16({at}), KERNEL_short32);")
    for i in range(rows):
        lines.append("        " + " ".join(f"{c} = KERNEL_pair_madd({c}, wi.s{i}, x{j});"
                                            for j, c in enumerate(accs[i])))
    lines.append("    }")
    lines += pixel_gemm_stores(ctx, og, hw, vcols, accs, epilogue)
    lines.append("}")
    low = panel.lowered(ctx, "\n".join(lines) + "\n", n * groups, local,
                        lambda: repack_pairs(ctx, geo, groups, cp), 4 * n * groups * cp * hw,
                        {"pointwise": 1, "rows": rows, "vcols": vcols, "group_repack": int(local)})
    # [O, Cg, 1, 1] -> [G, ceil(og / rows), ceil(Cg / 2), rows, 2]
    low.pack[1] = PackSpec((1, 2), (rows, 2), reshape=(groups, og, cg))
    return low
