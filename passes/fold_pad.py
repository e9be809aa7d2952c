"""fold-pad: merge an explicit spatial `pad` into the `pads` of the conv2d or pooling op it feeds.

`pad` in constant mode that pads only the spatial dims (2 and 3 of an NCHW tensor) by non-negative
amounts disappears into its consumers' `pads` attribute when every user can take it:
- `conv2d` reading it as its input, when the pad value is 0;
- `max_pool2d`, when the pad value is -inf (max pooling pads with -inf, so a 0 pad would win over
  negative inputs);
- `avg_pool2d`, when the pad value is 0 and the padded zeros are counted the same way after the merge:
  `count_include_pad = true`, or a pool without pads of its own (which then gets `count_include_pad =
  true`, since the explicit zeros were real elements it averaged).
The merged op must have the same result type (pooling pads must stay below the kernel extent; ceil mode
may count windows differently).

It refuses, with a missed remark (category `algebraic`), a pad that feeds a conv2d or a pool but has a
non-zero value (`pad-value`), reflect or edge mode (`pad-mode`), pads on the batch or channel dim
(`pad-dims`), a negative pad that crops (`negative-pad`), another user that cannot take it (`multi-use`),
or a consumer whose merged pads would be invalid or change its result (`pool-pads`). A pad that feeds
no conv2d or pool is left alone silently.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..ir.core import Module, Op, fuse_locs
from ..ir.ops.registry import get_op
from .common import infer_type
from .manager import Pass, PassContext
from .rewrite import Pattern, Rewriter, apply_patterns_greedily

CONSUMERS = ("conv2d", "max_pool2d", "avg_pool2d")


def _attrs(op: Op) -> dict:
    opdef = get_op(op.name)
    assert opdef is not None
    return opdef.with_defaults(op.attrs)


def spatial_pads(pad: Op) -> tuple[str, str] | list[int]:
    """The pad's [top, left, bottom, right] when it is foldable on its own, else (reason, message)."""
    a = _attrs(pad)
    pads = [int(p) for p in a["pads"]]
    rank = pad.operands[0].type.rank
    if a["mode"] != "constant":
        return ("pad-mode", f"mode '{a['mode']}' is not constant zero padding")
    if rank != 4:
        return ("pad-dims", f"it pads a rank-{rank} tensor, not NCHW")
    if any(p < 0 for p in pads):
        return ("negative-pad", f"pads {pads} crop (negative)")
    if any(pads[i] or pads[i + rank] for i in (0, 1)):
        return ("pad-dims", f"pads {pads} pad the batch or channel dim")
    return [pads[2], pads[3], pads[6], pads[7]]


def merged(pad: Op, user: Op, index: int, q: list[int]) -> tuple[dict, None] | tuple[None, tuple[str, str]]:
    """The attributes `user` gets with the pad merged in, or why it cannot take it."""
    value = float(_attrs(pad)["value"])
    a = _attrs(user)
    if user.name not in CONSUMERS or index != 0:
        return None, ("multi-use", f"its user '{user.name}' cannot take the padding")
    if user.name == "max_pool2d" and value != -math.inf:
        return None, ("pad-value", f"max_pool2d pads with -inf; this pad's value is {value}")
    if user.name != "max_pool2d" and value != 0.0:
        return None, ("pad-value", f"{user.name} pads with 0; this pad's value is {value}")
    new = dict(user.attrs)
    new["pads"] = [int(p) + d for p, d in zip(a["pads"], q, strict=True)]
    if user.name == "avg_pool2d" and not a["count_include_pad"]:
        if any(a["pads"]):
            return None, ("pool-pads", "avg_pool2d does not count its own pads, but would count these")
        new["count_include_pad"] = True
    t = infer_type(user.name, [pad.operands[0].type, *user.operand_types[1:]], new)
    if t != user.result.type:
        return None, (
            "pool-pads",
            f"'{user.name}' with pads {new['pads']} would be invalid or change its result",
        )
    return new, None


@dataclass
class FoldPad(Pass):
    """Merge a spatial zero (or -inf) pad into the pads of the conv2d/max_pool2d/avg_pool2d it feeds."""

    NAME = "fold-pad"
    STATISTICS = {"num-folded": "Number of pad ops merged into their consumers"}

    def run(self, module: Module, ctx: PassContext) -> None:
        reported: set[Op] = set()

        def fold_pad(op: Op, rw: Rewriter) -> bool:
            # conv2d(pad(x, q), pads=p) -> conv2d(x, pads=p+q); the same for max_pool2d (-inf) and
            # avg_pool2d (0, counting pads)
            users = op.result.users
            if not any(u.name in CONSUMERS for u in users):
                return False
            q = spatial_pads(op)
            plans: list[tuple[Op, dict]] = []
            why: tuple[str, str] | None = q if isinstance(q, tuple) else None
            if isinstance(q, list):
                for user, index in op.result.uses:
                    attrs, refusal = merged(op, user, index, q)
                    if refusal is not None or attrs is None:
                        why = refusal
                        break
                    plans.append((user, attrs))
            if why is not None:
                if op not in reported:
                    reported.add(op)
                    ctx.remark_missed("algebraic", why[0], [op, *users], f"'pad' not folded: {why[1]}")
                return False
            for user, attrs in plans:
                new = rw.create(
                    user,
                    user.name,
                    [op.operands[0], *user.operands[1:]],
                    [user.result.type],
                    attrs,
                    fuse_locs(op.loc, user.loc),
                )
                new.result.name = user.result.name
                ctx.remark_passed("algebraic", "folded", [op, user], f"folded 'pad' into '{user.name}'")
                rw.replace_op(user, [new.result])
            self.stat("num-folded")
            return True

        patterns: dict[str, list[Pattern]] = {"pad": [fold_pad]}
        apply_patterns_greedily(module, patterns)


PASS = FoldPad
