"""The recurrent scans (lstm_scan, gru_scan, rnn_scan): one kernel runs every step of a direction.

A step depends on the whole hidden state of the step before, so one work-item runs every step, each step
over all the units in order: chunks of `w` consecutive hidden units (two registers of floats where the
gates' accumulators fit, else one; halved until w divides H), all their gates with one vector accumulator
per gate, reading the previous h as broadcast scalars and rt's rows as vectors:

    acc_g[b] = xw[t, b, g*H + j .. j+w) + sum_k h[b, k] * rt[k, g*H + j .. j+w)

rt is packed beforehand (once, at load time, as it is a constant) as [H/w, H, G, w], so each chunk reads
one contiguous stream: packed, an LSTM with H = 128 runs at about twice the speed. A work-group runs on
one core whatever its size, so one work-item loses nothing, and with no barrier the scan is a plain kernel
that cooperative execution runs as a step of its own: a bidirectional layer's two directions, which the
memory plan gives no common buffer (lower.one_core), run on the two cores at once (a CRNN's H = 512 LSTM:
13.3 -> 9.5 ms a run). Schedule `work_items` spreads the chunks over a work-group that meets at a barrier
between steps instead.

The state h lives in scratch `tmp0` as two [B, H] halves, read from one and written to the other step by
step (one work-item, or the barrier between steps, orders them); LSTM's cell state c stays in result
`out2`, read and written only by the work-item that owns it. GRU without linear_before_reset needs r * h
of every unit before the candidate's matmul: a second phase per step (behind its own barrier in a work-
group), with r * h and z in scratch `tmp1`.

The input projection is not here: it is one matmul over the whole sequence before the scan, where it runs
as a GEMM of T*B rows. Past a batch's length (`lengths`) a step keeps the state and writes zeros to y.

qlstm_scan (onnxruntime's DynamicQuantizeLSTM) runs the same loop with rt of 8-bit integers: at each step
every work-item finds the range of the previous h of each sequence b (uint8, a scale and zero point per
sequence, ir/ops/recurrent.py), quantizes each h[b, k] as it reads it, and sums (hq - h_zp) * (rt -
r_zero_point) in int vectors; the gate's pre-activation is xw + float(sum) * (h_scale * r_scale). On a
device with the 8-bit dot product (`dot_fits`) a step takes two phases: each work-item finds the range of
h and quantizes its own units into bytes (tmp1; the scale and zero point in tmp2), then (after a barrier
in a work-group) sums hq * rt with `vpdpbusd` over rt packed [H/16, H/4, G, 16, 4] (a column's four k in
each lane) and takes the zero point out through rt's column sums (tmp3, once): the same integers, 12x
faster on a CRNN's H = 512 scan.
"""

from __future__ import annotations

from ....ir.types import TensorType
from .base import Ctx, Kernel, Lowered, NotLowerable, PackSpec, require_static, template
from .reducers import V, elem_ctype, flit, is_float, kernel_source, vec_width

MAX_LOCAL = 256  # work-items schedule `work_items` may give the scan's work-group


def unit_width(hidden: int, lanes: int) -> int:
    """Units per work-item: the widest power of two up to `lanes` that divides H."""
    w = lanes
    while w > 1 and hidden % w:
        w //= 2
    return w


def units_per_item(ctx: Ctx, c: str, gates: int) -> int:
    """Two registers of units per work-item where the gates' accumulators still fit (AVX2: float16 as two
    ymm halves, 2 FMA chains per gate), else one; never past 16 lanes."""
    lanes = vec_width(c, ctx.device)
    wide = min(2 * lanes, 16)
    return wide if wide > lanes and ctx.device.accumulators(wide) >= gates else lanes


@template("lstm_scan", "qlstm_scan", "gru_scan", "rnn_scan")
def scan_template(ctx: Ctx) -> Lowered:
    xw, rt = ctx.operands[:2]
    require_static(*ctx.operands, *ctx.results)
    c = elem_ctype(xw, ctx.device)
    if not is_float(c):
        raise NotLowerable(f"{ctx.op_name} of {xw.dtype}")
    steps, batch, width = xw.dims
    hidden = rt.dims[0]
    if steps * batch * hidden == 0:
        return _empty(ctx, c)
    dot = dot_fits(ctx) and c == "float"
    w = 16 if dot else int(ctx.schedule.get("units",
                                            unit_width(hidden, units_per_item(ctx, c, width // hidden))))
    if hidden % w:
        raise NotLowerable(f"{ctx.op_name} schedule units={w} does not divide hidden size {hidden}")
    chunks = hidden // w
    local = int(ctx.schedule.get("work_items", 1))
    if not 1 <= local <= min(chunks, MAX_LOCAL, ctx.device.max_work_group_size):
        raise NotLowerable(f"{ctx.op_name} schedule work_items={local} (1..{min(chunks, MAX_LOCAL)})")
    cell = {"lstm_scan": _lstm, "qlstm_scan": _lstm, "gru_scan": _gru, "rnn_scan": _rnn}[ctx.op_name]
    s = Scan(ctx, c, w, steps, batch, hidden, width, local, dot)
    body, params, scratch = cell(s)
    prefix = _dot_helpers(s) if dot else ""
    if s.masked:
        prefix += f"__constant int KERNEL_len[{batch}] = {{{', '.join(map(str, s.lengths))}}};\n"
    what = (f"{ctx.op_name} over {steps} steps, batch {batch}, hidden {hidden}"
            + (", reversed" if ctx.attr("reverse") else "")
            + f": {local} work-item{'s' if local > 1 else ''} of {w} units")
    group = f"__attribute__((reqd_work_group_size({local}, 1, 1)))\n" if local > 1 else ""
    src = prefix + group + kernel_source(what, params, body)
    n_in, n_out = len(ctx.operands), len(ctx.results)
    args = tuple([f"in{i}" for i in range(n_in)] + [f"out{j}" for j in range(n_out)]
                 + [f"tmp{k}" for k in range(len(scratch))])
    pack = {1: PackSpec((2,), (w,), (2, 0, 1), reshape=(hidden, width // hidden, hidden))}
    if dot:  # [H/16, H/4, G, 16, 4]: a column's four k of one gate in each i32 lane
        pack = {1: PackSpec((2, 0), (16, 4), (2, 0, 1), reshape=(hidden, width // hidden, hidden))}
    return Lowered([Kernel(src, (local,), (local,), args)], scratch=scratch, pack=pack,
                   schedule={"units": w, "work_items": local, **({"quads": 1} if dot else {})})


def dot_fits(ctx: Ctx) -> bool:
    """qlstm_scan on the CPU's 8-bit dot product (qdot.py): the device has it, rt is i8 at a constant zero
    point of 0 (onnxruntime's quantizer makes symmetric weights) and H is a multiple of 16; schedule
    `quads`: 0 keeps the int-vector loop."""
    from .qdot import FEATURES

    wanted = int(ctx.schedule.get("quads", 1))
    if ctx.op_name != "qlstm_scan" or not wanted or not ctx.device.has(FEATURES):
        return False
    rt, rz = ctx.operands[1], ctx.value(5)
    return rt.dtype == "i8" and rz is not None and not rz.any() and rt.dims[0] % 16 == 0


def _dot_helpers(s: Scan) -> str:
    """The dot-product loops, each in a function of the dot product's target: a unit's 16 columns of every
    gate over all k (two k quads a step, eight accumulators), and the same with ones (the column sums)."""
    from .qdot import FEATURES, PREAMBLE

    G, quads = s.G, s.H // 4
    acc = ", ".join(f"a{g} = 0, b{g} = 0" for g in range(G))
    dots = "\n".join(f"        a{g} = KERNEL_dot4(a{g}, h0, vload16({g}, rp)); "
                     f"b{g} = KERNEL_dot4(b{g}, h1, vload16({G + g}, rp));" for g in range(G))
    sums = "\n".join(f"    acc[{g}] = a{g} + b{g};" for g in range(G))

    def fn(name: str, h0: str, h1: str, args: str) -> str:
        return f"""__attribute__((target("{FEATURES}")))
static void KERNEL_{name}(const __global int* restrict rp{args}, int16* restrict acc) {{
    int16 {acc};
    for (int k = 0; k < {quads}; k += 2, rp += {2 * G * 16}) {{
        const int16 h0 = {h0}, h1 = {h1};
{dots}
    }}
{sums}
}}
"""
    hq = ", const __global int* restrict hq"
    return (PREAMBLE + fn("qdots", "(int16)(hq[k])", "(int16)(hq[k + 1])", hq)
            + fn("colsums", "(int16)(0x01010101)", "(int16)(0x01010101)", ""))


def _empty(ctx: Ctx, c: str) -> Lowered:
    """No steps, batch or units: the states are h0 (and c0) as they came, y is empty."""
    n = ctx.results[1].numel
    params = _params(c, len(ctx.operands), len(ctx.results), 0)
    if ctx.op_name == "qlstm_scan":
        params = Scan.typed_params(ctx, c, 0)
    body = ["const int i = get_global_id(0);", f"if (i >= {n}) return;", "out1[i] = in2[i];"]
    if ctx.op_name in ("lstm_scan", "qlstm_scan"):
        body.append("out2[i] = in3[i];")
    return Lowered([Kernel(kernel_source(f"{ctx.op_name} with nothing to scan", params, body),
                           (max(n, 1),), None)])


class Scan:
    """What the three cells' kernels share: sizes, spellings and the step loop around a cell's body."""

    def __init__(self, ctx: Ctx, c: str, w: int, steps: int, batch: int, hidden: int, width: int,
                 local: int, dot: bool = False) -> None:
        self.ctx, self.c, self.w = ctx, c, w
        self.T, self.B, self.H, self.GH, self.L = steps, batch, hidden, width, local
        self.v = V(c, w)
        self.G = width // hidden
        self.bh = batch * hidden
        self.bj = f"b * {hidden} + j"  # this work-item's units of batch b in a [B, H] state
        self.state_bytes = self.bh * _size(ctx.results[1])
        self.clip = float(ctx.attr("clip"))
        self.lengths = [int(n) for n in ctx.attr("lengths")]
        self.masked = any(n < steps for n in self.lengths)
        self.quantized = ctx.op_name == "qlstm_scan"
        self.dot = dot  # rt packed [H/16, H/4, G, 16, 4] for the dot product (dot_fits)

    @staticmethod
    def typed_params(ctx: Ctx, c: str, n_tmp: int) -> list[str]:
        """qlstm_scan's parameters: rt and its zero point of 8-bit integers, r_scale f32, the rest `c`."""
        q = _int8_ctype(ctx)
        types = [c, q, c, c, "float", q] + [c] * (len(ctx.operands) - 6)
        return ([f"__global const {t}* restrict in{i}" for i, t in enumerate(types)]
                + [f"__global {c}* restrict out{j}" for j in range(len(ctx.results))]
                + [f"__global {c}* restrict tmp{k}" for k in range(n_tmp)])

    def lit(self, x: float) -> str:
        return flit(x, self.c)

    def clipped(self, e: str) -> str:
        return f"clamp({e}, {self.lit(-self.clip)}, {self.lit(self.clip)})" if self.clip > 0 else e

    def sigmoid(self, e: str) -> str:
        return f"({self.lit(1.0)} / ({self.lit(1.0)} + exp(-({e}))))"

    def params(self, n_in: int, n_out: int, n_tmp: int) -> list[str]:
        if self.quantized:
            return self.typed_params(self.ctx, self.c, n_tmp)
        return _params(self.c, n_in, n_out, n_tmp)

    def units(self, lines: list[str]) -> list[str]:
        """`lines` for each of this work-item's units j (and each batch b)."""
        return [f"for (int u = l; u < {self.H // self.w}; u += {self.L}) {{",
                f"    const int j = u * {self.w};",
                f"    for (int b = 0; b < {self.B}; ++b) {{",
                *["        " + ln for ln in lines], "    }", "}"]

    def matvec(self, accs: list[tuple[str, int, str]], h: str) -> list[str]:
        """acc = init + sum_k h[b*H + k] * rt[k, col + j ..], for each (name, col, init), rt packed as
        [H/w, H, G, w] so a work-item's rows are one contiguous stream."""
        v, H, gw = self.v, self.H, self.G * self.w
        lines = [f"{v.t} {name} = {init};" for name, _, init in accs]
        lines += [f"__global const {self.c}* rp = in1 + u * {H * gw};",
                  f"for (int k = 0; k < {H}; ++k, rp += {gw}) {{",
                  f"    const {v.t} hk = ({v.t})({h}[b * {H} + k]);"]
        lines += [f"    {name} = fma(hk, {v.load('rp', str(col // H * self.w))}, {name});"
                  for name, col, _ in accs]
        return lines + ["}"]

    def h_quantization(self, h: str) -> list[str]:
        """hs, hz: the uint8 scale and zero point of sequence b's h (each work-item finds them: the range
        over [min(h, 0), max(h, 0)] in 255 steps, 1 when empty; the zero point rounded half to even), 16
        lanes at a time over the first H - H % 16 units (all one at a time in doubles)."""
        H, whole = self.H, (self.H // 16 * 16 if self.c == "float" else 0)
        return ["float16 lo = 0.0f, hi = 0.0f;",
                f"for (int i = 0; i < {whole}; i += 16) {{ const float16 x = vload16(0, {h} + b * {H} + i); "
                "lo = fmin(lo, x); hi = fmax(hi, x); }",
                "const float8 lo8 = fmin(lo.lo, lo.hi), hi8 = fmax(hi.lo, hi.hi);",
                "const float4 lo4 = fmin(lo8.lo, lo8.hi), hi4 = fmax(hi8.lo, hi8.hi);",
                "float hlo = fmin(fmin(lo4.x, lo4.y), fmin(lo4.z, lo4.w));",
                "float hhi = fmax(fmax(hi4.x, hi4.y), fmax(hi4.z, hi4.w));",
                f"for (int i = {whole}; i < {H}; ++i) {{ const float x = {h}[b * {H} + i]; "
                "hlo = fmin(hlo, x); hhi = fmax(hhi, x); }",
                "const float hs = hhi == hlo ? 1.0f : (hhi - hlo) / 255.0f;",
                "const float hz = rint(clamp(0.0f - hlo / hs, 0.0f, 255.0f));",
                "const int hzi = (int)hz;"]

    def qmatvec(self, accs: list[tuple[str, int, str]], h: str) -> list[str]:
        """qlstm_scan's matvec: name = init + float(sum_k (hq[b, k] - hz) * (rt[k, col + j ..] - rz)) *
        (hs * r_scale[col + j ..]), rt packed as in `matvec`; r_scale and r_zero_point are one value or one
        per column (in4, in5)."""
        w, H, gw = self.w, self.H, self.G * self.w
        iv = "int" if w == 1 else f"int{w}"
        fv = self.v.t
        per_col = self.ctx.operands[4].rank == 1 and self.ctx.operands[4].dims[0] != 1

        def col(ptr: str, c: int, conv: str) -> str:
            if not per_col:
                return f"({conv}){ptr}[0]" if w == 1 else f"({conv})({ptr}[0])"
            off = f"{c} + j"
            return (f"({conv}){ptr}[{off}]" if w == 1 else
                    f"convert_{conv}(vload{w}(0, {ptr} + {off}))")

        def rload(c: int) -> str:
            off = str(c // H * w)
            return f"(int)rp[{off}]" if w == 1 else f"convert_int{w}(vload{w}(0, rp + {off}))"

        lines = [f"{iv} q_{name} = ({iv})(0);" for name, _, _ in accs]
        lines += [f"__global const {_int8_ctype(self.ctx)}* rp = in1 + u * {H * gw};",
                  f"for (int k = 0; k < {H}; ++k, rp += {gw}) {{",
                  f"    const int hk = (int)clamp(rint({h}[b * {H} + k] / hs) + hz, 0.0f, 255.0f) - hzi;"]
        lines += [f"    q_{name} += ({iv})(hk) * ({rload(c)} - {col('in5', c, iv)});" for name, c, _ in accs]
        lines.append("}")
        conv = "convert_float" if w == 1 else f"convert_float{w}"
        lines += [f"const {fv} {name} = {init} + {conv}(q_{name}) * (hs * {col('in4', c, fv)});"
                  for name, c, init in accs]
        return lines

    def quantize_h(self, h: str) -> list[str]:
        """The dot path's first phase of a step: sequence b's h quantized (h_quantization) into tmp1's
        bytes, this work-item's 16 units; hs and hz into tmp2 (by the first work-item)."""
        return self.h_quantization(h) + [
            f"vstore16(convert_uchar16(clamp(rint(vload16(0, {h} + {self.bj}) / hs) + hz, 0.0f, 255.0f)), 0,"
            f" tmp1 + {self.bj});",
            "if (u == 0) { tmp2[2 * b] = hs; tmp2[2 * b + 1] = hz; }"]

    def dot_matvec(self, accs: list[tuple[str, int, str]]) -> list[str]:
        """The dot path's matvec: name = init + float(sum_k hq[b, k] * rt[k, col + j ..] - hz * colsum) *
        (hs * r_scale[col + j ..]), the sums from KERNEL_qdots, the column sums from tmp3."""
        per_col = self.ctx.operands[4].rank == 1 and self.ctx.operands[4].dims[0] != 1
        lines = ["const float hs = tmp2[2 * b];", "const int hzi = (int)tmp2[2 * b + 1];",
                 f"int16 q[{self.G}];",
                 f"KERNEL_qdots((const __global int*)in1 + u * {self.H * self.G * 4}, "
                 f"(const __global int*)(tmp1 + b * {self.H}), q);"]
        for name, col, init in accs:
            g = col // self.H
            scale = f"vload16(0, in4 + {col} + j)" if per_col else "(float16)(in4[0])"
            lines.append(f"const float16 {name} = {init} + convert_float16(q[{g}] - hzi * "
                         f"vload16(0, tmp3 + {col} + j)) * (hs * {scale});")
        return lines

    def xw(self, gate: int) -> str:
        return self.v.load("in0", f"(t * {self.B} + b) * {self.GH} + {gate * self.H} + j")

    def update(self, new_h: str, extra: list[str]) -> list[str]:
        """Writes step t's h (and, via `extra`, other state) or, past the batch's length, keeps the old."""
        v = self.v
        keep = [v.store(v.load("hp", self.bj), "hn", self.bj),
                v.store(v.splat(self.lit(0.0)), "out0", f"(t * {self.B} + b) * {self.H} + j")]
        write = [v.store(new_h, "hn", self.bj),
                 v.store(new_h, "out0", f"(t * {self.B} + b) * {self.H} + j"), *extra]
        if not self.masked:
            return write
        return ["if (t >= KERNEL_len[b]) {", *["    " + ln for ln in keep], "} else {",
                *["    " + ln for ln in write], "}"]

    def barrier(self) -> str:
        """Between the phases of a step: a work-group barrier, or nothing where one work-item runs every
        unit in order (the default: then the scan is a plain kernel that cooperative execution can run
        as a step of its own, a bidirectional layer's two directions on two cores at once)."""
        return "barrier(CLK_GLOBAL_MEM_FENCE);" if self.L > 1 else ""  # (the word alone would keep it lone)

    def loop(self, init: list[str], step: list[str], final: list[str]) -> list[str]:
        """The kernel body: init, then the steps (each ends at a barrier), then the final writes."""
        T, rev = self.T, bool(self.ctx.attr("reverse"))
        return ["const int l = get_local_id(0);", *init, self.barrier(),
                f"for (int s = 0; s < {T}; ++s) {{",
                f"    const int t = {f'{T - 1} - s' if rev else 's'};",
                f"    __global const {self.c}* hp = tmp0 + (s & 1) * {self.bh};",
                f"    __global {self.c}* hn = tmp0 + ((s + 1) & 1) * {self.bh};",
                *["    " + ln for ln in step], "    " + self.barrier(), "}",
                f"__global const {self.c}* hl = tmp0 + {(T & 1) * self.bh};", *final]

    def copy(self, src: str, dst: str) -> str:
        return self.v.store(self.v.load(src, self.bj), dst, self.bj)


def _lstm(s: Scan) -> tuple[list[str], list[str], list[int]]:
    """i, o, f, c gates; c stays in out2; peepholes (in4) read once per unit."""
    v, H = s.v, s.H
    p_at = 6 if s.quantized else 4  # the peepholes' operand
    peep = len(s.ctx.operands) > p_at
    fused = bool(s.ctx.attr("input_forget"))
    init = s.units([s.copy("in2", "tmp0"), s.copy("in3", "out2")])
    accs = [(f"a{g}", g * H, s.xw(g)) for g in range(4)]
    if s.dot:  # the column sums once, into tmp3
        init += s.units(["if (b == 0) {", "    int16 cs[4];",
                         f"    KERNEL_colsums((const __global int*)in1 + u * {H * s.G * 4}, cs);",
                         *[f"    vstore16(cs[{g}], 0, tmp3 + {g * H} + j);" for g in range(4)], "}"])
        cell = s.dot_matvec(accs)
    elif s.quantized:
        cell = s.h_quantization("hp") + s.qmatvec(accs, "hp")
    else:
        cell = s.matvec(accs, "hp")
    cell.append(f"const {v.t} cp = {v.load('out2', s.bj)};")
    if peep:
        cell += [f"const {v.t} p{k} = {v.load(f'in{p_at}', f'{k * H} + j')};" for k in range(3)]
    gi = "a0 + p0 * cp" if peep else "a0"
    gf = "a2 + p2 * cp" if peep else "a2"
    cell.append(f"const {v.t} gi = {s.sigmoid(s.clipped(gi))};")
    cell.append(f"const {v.t} gf = {v.splat(s.lit(1.0))} - gi;" if fused else
                f"const {v.t} gf = {s.sigmoid(s.clipped(gf))};")
    cell.append(f"const {v.t} cn = gf * cp + gi * tanh({s.clipped('a3')});")
    go = "a1 + p1 * cn" if peep else "a1"
    cell.append(f"const {v.t} hnew = {s.sigmoid(s.clipped(go))} * tanh(cn);")
    cell += s.update("hnew", [v.store("cn", "out2", s.bj)])
    final = s.units([s.copy("hl", "out1")])
    n_in = len(s.ctx.operands)
    if s.dot:  # a step: quantize h (tmp1, tmp2), then the gates
        step = s.units(s.quantize_h("hp")) + [s.barrier()] + s.units(cell)
        params = s.params(n_in, 3, 1) + ["__global uchar* restrict tmp1", "__global float* restrict tmp2",
                                         "__global int* restrict tmp3"]
        return (s.loop(init, step, final), params,
                [2 * s.state_bytes, s.B * H, 8 * s.B, 4 * s.G * H])
    return s.loop(init, s.units(cell), final), s.params(n_in, 3, 1), [2 * s.state_bytes]


def _gru(s: Scan) -> tuple[list[str], list[str], list[int]]:
    """z, r, h gates; rbh is in3. Without linear_before_reset a second phase per step computes the
    candidate's matmul over r * h, which phase one leaves in tmp1 (z beside it)."""
    v, H = s.v, s.H
    lbr = bool(s.ctx.attr("linear_before_reset"))
    init = s.units([s.copy("in2", "tmp0")])
    rbh = v.load("in3", "j")
    zero = v.splat(s.lit(0.0))
    one = v.splat(s.lit(1.0))
    hp = v.load("hp", s.bj)
    if lbr:
        cell = s.matvec([("az", 0, s.xw(0)), ("ar", H, s.xw(1)), ("ah", 2 * H, zero)], "hp")
        cell += [f"const {v.t} z = {s.sigmoid(s.clipped('az'))};",
                 f"const {v.t} r = {s.sigmoid(s.clipped('ar'))};",
                 f"const {v.t} cand = tanh({s.clipped(f'{s.xw(2)} + r * (ah + {rbh})')});",
                 f"const {v.t} hnew = ({one} - z) * cand + z * {hp};"]
        step = s.units(cell + s.update("hnew", []))
        scratch = [2 * s.state_bytes]
        n_tmp = 1
    else:
        phase1 = s.matvec([("az", 0, s.xw(0)), ("ar", H, s.xw(1))], "hp")
        phase1 += [v.store(s.sigmoid(s.clipped("az")), "tmp1", f"{s.bh} + {s.bj}"),
                   v.store(f"{s.sigmoid(s.clipped('ar'))} * {hp}", "tmp1", s.bj)]
        phase2 = s.matvec([("ah", 2 * H, zero)], "tmp1")
        phase2 += [f"const {v.t} z = {v.load('tmp1', f'{s.bh} + {s.bj}')};",
                   f"const {v.t} cand = tanh({s.clipped(f'{s.xw(2)} + ah + {rbh}')});",
                   f"const {v.t} hnew = ({one} - z) * cand + z * {hp};"]
        step = s.units(phase1) + [s.barrier()] + s.units(phase2 + s.update("hnew", []))
        scratch = [2 * s.state_bytes] * 2
        n_tmp = 2
    final = s.units([s.copy("hl", "out1")])
    return s.loop(init, step, final), s.params(4, 2, n_tmp), scratch


def _rnn(s: Scan) -> tuple[list[str], list[str], list[int]]:
    v = s.v
    act = s.ctx.attr("activation")
    init = s.units([s.copy("in2", "tmp0")])
    cell = s.matvec([("a", 0, s.xw(0))], "hp")
    pre = s.clipped("a")
    expr = {"tanh": f"tanh({pre})", "sigmoid": s.sigmoid(pre),
            "relu": f"fmax({pre}, {v.splat(s.lit(0.0))})"}[act]
    cell += [f"const {v.t} hnew = {expr};", *s.update("hnew", [])]
    final = s.units([s.copy("hl", "out1")])
    return s.loop(init, s.units(cell), final), s.params(3, 2, 1), [2 * s.state_bytes]


def _int8_ctype(ctx: Ctx) -> str:
    """qlstm_scan's rt (and zero point) C type."""
    return "char" if ctx.operands[1].dtype == "i8" else "uchar"


def _params(c: str, n_in: int, n_out: int, n_tmp: int) -> list[str]:
    return ([f"__global const {c}* restrict in{i}" for i in range(n_in)]
            + [f"__global {c}* restrict out{j}" for j in range(n_out)]
            + [f"__global {c}* restrict tmp{k}" for k in range(n_tmp)])


def _size(t: TensorType) -> int:
    """Bytes of one element of `t`."""
    return t.nbytes // max(t.numel, 1)
