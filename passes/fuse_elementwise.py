"""fuse's rules for the elementwise ops no anchor took (passes/fuse.py's docstring, step 2): a producer and
its consumer of the same shape share a region, unless that would make a cycle through an outside op.
"""

from __future__ import annotations

from ..ir.core import Op
from .fuse_rules import FuserBase, is_elementwise, shape_text


class ElementwiseRules(FuserBase):
    """Groups of elementwise ops, each a region the driver forms."""

    def elementwise_regions(self) -> list[list[Op]]:
        """The groups of elementwise ops (two or more each) the driver forms into regions, in order."""
        group: dict[int, list[Op]] = {}
        for u in list(self.block.ops):
            if not is_elementwise(u) or not self.fusible(u):
                continue
            mine = [u]
            group[id(u)] = mine
            for v in u.operands:
                p = v.op
                if p is None or id(p) not in group or group[id(p)] is mine or u not in v.users:
                    continue  # (u may read a clone of p by now)
                if p.result.type.shape != u.result.type.shape:
                    self.missed(
                        "shape-change",
                        [u, p],
                        f"'{u.name}' broadcasts the result of '{p.name}' "
                        f"from {shape_text(v)} to {shape_text(u.result)}; they stay apart",
                    )
                    continue
                merged = sorted(group[id(p)] + mine, key=lambda o: self.pos[id(o)])
                problem = self.too_large(merged, None)
                if problem:
                    self.missed("too-large", [u, p], f"'{u.name}' and '{p.name}' stay apart: {problem}")
                    continue
                if self.makes_cycle(merged, group) is not None:
                    mine = self.recompute_or_refuse(p, u, mine, group)
                    continue
                mine = merged
                for o in mine:
                    group[id(o)] = mine
        regions: list[list[Op]] = []
        done: set[int] = set()
        for ops in list(group.values()):
            if id(ops) not in done and len(ops) > 1:
                done.add(id(ops))
                regions.append(ops)
        return regions

    def recompute_or_refuse(self, p: Op, u: Op, mine: list[Op], group: dict[int, list[Op]]) -> list[Op]:
        """The regions of `p` and `u` cannot merge (a path leaves them and comes back). When `u` is the
        only user of `p`, `p` moves to `u`'s region; otherwise a cheap `p` is cloned into it with
        recompute=true; else the refusal is remarked. Returns `u`'s region."""
        through = self.makes_cycle(sorted(group[id(p)] + mine, key=lambda o: self.pos[id(o)]), group)
        via = f"through '{through.name}' " if through is not None else ""
        n = len(p.result.users)
        single = n == 1
        if not single and not self.cheap(p):
            self.missed(
                "multi-use",
                [u, p],
                f"'{p.name}' has {n} users and its region leads {via}back to "
                f"'{u.name}'; they cannot share a region",
            )
            return mine
        if not single and not self.p.recompute:
            self.missed(
                "would-recompute",
                [u, p],
                f"'{p.name}' has {n} users and its region leads {via}"
                f"back to '{u.name}'; the region of '{u.name}' would recompute it (recompute=true "
                "does)",
            )
            return mine
        old = group[id(p)]
        if single:  # a move: its old region loses a sink, which keeps that region convex
            old.remove(p)
            group[id(p)] = [p]
        c = p if single else self.clone_before(p, u)
        merged = sorted([c, *mine], key=lambda o: self.pos[id(o)])
        problem = self.too_large(merged, None)
        if problem or self.makes_cycle(merged, group) is not None:
            if single:
                old.append(p)
                group[id(p)] = old
            else:
                u.set_operands([p.result if x is c.result else x for x in u.operands])
                self.erase(c)
            reason = "too-large" if problem else "multi-use"
            self.missed(
                reason,
                [u, p],
                f"'{u.name}' cannot fuse '{p.name}': "
                + (problem or f"its region leads {via}back to '{u.name}'"),
            )
            return mine
        if not single:
            self.p.stat("num-recomputed")
            self.ctx.remark_passed(
                "fusion",
                "recomputed",
                [c, u],
                f"recomputed '{p.name}' ("
                f"{self.flops_text(p)}) in the region of '{u.name}' instead of reading it",
            )
        for o in merged:
            group[id(o)] = merged
        return merged

    def makes_cycle(self, ops: list[Op], group: dict[int, list[Op]]) -> Op | None:
        """An op outside `ops` on a path that leaves them and comes back, counting each other region as
        one node (the regions could not be ordered); None when there is none."""
        inside = {id(o) for o in ops}
        stack = [x for o in ops for x in o.result.users if id(x) not in inside]
        seen: set[int] = set()
        while stack:
            w = stack.pop()
            if id(w) in seen or id(w) in inside:
                continue
            seen.add(id(w))
            members = group.get(id(w), [w])
            stack.extend(m for m in members if id(m) not in seen)
            for r in w.results:
                for x in r.users:
                    if id(x) in inside:
                        return w
                    stack.append(x)
        return None
