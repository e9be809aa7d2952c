"""The reference interpreter: executes any level of the IR with each op's registry `reference`.

It is the IR's executable semantics, not a target, so it lives here beside the op registry, below passes:
translation validation (debug/validate.py), the onnx.backend adapter and the debugging tools run it
without importing a target, and `tessel-run --target=numpy` reaches it through targets/numpy's adapter.
The other targets, the constant folder and translation validation are checked against it, so it does
nothing clever: it walks the func in order, evaluates each op (a `cl.launch` by its reference body), and
frees each value after its last use.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from .core import Block, Func, Module, Op
from .diagnostics import Diagnostic, DiagnosticError
from .ops.registry import OpError, get_op, op_sig
from .printer import Namer
from .resources import ResourceError
from .types import TensorType


def input_names(func: Func) -> list[str]:
    """The keys `tessel-run --inputs` uses: an argument's `name` attribute, else its printed name."""
    if all(isinstance(a.get("name"), str) for a in func.arg_attrs):
        return [str(a["name"]) for a in func.arg_attrs]
    namer = Namer(func)  # walks the whole func (names must not collide): build it only when needed
    return [str(a.get("name")) if isinstance(a.get("name"), str) else namer(v)[1:]
            for v, a in zip(func.args, func.arg_attrs, strict=True)]


def output_names(func: Func) -> list[str]:
    """Output keys: a result's `name` attribute, else result0, result1, ..."""
    return [str(a["name"]) if isinstance(a.get("name"), str) else f"result{i}"
            for i, a in enumerate(func.result_attrs)]


def check_inputs(func: Func, inputs: Mapping[str, np.ndarray], source: str = "inputs") -> list[np.ndarray]:
    """The arrays in argument order; raises one DiagnosticError listing every missing, extra,
    wrong-shape or wrong-dtype input."""
    names = input_names(func)
    problems: list[str] = []
    for name, v in zip(names, func.args, strict=True):
        if name not in inputs:
            problems.append(f"missing input '{name}' ({v.type})")
            continue
        a = np.asarray(inputs[name])
        t: TensorType = v.type
        if a.dtype.kind == "V" and a.dtype.itemsize == t.np_dtype.itemsize and t.np_dtype.kind in "Vf":
            a = a.view(t.np_dtype)  # .npz keeps ml_dtypes arrays (bf16, float8, int4) as raw bytes
        if a.dtype != t.np_dtype:
            problems.append(f"input '{name}' has dtype {a.dtype}, expected {t.np_dtype} ({t})")
        elif len(a.shape) != t.rank or any(
            type(d) is int and d != s for d, s in zip(t.shape, a.shape, strict=True)
        ):
            problems.append(f"input '{name}' has shape {list(a.shape)}, expected {t}")
    for extra in sorted(set(inputs) - set(names)):
        problems.append(
            f"unexpected input '{extra}' (func @{func.name} takes: {', '.join(names) or 'nothing'})"
        )
    if problems:
        d = Diagnostic("error", f"{source} do not match func @{func.name}: {problems[0]}")
        for p in problems[1:]:
            d.note(p)
        raise DiagnosticError(d)
    return [np.asarray(inputs[n]).view(v.type.np_dtype) if np.asarray(inputs[n]).dtype.kind == "V"
            else np.asarray(inputs[n]) for n, v in zip(names, func.args, strict=True)]


def random_inputs(func: Func, seed: int = 0, sizes: Mapping[str, int] | None = None,
                  shapes: Mapping[str, Sequence[int]] | None = None) -> dict[str, np.ndarray]:
    """Seeded inputs: floats uniform in [-1, 1) (f8E8M0FNU: powers of two), ints in [0, 4), booleans half
    true. For a dynamic func, `sizes` gives the symbols' values (`{"N": 1, "H": 224}`) and `shapes` some
    inputs' shapes."""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for name, v in zip(input_names(func), func.args, strict=True):
        t: TensorType = v.type
        if shapes and name in shapes:
            given = tuple(int(d) for d in shapes[name])
            if len(given) != t.rank or any(type(d) is int and d != g for d, g in zip(t.shape, given,
                                                                                    strict=True)):
                raise DiagnosticError(Diagnostic("error", f"shape {list(given)} given for input '{name}' "
                                                          f"does not fit its type {t}"))
            t = t.with_shape(given)
        if not t.is_static and sizes and not any(d is None for d in t.shape) and t.symbols <= set(sizes):
            from .specialize import evaluate_type

            t = evaluate_type(t, sizes)
        if not t.is_static:
            how = f"give its shape (--input-shape {name}=DxD...) or the inputs themselves (--inputs)"
            raise DiagnosticError(
                Diagnostic("error", f"input '{name}' has a dynamic shape {t}: {how}")
            )
        if t.dtype == "f8E8M0FNU":  # exponent-only: positive powers of two, no zero or negatives
            out[name] = np.exp2(rng.integers(-4, 5, t.dims)).astype(np.float32).astype(t.np_dtype)
        elif t.is_float:
            out[name] = rng.uniform(-1, 1, t.dims).astype(t.np_dtype)
        elif t.dtype == "i1":
            out[name] = rng.random(t.dims) < 0.5
        else:
            out[name] = rng.integers(0, 4, t.dims).astype(t.np_dtype)
    return out


def run_func(module: Module, func: Func, args: list[np.ndarray]) -> list[np.ndarray]:
    """Execute `func` on arrays given in argument order; returns its results. A func with dynamic dims
    runs as its specialization to the arguments' shapes (ir/specialize.py)."""
    if any(not v.type.is_static for v in func.args):  # (never cached: passes change funcs in place)
        from .specialize import specialize

        module, func = specialize(module, func, [np.shape(a) for a in args])
    env: dict[int, np.ndarray] = {id(v): a for v, a in zip(func.args, args, strict=True)}
    return run_block(module, func.block, env)


def run_block(module: Module, block: Block, env: dict[int, np.ndarray]) -> list[np.ndarray]:
    last_use: dict[int, int] = {}
    for i, op in enumerate(block.ops):
        for nested in op.walk():  # a region's use of an outer value counts as its op's
            for v in nested.operands:
                last_use[id(v)] = i
    for i, op in enumerate(block.ops):
        if op.name in ("return", "yield"):
            return [env[id(v)] for v in op.operands]
        ins = [env[id(v)] for v in op.operands]
        opdef = get_op(op.name)
        if opdef is None:
            raise DiagnosticError(Diagnostic("error", f"'{op.name}' is not a registered op", op.pos, op.loc))
        try:
            if opdef.has("region-body"):  # a cl.launch: its reference is the graph ops it was lowered from
                body = op.regions[0].block
                inner = dict(env)
                inner.update({id(a): x for a, x in zip(body.args, ins, strict=True)})
                out = run_block(module, body, inner)
            elif opdef.has("control"):  # if / loop / scan: the reference runs the regions through `run`
                def run(k: int, args: list[np.ndarray], op: Op = op) -> list[np.ndarray]:
                    scope = dict(env)
                    scope.update({id(a): x for a, x in zip(op.regions[k].block.args, args, strict=True)})
                    return run_block(module, op.regions[k].block, scope)

                out = opdef.reference(op_sig(op, module.resources), *ins, run=run)
            else:
                with np.errstate(all="ignore"):
                    out = opdef.reference(op_sig(op, module.resources), *ins)
        except (ResourceError, OpError) as e:
            text = str(e) if op.name == "assert" else f"'{op.name}' op {e}"  # its message says it all
            raise DiagnosticError(Diagnostic("error", text, op.pos, op.loc)) from None
        outs = list(out) if isinstance(out, list | tuple) else [out]
        for r, o in zip(op.results, outs, strict=True):
            env[id(r)] = np.asarray(o)
        for v in op.operands:
            if last_use.get(id(v)) == i and v.op is not None and v.op.parent is block:
                env.pop(id(v), None)
    raise DiagnosticError(Diagnostic("error", "block has no terminator"))
