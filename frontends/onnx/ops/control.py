"""Converters for ONNX's control flow: If, Loop and Scan.

Where what decides the control flow is known at import, they resolve it by inlining their subgraphs
(`Subgraph.convert`: the body's nodes converted into the current block, seeing the enclosing scopes):
- If takes the branch a constant condition picks (as the shape tests exporters write are);
- Loop unrolls its body while the trip count and the conditions are constants, carrying the loop state
  and concatenating the scan outputs;
- Scan unrolls its body over a static scan length.
Otherwise they become the IR's `if`, `loop` and `scan` ops (ir/ops/control.py), their subgraphs converted
into the ops' regions: an If on a graph input, a Loop whose trip count or condition is computed from the
inputs, a Scan over a symbolic length. An If left to run time gets a note naming the graph inputs its
condition comes from (`--constant-input` would fold it). Sequence-typed values are not supported.

An If whose branches give different ranks or element types raises `Diverge`; the node loop
(importer.convert_nodes) then converts the rest of the graph into each branch (`split_at`), or, where
the rest converts after one branch only, takes that one behind an `assert` (docs/ir.md, Control flow).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx

from ....ir.core import Block, Op, Region
from ....ir.diagnostics import DiagnosticError
from ....ir.ops import control as ops
from ....ir.ops.registry import OpError
from ....ir.types import TensorType
from ..builder import Builder, ConversionError, Tensor
from ..importer import Diverge, Subgraph, bind_outputs, graph_inputs_of
from ..registry import converter
from .common import _slice

MAX_ITERATIONS = 4096
"""Most iterations a Loop or Scan is unrolled to; a longer one is refused rather than bloating the graph."""


def _flag(t: Tensor, what: str) -> bool:
    a = np.asarray(t.const(what))
    if a.size != 1:
        raise ConversionError(f"{what} must hold one value, got {t.type}")
    return bool(a.reshape(-1)[0])


def _take(b: Builder, x: Tensor, axis: int, i: int) -> Tensor:
    """x[..., i, ...] along `axis`, the axis dropped."""
    return b.reshape(_slice(b, x, axis, i, i + 1), [d for k, d in enumerate(x.shape) if k != axis])


def _stack(b: Builder, xs: Sequence[Tensor], axis: int) -> Tensor:
    """xs stacked along a new `axis` (ONNX's negative axes count from the end of the stacked rank)."""
    rank = xs[0].rank + 1
    if not -rank <= axis < rank:
        raise ConversionError(f"scan output axis {axis} is out of range for rank {rank}")
    axis %= rank
    parts = [b.reshape(x, [*x.shape[:axis], 1, *x.shape[axis:]]) for x in xs]
    if any(p.type != parts[0].type for p in parts):
        raise ConversionError("the body gives scan outputs of different types on different iterations: "
                              + ", ".join(sorted({str(p.type) for p in parts})))
    return parts[0] if len(parts) == 1 else b.op("concat", parts, {"axis": axis})


def _region(b: Builder, sub: Subgraph, args: Sequence[TensorType]) -> tuple[Region, list[TensorType]]:
    """`sub` converted into the block of a new region whose arguments have types `args` (the subgraph's
    inputs); returns the region and the types its `yield` gives."""
    block = Block(list(args), [vi.name for vi in sub.graph.input])
    saved, materialized = b.block, dict(b._materialized)
    b.block = block
    try:
        given = [Tensor(t, value=a, name=a.name) for t, a in zip(args, block.args, strict=True)]
        outs = sub.convert(b, given)
        values = [b.value(t) for t in outs]
        block.append(Op("yield", values))
    except BaseException:
        _discard(Region([block]))  # the ops made so far must not stay users of the values around
        raise
    finally:
        b.block, b._materialized = saved, materialized  # constants made inside stay inside
    return Region([block]), [v.type for v in values]


def _discard(*regions: Region) -> None:
    """Drop the ops of regions that will not be used (their reads of outer values with them)."""
    for r in regions:
        for op in list(r.block.ops):
            for inner in list(op.walk()):
                inner.drop_operands()


def split_at(b: Builder, node: onnx.NodeProto, d: Diverge, env: dict[str, Tensor], rest: Any) -> list[Tensor]:
    """An `if` on `d.cond` whose regions each hold one branch of If `node` and, after it, `rest(env)`: the
    nodes that follow, converted again with the branch's outputs; it yields what `rest` returns (the
    graph's outputs) and gives them to the caller. A branch after which the graph does not convert (an
    LSTM given the rank the squeeze it skipped would have removed) is a size the model cannot run at: the
    other branch is taken in the current block, behind an `assert` on the condition that fails the run
    there with the reason."""
    loc = b.loc
    regions: list[Region] = []
    yields: list[list[TensorType]] = []
    failures: list[str] = []
    for branch in d.branches:
        block = Block([], [])
        saved, materialized = b.block, dict(b._materialized)
        b.block = block
        try:
            inner = dict(env)
            b.loc = loc
            bind_outputs(node, branch.convert(b, []), inner)
            values = [b.value(t) for t in rest(inner)]
            block.append(Op("yield", values))
            regions.append(Region([block]))
            yields.append([v.type for v in values])
            failures.append("")
        except (ConversionError, DiagnosticError) as e:
            _discard(Region([block]))
            first = e.diagnostics[0].message if isinstance(e, DiagnosticError) else str(e)
            failures.append(re.sub(r"^'[^']*': ", "", first))
        finally:
            b.block, b._materialized = saved, materialized
    b.loc = loc
    if all(failures):
        raise ConversionError(f"{d.message}; with the rest of the graph converted into each branch, neither "
                              f"converts: {failures[0]}")
    if any(failures):
        taken = failures.index("")
        which = ("then", "else")[1 - taken]
        cond = d.cond if taken == 0 else b.op("not", [d.cond])
        b.block.append(Op("assert", [b.value(cond)], [], {
            "message": f"the model cannot run at these input sizes: its If '{node.name}' takes its {which} "
                       f"branch, after which the graph does not convert ({failures[1 - taken]})"}, loc=loc))
        block = regions[0].block
        for op in list(block.ops[:-1]):  # the branch that converts, moved into the current block
            block.remove(op)
            b.block.append(op)
        term = block.ops[-1]
        values = list(term.operands)
        term.drop_operands()
        return [Tensor(v.type, value=v) for v in values]
    try:
        return _emit(b, "if", [d.cond], {}, regions, yields)
    except ConversionError as e:
        _discard(*regions)
        raise ConversionError(f"{d.message}; with the rest of the graph converted into each branch, {e}") \
            from None


def _emit(b: Builder, name: str, inputs: Sequence[Tensor], attrs: dict, regions: list[Region],
          yields: list[list[TensorType]]) -> list[Tensor]:
    try:
        types = ops.result_types(name, [t.type for t in inputs], attrs, yields)
    except OpError as e:
        raise ConversionError(str(e)) from None
    op = Op(name, [b.value(t) for t in inputs], types, attrs, regions, loc=b.loc)
    b.block.append(op)
    return [Tensor(t, value=r) for t, r in zip(types, op.results, strict=True)]


@converter("If")
def If(b: Builder, cond: Tensor, *, then_branch: Subgraph, else_branch: Subgraph) -> list[Tensor]:
    """The branch a constant condition picks, inlined; else an `if` op that picks at run time."""
    if cond.is_const and not cond.is_symbolic:
        return (then_branch if _flag(cond, "If's condition") else else_branch).convert(b, [])
    if cond.type.is_static and cond.type.numel != 1:
        raise ConversionError(f"If's condition must hold one value, got {cond.type}")
    regions: list[tuple[Region, list[TensorType]] | None] = []
    failures: list[str] = []
    for branch in (then_branch, else_branch):
        try:
            regions.append(_region(b, branch, []))
            failures.append("")
        except (ConversionError, DiagnosticError) as e:
            regions.append(None)
            first = e.diagnostics[0].message if isinstance(e, DiagnosticError) else str(e)
            failures.append(re.sub(r"^'[^']*': ", "", first))
    if all(failures):
        raise ConversionError(f"neither branch converts: {failures[0]}")
    for k, r in enumerate(regions):
        if r is None:  # the shapes rule this branch out: taking it fails the run, with the reason
            other = regions[1 - k]
            assert other is not None
            if not all(t.is_static for t in other[1]):
                raise ConversionError(failures[k])
            name = b.loc[0][5:] if b.loc else "If"
            message = (f"the model cannot run at these input sizes: its If '{name}' takes its "
                       f"{('then', 'else')[k]} branch, which does not convert at them ({failures[k]})")
            regions[k] = (ops.failing_region(other[1], message, b.loc), list(other[1]))
    (then, t1), (other, t2) = regions  # type: ignore[misc]
    try:
        ops.result_types("if", [cond.type], {}, [t1, t2])
    except OpError as e:
        if len(t1) == len(t2):  # the node loop converts the rest of the graph into each branch
            _discard(then, other)
            raise Diverge(cond, [then_branch, else_branch], str(e)) from None
    names = graph_inputs_of(b, [cond])
    if names:
        flags = " ".join(f"--constant-input {n}=FILE.npy" for n in names)
        b.module.notes.append(f"If {b.loc[0][5:] if b.loc else ''!r} is decided at run time by graph input"
                              f"{'s' if len(names) > 1 else ''} {', '.join(map(repr, names))}; giving "
                              f"{'them' if len(names) > 1 else 'it'} at import ({flags}) folds it away")
    return _emit(b, "if", [cond], {}, [then, other], [t1, t2])


def _loop_op(b: Builder, M: Tensor | None, cond: Tensor | None, v_initial: Sequence[Tensor],
             body: Subgraph) -> list[Tensor]:
    """A `loop` op: the body converted once into its region, run at run time."""
    trips = M if M is not None else b.const(np.array(np.iinfo(np.int64).max, np.int64))
    go = cond if cond is not None else b.const(np.array(True))
    trips = b.op("reshape", [trips], {"shape": []}) if trips.rank else trips
    go = b.op("reshape", [go], {"shape": []}) if go.rank else go
    args = ops.block_arg_types("loop", [trips.type, go.type, *[t.type for t in v_initial]], {})[0]
    region, yields = _region(b, body, args)
    n = len(v_initial)
    if len(yields) < 1 + n:
        raise ConversionError(f"the body has {len(yields)} outputs, fewer than the condition and {n} "
                              "loop-carried values")
    for t, y in zip(v_initial, yields[1:1 + n], strict=True):
        if t.type != y:
            raise ConversionError(f"a loop-carried value changes type in the body ({t.type} -> {y}); "
                                  "tessel's loops keep each carried value's type")
    if yields[0].numel != 1 if yields[0].is_static else False:
        raise ConversionError(f"the body's condition must hold one value, got {yields[0]}")
    if yields[0].rank:  # the body's condition as a scalar, as the op's block argument takes it
        blk = region.block
        y = blk.ops[-1]
        r = Op("reshape", [y.operands[0]], [TensorType((), "i1")], {"shape": []}, loc=b.loc)
        blk.insert_before(y, r)
        y.set_operand(0, r.results[0])
        yields = [r.results[0].type, *yields[1:]]
    return _emit(b, "loop", [trips, go, *v_initial], {}, [region], [yields])


@converter("Loop")
def Loop(b: Builder, M: Tensor | None = None, cond: Tensor | None = None, *v_initial: Tensor,
         body: Subgraph) -> list[Tensor]:
    """body(i, cond, v...) -> (cond, v..., scan outputs...) while i < M and cond: unrolled when M, the
    condition and every condition the body returns are constants at import, else a `loop` op."""
    if (M is not None and not (M.is_const and not M.is_symbolic)) or (
            cond is not None and not (cond.is_const and not cond.is_symbolic)) or M is None:
        return _loop_op(b, M, cond, v_initial, body)
    trips = M.ints("Loop's trip count M")[0]
    go = _flag(cond, "Loop's condition") if cond is not None else True
    mark = len(b.block.ops), dict(b._materialized)
    try:
        return _unroll(b, trips, go, list(v_initial), body)
    except ConversionError as e:
        if "must be a constant" not in str(e):
            raise
        for op in reversed(b.block.ops[mark[0]:]):  # the body's condition is computed: undo the unrolling
            op.drop_operands()
            b.block.remove(op)
        b._materialized = mark[1]
        return _loop_op(b, M, cond, v_initial, body)


def _unroll(b: Builder, trips: int | None, go: bool, v_initial: list[Tensor], body: Subgraph) -> list[Tensor]:
    """Loop's body inlined once per iteration (the trip count and every condition constants)."""
    n_state = len(v_initial)
    n_scan = len(body.graph.output) - 1 - n_state
    if n_scan < 0:
        raise ConversionError(f"the body has {len(body.graph.output)} outputs, fewer than the condition and "
                              f"{n_state} loop-carried values")
    state = list(v_initial)
    scans: list[list[Tensor]] = [[] for _ in range(n_scan)]
    i = 0
    while go and (trips is None or i < trips):
        if i >= MAX_ITERATIONS:
            raise ConversionError(f"tessel only unrolls loops of up to {MAX_ITERATIONS} iterations")
        outs = body.convert(b, [b.const(np.array(i, np.int64)), b.const(np.array(True)), *state])
        go = _flag(outs[0], "the condition Loop's body returns")
        state = outs[1:1 + n_state]
        for k, t in enumerate(outs[1 + n_state:]):
            scans[k].append(t)
        i += 1
    if n_scan and i == 0:
        raise ConversionError("a Loop that runs no iteration has scan outputs of unknown shape; "
                              "tessel cannot represent them")
    return state + [_stack(b, s, 0) for s in scans]


def _scan(b: Builder, body: Subgraph, states: list[Tensor], xs: list[Tensor], in_axes: Sequence[int],
          in_reverse: Sequence[bool], out_axes: Sequence[int], out_reverse: Sequence[bool]) -> list[Tensor]:
    """Unroll body over the scan inputs: the final states, then the stacked scan outputs."""
    if not xs:
        raise ConversionError("Scan needs at least one scan input")
    lengths = set()
    axes = []
    for x, a in zip(xs, in_axes, strict=True):
        if not -x.rank <= a < x.rank:
            raise ConversionError(f"scan input axis {a} is out of range for {x.type}")
        axes.append(a % x.rank)
        lengths.add(x.shape[a % x.rank])
    if len(lengths) != 1:
        raise ConversionError(f"the scan inputs have different lengths {sorted(lengths)} along their axes")
    steps = lengths.pop()
    if type(steps) is not int:  # a symbolic length: a `scan` op runs the body as many times as it holds
        attrs = {"num_scan_inputs": len(xs), "scan_input_axes": list(axes),
                 "scan_input_directions": [int(r) for r in in_reverse], "scan_output_axes": list(out_axes),
                 "scan_output_directions": [int(r) for r in out_reverse]}
        inputs = [*states, *xs]
        args = ops.block_arg_types("scan", [t.type for t in inputs], attrs)[0]
        region, yields = _region(b, body, args)
        return _emit(b, "scan", inputs, attrs, [region], [yields])
    if steps == 0:
        raise ConversionError("a Scan over no element has scan outputs of unknown shape; tessel cannot "
                              "represent them")
    if steps > MAX_ITERATIONS:
        raise ConversionError(f"tessel only unrolls scans of up to {MAX_ITERATIONS} steps, got {steps}")
    n_scan = len(body.graph.output) - len(states)
    scans: list[list[Tensor]] = [[] for _ in range(n_scan)]
    for t in range(steps):
        slices = [_take(b, x, a, steps - 1 - t if rev else t) for x, a, rev in zip(xs, axes, in_reverse,
                                                                                    strict=True)]
        outs = body.convert(b, [*states, *slices])
        states = outs[:len(states)]
        for k, y in enumerate(outs[len(states):]):
            scans[k].append(y)
    stacked = [_stack(b, s[::-1] if rev else s, a) for s, a, rev in zip(scans, out_axes, out_reverse,
                                                                      strict=True)]
    return states + stacked


def _ints(values: Sequence[int] | None, n: int, default: int, what: str) -> list[int]:
    if values is None:
        return [default] * n
    if len(values) != n:
        raise ConversionError(f"{what} has {len(values)} values, expected {n}")
    return [int(v) for v in values]


@converter("Scan", since=8)
def Scan(b: Builder, *inputs: Tensor | None, body: Subgraph, num_scan_inputs: int,
         directions: list[int] | None = None, scan_input_axes: list[int] | None = None,
         scan_input_directions: list[int] | None = None, scan_output_axes: list[int] | None = None,
         scan_output_directions: list[int] | None = None) -> list[Tensor]:
    """The body unrolled over the scan length. Opset 9 on: inputs are the initial states then the scan
    inputs, with per-input axes and directions. Opset 8: a first input sequence_lens (absent, or the full
    length) and a batch axis 0 on every input and output, scanned along axis 1, with `directions`."""
    n_out = len(body.graph.output)
    if b.opset < 9:
        return _scan8(b, body, inputs[0] if inputs else None, list(inputs[1:]), num_scan_inputs, directions)
    if any(t is None for t in inputs):
        raise ConversionError("Scan's inputs cannot be omitted")
    tensors = [t for t in inputs if t is not None]
    n_state = len(tensors) - num_scan_inputs
    if n_state < 0 or n_out < n_state:
        raise ConversionError(f"Scan has {len(tensors)} inputs for {num_scan_inputs} scan inputs and a body "
                              f"of {n_out} outputs")
    n_scan_out = n_out - n_state
    in_axes = _ints(scan_input_axes, num_scan_inputs, 0, "scan_input_axes")
    in_rev = [bool(v) for v in _ints(scan_input_directions, num_scan_inputs, 0, "scan_input_directions")]
    out_axes = _ints(scan_output_axes, n_scan_out, 0, "scan_output_axes")
    out_rev = [bool(v) for v in _ints(scan_output_directions, n_scan_out, 0, "scan_output_directions")]
    return _scan(b, body, tensors[:n_state], tensors[n_state:], in_axes, in_rev, out_axes, out_rev)


def _scan8(b: Builder, body: Subgraph, lens: Tensor | None, inputs: list[Tensor | None], num_scan_inputs: int,
           directions: list[int] | None) -> list[Tensor]:
    """Opset 8's batched Scan: one unrolled scan per batch element, the results stacked on axis 0."""
    if any(t is None for t in inputs):
        raise ConversionError("Scan's inputs cannot be omitted")
    tensors = [t for t in inputs if t is not None]
    n_state = len(tensors) - num_scan_inputs
    if n_state < 0 or num_scan_inputs < 1 or any(t.rank < 1 for t in tensors) \
            or any(t.rank < 2 for t in tensors[n_state:]):
        raise ConversionError("opset 8 Scan needs batched states (rank >= 1) and at least one batched scan "
                              "input (rank >= 2)")
    batch = tensors[0].shape[0]
    if batch == 0:
        raise ConversionError("a Scan over an empty batch has outputs of unknown shape; tessel cannot "
                              "represent them")
    steps = tensors[n_state].shape[1]
    if lens is not None:
        n = np.asarray(lens.const("Scan's sequence_lens")).reshape(-1)
        if n.size != batch or (n != steps).any():
            raise ConversionError(f"Scan with sequence_lens {n.tolist()} shorter than the sequence ({steps}) "
                                  "is not supported")
    in_rev = [bool(v) for v in _ints(directions, num_scan_inputs, 0, "directions")]
    n_scan_out = len(body.graph.output) - n_state
    results: list[list[Tensor]] = []
    for i in range(batch):
        per = [_take(b, t, 0, i) for t in tensors]
        results.append(_scan(b, body, per[:n_state], per[n_state:], [0] * num_scan_inputs, in_rev,
                             [0] * n_scan_out, [False] * n_scan_out))
    return [_stack(b, [r[k] for r in results], 0) for k in range(len(results[0]))]
