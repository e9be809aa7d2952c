"""Control flow: `if`, `loop` and `scan`, ops with regions (in the spirit of MLIR's scf.if and scf.while).

```
%y = if %cond ({
  %a = relu %x : (tensor<[N]x8xf32>) -> tensor<[N]x8xf32>
  yield %a : tensor<[N]x8xf32>
}, {
  yield %x : tensor<[N]x8xf32>
}) : (tensor<i1>) -> tensor<[N]x8xf32>
```

Their regions are not isolated: they read the values of the blocks around them. Each ends in `yield`.
- `if %cond`: two regions without arguments; runs the first when the one-element i1 `cond` is true,
  else the second. Its results are the yielded values; where the branches yield different dims, the
  result's dim is `?`.
- `loop %trips, %cond, %v...` (ONNX Loop): the body's block takes (iteration number `tensor<i64>`,
  condition `tensor<i1>`, the loop-carried values) and yields (the next condition, the carried values, the
  scan slices of this iteration). It runs while iteration < trips and the condition holds; results are
  the final carried values, then each scan slice stacked on a new first axis (`?`: as many as it ran).
- `scan %s..., %x...` (ONNX Scan, opset 9 on): `num_scan_inputs` trailing operands are cut along their
  `scan_input_axes` (walked backwards where `scan_input_directions` is 1); the body takes (states, one
  slice of each scan input) and yields (states, output slices); results are the final states, then the
  output slices stacked along `scan_output_axes` (reversed where `scan_output_directions` is 1).
- `assert %cond {message = "..."}`: no results; fails the run with `message` when the one-element i1
  `cond` is false. The importer writes one where a model cannot run at some sizes (an If whose branch
  for those sizes does not convert); canonicalize erases it once `cond` is a constant true, as it is
  in a func specialized to sizes where the model runs.
The interpreter runs the regions; the OpenCL target runs each region's kernels from the host, which
reads back the condition or trip count (targets/opencl/control.py), and checks an `assert` there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..types import TensorType
from .registry import Cost, OpDef, OpError, Sig, attr, check, norm_axis, register

CONTROL = frozenset({"control"})
HOST = frozenset({"host"})
"""Ops with an effect the host carries out (an `assert` failing the run): never erased as dead code."""
RunRegion = Callable[[int, Sequence[np.ndarray]], list[np.ndarray]]
"""How a control op's reference runs region k on block arguments (the interpreter passes it)."""


def join(a: TensorType, b: TensorType) -> TensorType:
    """The type of a value that is `a` on one path and `b` on the other: dims that differ become `?`."""
    check(a.dtype == b.dtype and a.rank == b.rank, f"the branches yield {a} and {b}, of another "
          f"{'element type' if a.dtype != b.dtype else 'rank'}")
    return a.with_shape(tuple(x if x == y else None for x, y in zip(a.shape, b.shape, strict=True)))


def result_types(name: str, operands: Sequence[TensorType], attrs: dict[str, Any],
                 yields: Sequence[Sequence[TensorType]]) -> list[TensorType]:
    """A control op's result types from its operand types and the types each region yields."""
    if name == "if":
        then, other = yields
        check(len(then) == len(other), f"the branches yield {len(then)} and {len(other)} values")
        return [join(a, b) for a, b in zip(then, other, strict=True)]
    (body,) = yields
    if name == "loop":
        n = len(operands) - 2
        check(len(body) >= 1 + n, f"the body yields {len(body)} values, fewer than the condition and {n} "
                                  "carried values")
        carried = [join(t, v) for t, v in zip(operands[2:], body[1:1 + n], strict=True)]
        return carried + [t.with_shape((None, *t.shape)) for t in body[1 + n:]]
    n_in = int(attrs["num_scan_inputs"])
    n_state = len(operands) - n_in
    states = list(body[:n_state])
    length = _scan_length(operands[n_state:], attrs)
    outs = []
    for k, t in enumerate(body[n_state:]):
        axes = list(attrs.get("scan_output_axes") or [])
        axis = norm_axis(axes[k] if k < len(axes) else 0, t.rank + 1, "scan output axis")
        outs.append(t.with_shape((*t.shape[:axis], length, *t.shape[axis:])))
    return states + outs


def block_arg_types(name: str, operands: Sequence[TensorType],
                    attrs: dict[str, Any]) -> list[list[TensorType]]:
    """The argument types of each region's block, from the op's operand types."""
    if name == "if":
        return [[], []]
    if name == "loop":
        return [[TensorType((), "i64"), TensorType((), "i1"), *operands[2:]]]
    n_in = int(attrs["num_scan_inputs"])
    states, xs = list(operands[:len(operands) - n_in]), operands[len(operands) - n_in:]
    axes = list(attrs.get("scan_input_axes") or [])
    slices = []
    for i, x in enumerate(xs):
        a = norm_axis(axes[i] if i < len(axes) else 0, x.rank, "scan input axis")
        slices.append(x.with_shape(x.shape[:a] + x.shape[a + 1:]))
    return [states + slices]


def _scan_length(xs: Sequence[TensorType], attrs: dict[str, Any]) -> Any:
    axes = list(attrs.get("scan_input_axes") or [])
    lengths = {x.shape[norm_axis(axes[i] if i < len(axes) else 0, x.rank, "scan input axis")]
               for i, x in enumerate(xs)}
    return lengths.pop() if len(lengths) == 1 else None


def _infer(sig: Sig) -> list[TensorType]:
    return list(sig.results)  # the regions decide (result_types); the verifier checks them


def _verify_if(sig: Sig) -> None:
    c = sig.operands[0]
    check(c.dtype == "i1" and (not c.is_static or c.numel == 1), f"the condition must be one i1, got {c}")


def _verify_loop(sig: Sig) -> None:
    m, c = sig.operands[:2]
    check(m.dtype == "i64" and m.rank <= 1, f"the trip count must be one i64, got {m}")
    check(c.dtype == "i1" and c.rank <= 1, f"the condition must be one i1, got {c}")


def _flag(x: np.ndarray) -> bool:
    return bool(np.asarray(x).reshape(-1)[0])


def _if_ref(sig: Sig, cond: np.ndarray, *, run: RunRegion) -> list[np.ndarray]:
    return run(0 if _flag(cond) else 1, [])


def _loop_ref(sig: Sig, trips: np.ndarray, cond: np.ndarray, *carried: np.ndarray,
              run: RunRegion) -> list[np.ndarray]:
    m, go, state = int(np.asarray(trips).reshape(-1)[0]), _flag(cond), list(carried)
    n = len(state)
    scans: list[list[np.ndarray]] = [[] for _ in range(len(sig.results) - n)]
    i = 0
    while go and i < m:
        outs = run(0, [np.array(i, np.int64), np.array(go), *state])
        go, state = _flag(outs[0]), list(outs[1:1 + n])
        for k, piece in enumerate(outs[1 + n:]):
            scans[k].append(piece)
        i += 1
    stacked = []
    for k, pieces in enumerate(scans):
        t = sig.results[n + k]
        stacked.append(np.stack(pieces) if pieces else np.zeros((0, *[d or 0 for d in t.shape[1:]]),
                                                                t.np_dtype))
    return state + stacked


def scan_axes(sig: Sig, xs: Sequence[Any], n_out: int) -> tuple[list[int], list[bool], list[int], list[bool]]:
    """Scan's input axes and directions (normalized to each input's rank), then its output axes and
    directions (not normalized: an output's rank is its slice's plus one)."""
    n_in = len(xs)

    def ints(name: str, n: int) -> list[int]:
        v = list(sig.attrs.get(name) or [])
        check(not v or len(v) == n, f"'{name}' has {len(v)} values for {n} tensors")
        return [int(x) for x in v] or [0] * n

    in_axes = [norm_axis(a, np.ndim(x) if isinstance(x, np.ndarray) else x.rank, "scan input axis")
               for a, x in zip(ints("scan_input_axes", n_in), xs, strict=True)]
    return (in_axes, [bool(d) for d in ints("scan_input_directions", n_in)],
            ints("scan_output_axes", n_out), [bool(d) for d in ints("scan_output_directions", n_out)])


def _scan_ref(sig: Sig, *xs: np.ndarray, run: RunRegion) -> list[np.ndarray]:
    n_in = int(sig["num_scan_inputs"])
    states, ins = list(xs[:len(xs) - n_in]), xs[len(xs) - n_in:]
    n_out = len(sig.results) - len(states)
    in_axes, in_rev, out_axes, out_rev = scan_axes(sig, ins, n_out)
    steps = ins[0].shape[in_axes[0]]
    outs: list[list[np.ndarray]] = [[] for _ in range(n_out)]
    for t in range(steps):
        slices = [np.take(x, steps - 1 - t if r else t, axis=a) for x, a, r in zip(ins, in_axes, in_rev,
                                                                                  strict=True)]
        res = run(0, [*states, *slices])
        states = list(res[:len(states)])
        for k, y in enumerate(res[len(states):]):
            outs[k].append(y)
    stacked = []
    for k, ys in enumerate(outs):
        rt = sig.results[len(states) + k]
        if not ys:
            stacked.append(np.zeros([d or 0 for d in rt.shape], rt.np_dtype))
            continue
        axis = norm_axis(out_axes[k], ys[0].ndim + 1, "scan output axis")
        stacked.append(np.stack(ys[::-1] if out_rev[k] else ys, axis=axis))
    return states + stacked


register(OpDef("if", ("cond",), infer=_infer, reference=_if_ref, results="*", regions=2, verify=_verify_if,
               traits=CONTROL, cost=lambda sig: Cost(),
               doc="Runs its first region when `cond` (one i1) is true, else its second; the results are "
                   "what the region that ran yields (a dim the branches disagree on is `?`)."))
register(OpDef("loop", ("trips", "cond", "carried*"), infer=_infer, reference=_loop_ref, results="*",
               regions=1, verify=_verify_loop, traits=CONTROL, cost=lambda sig: Cost(),
               doc="ONNX Loop: body(i, cond, carried...) -> (cond, carried..., scan slices...) while i < "
                   "trips and cond; results: the carried values, then the slices stacked on a new axis 0."))
register(OpDef("scan", ("inputs*",), infer=_infer, reference=_scan_ref, results="*", regions=1,
               attrs={"num_scan_inputs": attr("int"), "scan_input_axes": attr("ints", []),
                      "scan_input_directions": attr("ints", []), "scan_output_axes": attr("ints", []),
                      "scan_output_directions": attr("ints", [])},
               traits=CONTROL, cost=lambda sig: Cost(),
               doc="ONNX Scan: the body runs on the states and one slice of each scan input per step; "
                   "results: the final states, then the output slices stacked along their axes."))


def failing_region(types: Sequence[TensorType], message: str, loc: Any = ()) -> Any:
    """A region the run cannot take (an `if` branch that does not fit the shapes): an `assert` on a constant
    false that fails the run with `message`, then zeros of `types` to yield (what the other branch gives)."""
    from ..attributes import DenseAttr
    from ..core import Block, Op, Region

    flag_t = TensorType((), "i1")
    block = Block([], [])
    flag = block.append(Op("const", [], [flag_t], {"value": DenseAttr.splat(False, flag_t)}, loc=loc))
    block.append(Op("assert", [flag.results[0]], [], {"message": message}, loc=loc))
    zeros = [block.append(Op("const", [], [t], {"value": DenseAttr.splat(0, t)}, loc=loc)).results[0]
             for t in types]
    block.append(Op("yield", zeros))
    return Region([block])


class AssertionFailed(OpError):
    """A run reached an `assert` whose condition is false: the model cannot run on these inputs."""


def _assert_ref(sig: Sig, cond: np.ndarray, **_: Any) -> list[np.ndarray]:
    if not _flag(cond):
        raise AssertionFailed(str(sig["message"]))
    return []


register(OpDef("assert", ("cond",), infer=lambda sig: [], reference=_assert_ref, results=0,
               attrs={"message": attr("str")}, verify=_verify_if, traits=HOST, cost=lambda sig: Cost(),
               doc="Fails the run with `message` when `cond` (one i1) is false; no results."))
