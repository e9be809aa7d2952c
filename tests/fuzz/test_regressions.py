"""Bugs the fuzzers found, each kept as the smallest graph or text that showed it.

A graph case is ONNX's text form (`onnx.parser.parse_model`; `make fuzz` writes it in each failure's
.txt note), checked by the fuzzing property at -O0..-O3 on numpy and, where there is a platform, OpenCL.
To add one: paste the graph from `fuzz-results/<run>/graph-N.txt` into GRAPHS under a name saying what
broke, reduce it by hand while `--replay` still fails, and say in a comment which file the fix is in.
"""

from __future__ import annotations

import onnx
import pytest

from tests.fuzz.graphs import GraphCase, default_feeds
from tests.fuzz.property import LEVELS, check_graph, opencl_device

GRAPHS: dict[str, str] = {
    # passes/propagate_layout.py (hoist): sinking the NCHW16c unpack through `add` left the original
    # constant unused, the greedy driver erased it, and hoisting the add back to NCHW used the erased value
    # ("operand does not dominate this use" after propagate-layout, -O2 and -O3).
    "propagate_layout_hoist_reuses_erased_constant": """
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[1,1,1,1] x) => (float[1,16,1,1] y)
           <float[16,1,1,1] w = {-1,-0.8,-0.7,-0.6,-0.5,-0.3,-0.2,-0.1,0.1,0.2,0.3,0.5,0.6,0.7,0.8,1},
            float[1,16,1,1] c = {-1,-0.8,-0.7,-0.6,-0.5,-0.3,-0.2,-0.1,0.1,0.2,0.3,0.5,0.6,0.7,0.8,1}>
        {
           t = Conv <kernel_shape = [1, 1]> (x, w)
           r = Relu (t)
           y = Add (c, r)
        }
    """,
    # frontends/onnx/ops/tensor.py: wrap padding gathers a static index list; with the graph's dims symbolic
    # (the +dyn run) it crashed on the symbolic size instead of refusing it (a limit, not a finding).
    "wrap_pad_of_a_symbolic_dim_is_refused_not_a_crash": """
        <ir_version: 10, opset_import: ["" : 21]>
        fuzz (float[1,1,1,1] x1) => (float[1,1,1,2] t3)
           <int64[8] k2 = {0,0,0,0,0,0,0,1}>
        {
           t3 = Pad <mode: string = "wrap"> (x1, k2)
        }
    """,
    # frontends/onnx/ops/reduce.py: with noop_with_empty_axes and empty axes the import returned the input
    # unchanged, but only the reduction is skipped: ReduceL1/L2 give |x|, ReduceSumSquare x^2, ReduceLogSum
    # log(x) (onnx's spec note; onnxruntime agrees).
    "reduce_noop_with_empty_axes_keeps_the_elementwise_steps": """
        <ir_version: 8, opset_import: ["" : 18]>
        g (float[2,3] x) => (float[2,3] l2, float[2,3] l1, float[2,3] ss, float[2,3] ls, float[2,3] lse,
                             float[2,3] s)
           <int64[0] k = {}>
        {
           l2 = ReduceL2 <noop_with_empty_axes = 1> (x, k)
           l1 = ReduceL1 <noop_with_empty_axes = 1> (x, k)
           ss = ReduceSumSquare <noop_with_empty_axes = 1> (x, k)
           p = Sigmoid (x)
           ls = ReduceLogSum <noop_with_empty_axes = 1> (p, k)
           lse = ReduceLogSumExp <noop_with_empty_axes = 1> (x, k)
           s = ReduceSum <noop_with_empty_axes = 1> (x, k)
        }
    """,
    # targets/opencl/kernels/norm.py: a layer_norm whose scale or bias broadcasts over part of the normalized
    # dims had no OpenCL kernel, and passes/recognize_layernorm.py made exactly that (a ones scale of [C]
    # over [H, C]) for an expanded LayerNorm over two axes without gamma: -O2 failed to lower.
    "layer_norm_scale_broadcast_over_part_of_the_normalized_dims": """
        <ir_version: 8, opset_import: ["" : 18]>
        g (float[3,4,6] x) => (float[3,4,6] y, float[3,4,6] z, float[3,4,6] u, float[3,4,6] n)
           <float[6] gam = {0.5,1,1.5,2,-1,0.25}, float[4,1] g2 = {1,2,-1,0.5},
            float[4,6] bet = {1,2,3,4,5,6,1,2,3,4,5,6,1,2,3,4,5,6,1,2,3,4,5,6}, int64[2] ax = {1,2},
            float eps = {1e-5}>
        {
           m = ReduceMean <keepdims = 1> (x, ax)
           d = Sub (x, m)
           s = Mul (d, d)
           v = ReduceMean <keepdims = 1> (s, ax)
           ve = Add (v, eps)
           sd = Sqrt (ve)
           n = Div (d, sd)
           y1 = Mul (n, gam)
           y = Add (y1, bet)
           z = LayerNormalization <axis = -2> (x, g2)
           u = LayerNormalization <axis = 1> (x, gam, bet)
        }
    """,
    # ir/ops/resize.py (_source_coords, which the OpenCL kernel's index tables use too): given sizes, the
    # source coordinate was x / f32(out / in), and 4 / f32(8 / 7) = 3.4999998, one ulp below the tie, so
    # round_prefer_ceil took index 3; onnxruntime and onnx's reference compute x * in / out = 3.5 -> 4.
    "resize_nearest_sizes_rounds_an_exact_tie": """
        <ir_version: 8, opset_import: ["" : 13]>
        g (float[1,7] x) => (float[1,8] y, float[1,8] z, float[2,14] u)
           <int64[2] s = {1, 8}, int64[2] s2 = {2, 14}>
        {
           y = Resize <coordinate_transformation_mode = "asymmetric",
                       nearest_mode = "round_prefer_ceil"> (x, , , s)
           z = Resize <coordinate_transformation_mode = "tf_half_pixel_for_nn",
                       nearest_mode = "ceil"> (x, , , s)
           u = Resize <mode = "linear"> (x, , , s2)
        }
    """,
}

_W = ",".join(f"{(i * 37 % 19 - 9) / 10}" for i in range(16 * 9))
# targets/opencl/kernels/conv_repack.py (transposed_row): the repack read 16 columns at a time and let a
# chunk run past its row into the next ones, but in a plane under 16 columns wide the second-to-last row's
# chunk ran past the plane, and in the tensor's last plane past the end of x: a read out of bounds by two
# elements that --check-bounds reports (found with the fuzzer's checked runs; also shufflenet's 7x7 stage).
GRAPHS["conv_repack_reads_past_the_last_plane"] = f"""
        <ir_version: 7, opset_import: ["" : 13]>
        g (float[1,16,4,7] x) => (float[1,16,4,7] y)
           <float[16,1,3,3] w = {{{_W}}}>
        {{
           y = Conv <group = 16, pads = [1, 1, 1, 1]> (x, w)
        }}
"""

XFAIL: dict[str, str] = {}
"""Cases whose bug is not fixed yet: name -> the reason (the test is xfail(strict=True))."""


def _case(text: str) -> GraphCase:
    model = onnx.parser.parse_model(text)
    onnx.checker.check_model(model, full_check=True)
    return GraphCase(model, default_feeds(model), [n.op_type for n in model.graph.node])


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=XFAIL[n])) if n in XFAIL else n
    for n in GRAPHS])
def test_graph_regression(name: str) -> None:
    targets = ["numpy"] + ([] if isinstance(opencl_device(), str) else ["opencl"])
    out = check_graph(_case(GRAPHS[name]), LEVELS, targets)
    assert out.status == "ok", out.reason + "\n".join(str(f) for f in out.findings)
    assert len(out.compared) == len(LEVELS) * len(targets)


TEXTS: dict[str, bytes] = {
    # ir/ops/resize.py: a scale beyond f32's range (inf in f32) passed `> 0`, then verify's floor(n * scale)
    # raised OverflowError (tessel-opt: internal compiler error); now infer rejects it.
    "resize_scale_beyond_f32": b"func@s(%x:tensor<1x3x8x8xf32>)->tensor<1xf32>{%0=resize%x{sizes=[1,3,16,16],"
                               b"scales=[1e39,1,3,2]}:(tensor<1x3x8x8xf32>)->tensor<1x3x16x16xf32>}",
    # ir/symbolic.py (the dim parser): `[1%0]` in an int attribute raised ZeroDivisionError; now a divisor
    # that is not positive is a positioned parse error.
    "symbolic_modulo_by_zero": b"func@m(%x:tensor<9xf32>,%w:tensor<1xf32>)->tensor<1xf32>"
                               b"{%0=conv2d%x,%w{a=[1%0]",
    # ir/parser.py (parse_resources): a non-UTF-8 byte in a quoted resource name raised UnicodeDecodeError.
    "resource_name_not_utf8": b'{-#resources:{"\xca1":"',
}
"""Texts the parser fuzzer found: parsing and verifying each gives a module or a DiagnosticError."""


@pytest.mark.parametrize("name", list(TEXTS))
def test_text_regression(name: str) -> None:
    from tests.fuzz.mutate import check_parse

    assert check_parse(TEXTS[name]) is None


def test_deeply_nested_brackets_are_a_diagnostic() -> None:
    """ir/parser.py: `[[[[...` a thousand deep raised RecursionError (tessel-opt: internal compiler error,
    exit 3); now it is a positioned diagnostic."""
    from tessel.ir.diagnostics import DiagnosticError
    from tessel.ir.parser import parse_module

    text = "func @f() -> () {\n  %0 = const {value = " + "[" * 5000 + "} : () -> tensor<f32>\n  return\n}\n"
    with pytest.raises(DiagnosticError, match="nest too deeply") as info:
        parse_module(text, "deep.tsl", register_source=False)
    pos = info.value.diagnostics[0].pos
    assert pos is not None and pos.line == 2
