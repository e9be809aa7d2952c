"""The `kernel` template: one launch for a fusion region (DESIGN §2, the fused-region contract of `fuse`).

- elementwise regions: one kernel over the yields' shape computing the whole chain per element, with the
  loop structure of elementwise.py: output dims coalesced where every operand's broadcast pattern agrees,
  a work-item per chunk of a row, operands contiguous (`vloadN`) or splat along the row, every op's C
  expression from `elementwise.expr` kept in a local, each yield stored to its result; vectorized when
  every op has a vector form on one element type, else a scalar loop. In-region splats become literals,
  other small constants `__constant` arrays. `batch_norm` counts as elementwise here (a per-channel affine
  map), so a reduction region around one lowers the same way.
- epilogue regions: the anchor's own template (`lower_conv2d`, `lower_matmul`, `lower_gemm`) with an
  `Epilogue` calling a helper `KERNEL_epi<w>(value, index, buffers...)` that evaluates the chain on the
  anchor's value in registers before the store: no extra memory pass. The chain's other operands are
  appended to the main kernel's parameters and loaded at the broadcast index of the flat output index. An
  `unpack` before a conv and a `pack` after it (NCHWc) become the conv's `in_block` / `out_block`; a
  channel shuffle (reshape, transpose [0, 2, 1, 3, 4], reshape) before a depthwise conv its `channel_map`.
- reduction regions: softmax, log_softmax and layer_norm through norm.py's `Hook`s (helper functions
  `KERNEL_pro<w>` on every element read, `KERNEL_epi<w>` on every element written); reduce_* through
  `reduce_kernels` with an epilogue; the pools (max/avg 2-D and global) like a conv: `lower_pool` with the
  epilogue helper and their `unpack` / `pack` as blocked layouts.
- gate regions (a global pool and FCs on its features): gate.py, one work-group per image.

Anything else raises NotLowerable, and the lowering runs the region's ops one launch each.

The pieces: fused_chain.py (the region as the lowerings read it, and chains of elementwise ops evaluated on
one value by a helper function), fused_elementwise.py, fused_epilogue.py (with fused_norm.py: layer_norms
around a matmul or gemm), fused_reduction.py and gate.py; this module dispatches on the region's kind and
holds its schedule space.
"""

from __future__ import annotations

from ....ir.ops.registry import op_sig
from ..space import SPACES, space
from ..space import Space as SchedSpace
from .base import Ctx, Lowered, NotLowerable, template
from .fused_chain import Region
from .fused_elementwise import lower_elementwise
from .fused_epilogue import lower_epilogue
from .fused_reduction import lower_reduction
from .gate import lower_gate


@template("kernel")
def fused(ctx: Ctx) -> Lowered:
    """A `kernel` region as one launch, by its kind; NotLowerable for what it does not cover."""
    kind = ctx.sig.attrs.get("kind", "generic")
    rg = Region(ctx)
    if kind == "elementwise":
        return lower_elementwise(ctx, rg)
    if kind == "epilogue":
        return lower_epilogue(ctx, rg)
    if kind == "reduction":
        return lower_reduction(ctx, rg)
    if kind == "gate":
        return lower_gate(ctx, rg)
    raise NotLowerable(f"a '{kind}' region runs op by op")


# the schedule space (space.py) -------------------------------------------------------------------------
@space("kernel")
def kernel_space(ctx: Ctx, default: Lowered) -> SchedSpace | None:
    """A fused region is tuned by the knobs of its anchor (the contraction or attention its chain hangs
    on; the last one when an expansion feeds a depthwise conv): its space, with the region's shapes."""
    anchors = [op for op in ctx.body.ops if op.name in ("conv2d", "matmul", "gemm", "attention", "qconv2d")]
    if not anchors:
        return None
    anchor = anchors[-1]
    arg = {id(a): i for i, a in enumerate(ctx.body.args)}
    constant = tuple(id(v) in arg and ctx.is_constant(arg[id(v)]) for v in anchor.operands)
    sub = Ctx(anchor.name, op_sig(anchor, ctx.resources), ctx.device, constant, dict(ctx.schedule))
    return SPACES[anchor.name](sub, default)
