"""decompose-conv-transpose: a transposed convolution as a stride-1 conv2d, depth_to_space and a crop.

With stride s (the same on both axes) every output pixel Y' = s*q + r of the uncropped output (before the
pads crop it) takes the taps k = r + s*m of the kernel from input row q - m. So the s*s output phases
(ry, rx) are each a stride-1 correlation of the input with the sub-kernel of their taps (M = ceil(k/s)
taps an axis, flipped, zero where r + s*m >= k), padded by M - 1, and one conv2d with O*s*s output
channels computes all of them at once (the "sub-pixel convolution"):

    conv_transpose2d(x, w [C, O/g, kh, kw], b) {strides = [s, s], pads = [t, l, b, r]}
      = slice(depth_to_space(conv2d(x, w2 [O*s*s, C/g, Mh, Mw], b2) {pads = [Mh-1, Mw-1, Mh-1, Mw-1],
                                                                     groups = g}, s, CRD), crop)

with w2[o*s*s + ry*s + rx, c, i, j] = w[c, o, ry + s*(Mh-1-i), rx + s*(Mw-1-j)] and b2 the bias repeated
s*s times; the crop (a slice, left out when there is nothing to crop) takes pads and output_padding. It
does the same multiply-adds as the transposed convolution (none on inserted zeros) in the conv2d kernels
every other conv runs through: the zoo U-Net's 2x2 stride-2 upsampling conv ran at 1.4 GFLOP/s in the
gather kernel and runs as a 1x1 conv.

It refuses, with a missed remark (category `algebraic`), a transposed conv whose weights are not a
constant (`weights`), with dilations (`dilations`), with different strides on the two axes (`strides`),
or whose output_padding reaches past the uncropped output (`output-padding`), and one with a `?` dim or
an output that is not the phases' cropped by constants (`dynamic-shape`); symbolic N, H and W are
decomposed the same way, the sizes carried as expressions. Stride 1 needs no phases:
it is the same rewrite with s = 1 (a conv2d of the flipped kernel, no depth_to_space).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..ir.attributes import Attr
from ..ir.core import Module, Op, Value
from ..ir.ops.registry import OpError, get_op
from ..ir.types import TensorType
from .common import Refusal, const_array, const_op, infer_type, make_const_attr
from .manager import Pass, PassContext
from .rewrite import Rewriter, apply_patterns_greedily


def sub_pixel_weights(w: np.ndarray, s: int, groups: int) -> np.ndarray:
    """w [C, O/g, kh, kw] of a stride-s transposed conv -> the conv2d weights [O*s*s, C/g, Mh, Mw]."""
    c, og, kh, kw = w.shape
    mh, mw = math.ceil(kh / s), math.ceil(kw / s)
    padded = np.zeros((c, og, mh * s, mw * s), w.dtype)
    padded[:, :, :kh, :kw] = w
    # tap k = r + s*m -> [c, og, m, r]; flip m (correlation order), phases after o: [o, ry, rx, c, i, j]
    t = padded.reshape(c, og, mh, s, mw, s)[:, :, ::-1, :, ::-1, :]
    cg = c // groups
    t = t.reshape(groups, cg, og, mh, s, mw, s).transpose(0, 2, 4, 6, 1, 3, 5)
    return np.ascontiguousarray(t.reshape(groups * og * s * s, cg, mh, mw))


@dataclass
class DecomposeConvTranspose(Pass):
    """Rewrite conv_transpose2d as a stride-1 conv2d over its s*s output phases, depth_to_space and a
    crop."""

    NAME = "decompose-conv-transpose"
    STATISTICS = {"num-decomposed": "Number of conv_transpose2d ops rewritten as conv2d + depth_to_space"}

    def run(self, module: Module, ctx: PassContext) -> None:
        def refuse(op: Op, r: Refusal) -> bool:
            ctx.remark_missed("algebraic", r.reason, [op], f"'conv_transpose2d' not decomposed: {r.message}")
            return False

        def decompose(op: Op, rw: Rewriter) -> bool:
            x, w = op.operands[:2]
            opdef = get_op(op.name)
            assert opdef is not None
            a = opdef.with_defaults(op.attrs)
            if any(d != 1 for d in a["dilations"]):
                return refuse(op, Refusal("dilations", f"dilations {list(a['dilations'])} are not 1"))
            sh, sw = (int(v) for v in a["strides"])
            if sh != sw:
                return refuse(op, Refusal("strides", f"strides {sh}x{sw} differ between the axes"))
            wa = const_array(w, module)
            if wa is None:
                return refuse(op, Refusal("weights", "its weights are not a constant"))
            if any(d is None for d in (*x.type.shape, *op.result.type.shape)):
                return refuse(op, Refusal("dynamic-shape", "it has an anonymous dynamic dim ('?')"))
            s, g = sh, int(a["groups"])
            n, c, h, wd = x.type.shape  # symbolic dims compute as ints: the phases are the same
            _, og, kh, kw = wa.shape
            mh, mw = math.ceil(kh / s), math.ceil(kw / s)
            full_h, full_w = (h + mh - 1) * s, (wd + mw - 1) * s  # the uncropped output of the phases
            top, left = int(a["pads"][0]), int(a["pads"][1])
            ho, wo = op.result.type.shape[2:]
            try:
                past = top + ho > full_h or left + wo > full_w
            except OpError:  # undecidable on symbols (the output size is not the input's plus constants)
                return refuse(op, Refusal("dynamic-shape", f"its output {op.result.type} is not the phases' "
                                                           "output cropped by constants"))
            if past:
                return refuse(op, Refusal("output-padding", f"output_padding {list(a['output_padding'])} "
                                                            "reaches past the uncropped output"))
            o = og * g
            dt = x.type.dtype
            w2 = sub_pixel_weights(wa, s, g)
            loc = op.loc
            operands = [x, self._const(module, op, w2, TensorType(w2.shape, dt))]
            if len(op.operands) > 2:
                b = const_array(op.operands[2], module)
                if b is None:
                    return refuse(op, Refusal("weights", "its bias is not a constant"))
                operands.append(self._const(module, op, np.repeat(b, s * s), TensorType((o * s * s,), dt)))
            conv_attrs: dict[str, Attr] = {"pads": [mh - 1, mw - 1, mh - 1, mw - 1], "groups": g}
            conv_t = TensorType((n, o * s * s, h + mh - 1, wd + mw - 1), dt)
            if infer_type("conv2d", [v.type for v in operands], conv_attrs) != conv_t:
                return refuse(op, Refusal("weights", "the sub-pixel conv2d would not type-check"))
            y = rw.create(op, "conv2d", operands, [conv_t], conv_attrs, loc).result
            if s > 1:
                y = rw.create(op, "depth_to_space", [y], [TensorType((n, o, full_h, full_w), dt)],
                              {"blocksize": s, "mode": "CRD"}, loc).result
            if (ho, wo) != (full_h, full_w):
                crop: dict[str, Attr] = {"starts": [top, left], "ends": [top + ho, left + wo], "axes": [2, 3]}
                y = rw.create(op, "slice", [y], [op.result.type], crop, loc).result
            y.name = op.result.name
            how = f"a {mh}x{mw} conv2d with {o * s * s} output channels" + (
                f" and depth_to_space {s}" if s > 1 else "")
            ctx.remark_passed("algebraic", "decomposed", [op],
                              f"'conv_transpose2d' {kh}x{kw} stride {s} as {how}")
            self.stat("num-decomposed")
            rw.replace_op(op, [y])
            return True

        apply_patterns_greedily(module, {"conv_transpose2d": [decompose]})

    @staticmethod
    def _const(module: Module, anchor: Op, array: np.ndarray, t: TensorType) -> Value:
        assert anchor.parent is not None
        c = const_op(anchor.loc, make_const_attr(array, t, module))
        return anchor.parent.insert_before(anchor, c).result


PASS = DecomposeConvTranspose
