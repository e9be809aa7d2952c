"""Target-level ops made by `tessel-codegen`: the OpenCL program, its launches, and the memory plan.

- `cl.program {source = "..."}` holds the OpenCL C of every kernel of the func (one program per model),
  printed raw between triple quotes so it reads as code.
- `buf.alloc {id, bytes}` declares one device buffer of the liveness-based memory plan.
- `cl.launch` runs one or more kernels of the program on its operands (the kernel's buffer arguments) and
  defines its results in the buffers named by `buffers`. Its region is the reference body: the graph ops
  it was lowered from, which is what the numpy target runs and what the launch is validated against.
- `buf.view` reinterprets a row-major buffer with another shape (a reshape that needs no kernel).
"""

from __future__ import annotations

import numpy as np

from ..types import TensorType
from .registry import Cost, OpDef, Sig, attr, check, register


def _nothing(sig: Sig, *args: np.ndarray) -> list[np.ndarray]:
    return []


def _launch_verify(sig: Sig) -> None:
    kernels = sig["kernels"]
    check(isinstance(kernels, list) and (bool(kernels) or sig["assembled"]),
          "'kernels' must be a non-empty list of kernel dicts (empty only for an `assembled` launch)")
    check(-1 <= int(sig["flops_kernel"]) < max(len(kernels), 1),
          f"'flops_kernel' {sig['flops_kernel']} is not the index of one of the {len(kernels)} kernels")
    for k in kernels:
        check(
            isinstance(k, dict) and isinstance(k.get("name"), str),
            "each entry of 'kernels' must be a dict with a 'name'",
        )
        glob = k.get("global")
        check(
            isinstance(glob, list)
            and 1 <= len(glob) <= 3
            and all(isinstance(g, int) and g >= 0 for g in glob),
            f"kernel '{k['name']}' needs a 'global' size of 1 to 3 non-negative ints",
        )
        local = k.get("local", [])
        check(
            isinstance(local, list) and (not local or len(local) == len(glob)),
            f"kernel '{k['name']}' has a 'local' size of another rank than its global size",
        )
        if local:
            check(
                all(g % lo == 0 for g, lo in zip(glob, local, strict=True)),
                f"kernel '{k['name']}': global size {glob} is not a multiple of local size {local}",
            )
    check(
        not sig["offsets"] or (len(sig["offsets"]) == len(sig.results) and min(sig["offsets"]) >= 0),
        f"'offsets' needs one non-negative byte offset for each of the {len(sig.results)} results",
    )
    want = len(sig.results) + len(sig["scratch"])
    check(
        len(sig["buffers"]) == want,
        f"'buffers' names {len(sig['buffers'])} buffers for {len(sig.results)} results and "
        f"{len(sig['scratch'])} scratch buffers",
    )


def _launch_reference(sig: Sig, *args: np.ndarray) -> list[np.ndarray]:
    raise NotImplementedError("cl.launch runs its region")  # the interpreter runs the body instead


def _launch_cost(sig: Sig) -> Cost:
    return Cost(int(sig["flops"]), sum(t.nbytes for t in sig.operands), sum(t.nbytes for t in sig.results))


register(
    OpDef(
        "cl.program",
        (),
        infer=lambda sig: [],
        reference=_nothing,
        results=0,
        attrs={"source": attr("str"), "options": attr("strs", []), "checks": attr("strs", [])},
        traits=frozenset({"target"}),
        cost=lambda sig: Cost(),
        doc="The OpenCL C source of every kernel the func launches, built once per model.",
    )
)

register(
    OpDef(
        "buf.alloc",
        (),
        infer=lambda sig: [],
        reference=_nothing,
        results=0,
        attrs={"id": attr("int"), "bytes": attr("int")},
        traits=frozenset({"target"}),
        cost=lambda sig: Cost(),
        doc="One device buffer of the memory plan; launches name it in their `buffers`.",
    )
)

register(
    OpDef(
        "cl.launch",
        ("args*",),
        infer=lambda sig: list(sig.results),
        reference=_launch_reference,
        results="*",
        regions=1,
        verify=_launch_verify,
        attrs={
            "kernels": attr("any"),
            "buffers": attr("ints"),
            "scratch": attr("ints", []),
            "flops": attr("int", 0),
            "flops_kernel": attr("int", -1),
            "schedule": attr("any", {}),
            "offsets": attr("ints", []),
            "assembled": attr("bool", False),
        },
        traits=frozenset({"target", "region-body"}),
        cost=_launch_cost,
        doc="Enqueues `kernels` (each `{name, global, local, args}`) of the func's cl.program. "
        "`buffers` names "
        "the plan's buffer of each result, then of each temporary (`scratch`, in bytes); `offsets`, when "
        "present, the byte offset of each result in its buffer (a slice of a concatenation assembled in "
        "place). `assembled`: a concat whose operands' producers already wrote its result; it has no "
        "kernels. `flops` (the op's, as the reference counts them) go to kernel `flops_kernel` in profiles "
        "(-1: the last). The region is its reference body.",
    )
)


def _view_infer(sig: Sig) -> list[TensorType]:
    x = sig.operands[0]
    shape = tuple(int(s) for s in sig["shape"])
    check(x.is_static and int(np.prod(shape)) == x.numel, f"cannot view {x} with shape {list(shape)}")
    return [TensorType(shape, x.dtype)]


register(
    OpDef(
        "buf.view",
        ("x",),
        infer=_view_infer,
        reference=lambda sig, x: x.reshape([int(s) for s in sig["shape"]]),
        attrs={"shape": attr("ints")},
        traits=frozenset({"pure", "target"}),
        cost=lambda sig: Cost(),
        doc="The operand's buffer seen with another shape (row-major): a reshape that needs no kernel.",
    )
)
