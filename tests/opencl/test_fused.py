"""The fused `kernel` template (targets/opencl/kernels/fused.py) end to end: small modules holding `kernel`
regions of each shape of the fused-region contract are lowered, must give exactly one launch per region (no
fallback to the region's ops), and run on OpenCL to the numpy interpreter's results; then the fuse pass on
a random-weight resnet50 against onnxruntime.

Weights are `const`s (given random values after parsing), so their packing happens at load time and the
launch count is the regions'."""

from __future__ import annotations

import re

import numpy as np
import pytest
from tessel.ir.attributes import DenseAttr
from tessel.ir.core import Module
from tessel.ir.interpreter import run_func
from tessel.ir.parser import parse_module
from tessel.targets.opencl.lower import lower_module
from tessel.targets.opencl.runtime import Executable

from .conftest import here

TOL = {"rtol": 1e-4, "atol": 1e-5}


def T(*dims: int, dtype: str = "f32") -> str:
    return f"tensor<{'x'.join(map(str, dims))}{'x' if dims else ''}{dtype}>"


def module(
    args: dict[str, str],
    consts: dict[str, str],
    body: str,
    operands: list[str],
    results: list[str],
    kind: str,
) -> str:
    """A func running one `kind` region: `args` (name -> type) are func arguments, `consts` (name -> type)
    weights, `body` the region's ops over block args named like the operands with a `_` prefix."""
    sig = ", ".join(f"%{n}: {t}" for n, t in args.items())
    types = {**args, **consts}
    ins = ", ".join(f"%{o}" for o in operands)
    in_types = ", ".join(types[o] for o in operands)
    out = results[0] if len(results) == 1 else f"({', '.join(results)})"
    lines = ["module @m {", f"  func @main({sig}) -> {out} {{"]
    lines += [f"    %{n} = const {{value = dense<0.0> : {t}}} : () -> {t}" for n, t in consts.items()]
    names = ", ".join(f"%r{j}" for j in range(len(results)))
    lines += [
        f'    {names} = kernel {ins} {{kind = "{kind}"}} : ({in_types}) -> {out} ({{',
        f"    ^bb0({', '.join(f'%_{o}: {types[o]}' for o in operands)}):",
        *[f"      {ln.strip()}" for ln in body.strip().splitlines()],
        "    })",
        f"    return {names} : {', '.join(results)}",
        "  }",
        "}",
    ]
    return "\n".join(lines) + "\n"


def randomize(m: Module, rng: np.random.Generator) -> None:
    for op in m.funcs[0].block.ops:
        if (
            op.name == "const"
            and op.attrs["value"].is_splat
            and float(op.attrs["value"].splat_value()) == 0.0
        ):
            t = op.results[0].type
            op.attrs["value"] = DenseAttr(t, (0.5 * rng.standard_normal(t.dims)).astype(t.np_dtype))


def run(text: str, *, regions: int = 1, seed: int = 0) -> tuple[Module, list[np.ndarray]]:
    """Lower `text`, check one launch per region, run on OpenCL and compare with the interpreter."""
    want_m, got_m = parse_module(text), parse_module(text)
    randomize(want_m, np.random.default_rng(seed))
    randomize(got_m, np.random.default_rng(seed))
    func = want_m.funcs[0]
    rng = np.random.default_rng(seed + 1)
    inputs = [rng.standard_normal(a.type.dims).astype(a.type.np_dtype) for a in func.args]
    want = run_func(want_m, func, inputs)
    lower_module(got_m)  # the generic device, whose kernel shapes the tests below pin
    launches = [op for op in got_m.funcs[0].block.ops if op.name == "cl.launch"]
    assert len(launches) == regions, [op.regions[0].block.ops[-2].name for op in launches]
    assert all(op.regions[0].block.ops[-2].name == "kernel" for op in launches)
    got = Executable(got_m, got_m.funcs[0]).run(inputs)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, **TOL)
    return got_m, got


def source(m: Module) -> str:
    return next(op.attrs["source"] for op in m.funcs[0].block.ops if op.name == "cl.program")


# elementwise regions ------------------------------------------------------------------------------------
def test_elementwise_broadcasting_constants_and_two_yields() -> None:
    """Per-channel, row and scalar broadcasts, a splat and a small constant array inside, two results:
    one vectorized kernel."""
    x, b, r = T(2, 8, 5, 16), T(8, 1, 1), T(16)
    row = ", ".join(str(0.5 * i) for i in range(16))
    body = f"""
    %k = const {{value = dense<0.5> : {T()}}} : () -> {T()}
    %v = const {{value = dense<[{row}]> : {r}}} : () -> {r}
    %a = add %_x, %_b : ({x}, {b}) -> {x}
    %m = mul %a, %k : ({x}, {T()}) -> {x}
    %s = sub %m, %v : ({x}, {r}) -> {x}
    %t = mul %s, %_r : ({x}, {r}) -> {x}
    %y = relu %t : ({x}) -> {x}
    %z = sigmoid %m : ({x}) -> {x}
    yield %y, %z : {x}, {x}"""
    m, _ = run(module({"x": x, "b": b, "r": r}, {}, body, ["x", "b", "r"], [x, x], "elementwise"))
    assert "float16 t" in source(m) and re.search(r"__constant float k0_\w+_a0\[16\]", source(m))


def test_elementwise_scalar_path_with_a_tail() -> None:
    """A select through an i1 mask and a cast has no vector form: the scalar loop, rows of 7."""
    x, b = T(3, 5, 7), T(5, 1)
    xi = T(3, 5, 7, dtype="i32")
    body = f"""
    %z = const {{value = dense<0.0> : {T()}}} : () -> {T()}
    %c = greater %_x, %z : ({x}, {T()}) -> {T(3, 5, 7, dtype="i1")}
    %s = mul %_x, %_b : ({x}, {b}) -> {x}
    %w = where %c, %_x, %s : ({T(3, 5, 7, dtype="i1")}, {x}, {x}) -> {x}
    %i = cast %w {{to = "i32"}} : ({x}) -> {xi}
    yield %w, %i : {x}, {xi}"""
    m, _ = run(module({"x": x, "b": b}, {}, body, ["x", "b"], [x, xi], "elementwise"))
    assert "for (int k = 0;" in source(m)


def test_batch_norm_region_is_elementwise() -> None:
    """A reduction region around batch_norm (a per-channel affine map) runs as one elementwise kernel."""
    x, c = T(1, 32, 6, 6), T(32)
    body = f"""
    %n = batch_norm %_x, %_s, %_b, %_m, %_v {{epsilon = 0.001}} : ({x}, {c}, {c}, {c}, {c}) -> {x}
    %a = add %n, %_r : ({x}, {x}) -> {x}
    %y = relu %a : ({x}) -> {x}
    yield %y : {x}"""
    consts = {"s": c, "b": c, "m": c, "v": c}
    text = module({"x": x, "r": x}, consts, body, ["x", "s", "b", "m", "v", "r"], [x], "reduction")
    text = text.replace("%v = const {value = dense<0.0>", "%v = const {value = dense<1.0>")  # var > 0
    run(text)


# epilogue regions ---------------------------------------------------------------------------------------
def conv_region(
    cin: int, cout: int, hw: int, chain: str, extra: dict[str, str], *, bias_in_conv: bool
) -> str:
    x, w, y = T(1, cin, hw, hw), T(cout, cin, 3, 3), T(1, cout, hw, hw)
    bias = ", %_b" if bias_in_conv else ""
    btype = f", {T(cout)}" if bias_in_conv else ""
    body = f"""
    %c = conv2d %_x, %_w{bias} {{pads = [1, 1, 1, 1]}} : ({x}, {w}{btype}) -> {y}
    {chain}"""
    consts = {"w": w, **({"b": T(cout)} if bias_in_conv else {})}
    operands = ["x", "w", *(["b"] if bias_in_conv else []), *extra]
    return module({"x": x, **extra}, consts, body, operands, [y], "epilogue")


def test_conv_bias_relu() -> None:
    """The bias as an epilogue operand ([C, 1, 1], loaded at the channel of the NCHW index), then ReLU: on
    each pixel's channel vector at once (the chain's helper with a plane's lane step, its 16 lanes then
    stored a plane apart), not lane by lane."""
    x, w, y, b = T(1, 16, 10, 10), T(32, 16, 3, 3), T(1, 32, 10, 10), T(32, 1, 1)
    body = f"""
    %c = conv2d %_x, %_w {{pads = [1, 1, 1, 1]}} : ({x}, {w}) -> {y}
    %a = add %c, %_b : ({y}, {b}) -> {y}
    %r = relu %a : ({y}) -> {y}
    yield %r : {y}"""
    m, _ = run(module({"x": x}, {"w": w, "b": b}, body, ["x", "w", "b"], [y], "epilogue"))
    src = source(m)
    assert re.search(r"const float16 r0 = k\d+_\w+_epc16\(\(acc0\), y0, ep2\);", src), src
    assert re.search(r"Y\[y0 \+ 100\] = r0\.s1;", src) and "_epi1(" not in src


@pytest.mark.parametrize("channels", [20, 24, 32])
def test_conv_residual_add_relu(channels: int) -> None:
    """A chain reading an NCHW operand: on 24 and 32 channels (three float8 columns, two float16 ones) each
    pixel's vector at once (the residual's lanes read a plane apart); 20 channels end in a partial vector,
    whose lanes past the last channel would read past the residual, so that conv keeps the chain lane by
    lane."""
    y = T(1, channels, 9, 9)
    chain = f"""%a = add %c, %_res : ({y}, {y}) -> {y}
    %r = relu %a : ({y}) -> {y}
    yield %r : {y}"""
    m, _ = run(conv_region(channels, channels, 9, chain, {"res": y}, bias_in_conv=True))
    assert ("_epc" in source(m)) == (channels != 20) and ("_epi1(" in source(m)) == (channels == 20)


CTM = "coordinate_transformation_mode"


@pytest.mark.parametrize(
    ("n", "cin", "cout", "groups", "k", "src", "dst", "resize", "conv"),
    [(1, 16, 32, 1, 3, (6, 6), (12, 12), f'{CTM} = "asymmetric", nearest_mode = "floor"',
      "pads = [1, 1, 1, 1]"),
     (1, 16, 16, 16, 3, (7, 7), (14, 14), "", "pads = [1, 1, 1, 1]"),
     (1, 8, 8, 1, 1, (7, 7), (14, 14), f'{CTM} = "align_corners"', ""),
     (1, 4, 8, 1, 3, (6, 6), (15, 15), 'nearest_mode = "round_prefer_ceil"',
      "pads = [1, 1, 1, 1], strides = [2, 2]"),
     (2, 8, 8, 2, 3, (5, 5), (10, 10), f'{CTM} = "tf_half_pixel_for_nn", nearest_mode = "ceil"',
      "pads = [0, 1, 2, 1]"),
     (1, 4, 4, 1, 3, (8, 8), (16, 8), "", "pads = [1, 1, 1, 1]"),
     (1, 16, 16, 1, 3, (10, 10), (20, 20), "", "pads = [1, 1, 1, 1]"),
     (1, 32, 16, 1, 3, (5, 9), (20, 36), "", "pads = [1, 1, 1, 1]"),
     (1, 20, 16, 1, 3, (5, 9), (10, 18), "", "pads = [1, 1, 1, 1]"),
     (1, 16, 16, 16, 3, (16, 16), (32, 32), f'{CTM} = "asymmetric", nearest_mode = "floor"',
      "pads = [1, 1, 1, 1]"),
     (1, 16, 16, 1, 3, (12, 24), (24, 24), "", "pads = [1, 1, 1, 1]")],
    ids=["dense-2x-asymmetric", "depthwise-2x", "1x1-align-corners", "non-integer-strided", "grouped-batch2",
         "rows-only", "2x-vectors-and-tail", "4x", "channel-tail", "depthwise-2x-vectors",
         "rows-only-vectors"],
)
def test_nearest_resize_read_by_the_conv(n: int, cin: int, cout: int, groups: int, k: int,
                                         src: tuple[int, int], dst: tuple[int, int], resize: str,
                                         conv: str) -> None:
    """A nearest resize fused into a conv (Upsample -> Conv): one launch whose input repack reads each pixel
    from the resize's source pixel through the reference's index tables, for every coordinate and rounding
    mode, non-integer scales, and the convs that would otherwise read their input in place (1x1) or
    repack it in local memory (depthwise); the upsampled tensor is never written."""
    x, u, w = T(n, cin, *src), T(n, cin, *dst), T(cout, cin // groups, k, k)
    pads = [int(p) for p in re.findall(r"\d+", conv.split("strides")[0])] or [0, 0, 0, 0]
    stride = 2 if "strides" in conv else 1
    ho = (dst[0] + pads[0] + pads[2] - k) // stride + 1
    wo = (dst[1] + pads[1] + pads[3] - k) // stride + 1
    y, b = T(n, cout, ho, wo), T(cout, 1, 1)
    attrs = ", ".join(a for a in (f"sizes = [{n}, {cin}, {dst[0]}, {dst[1]}]", resize) if a)
    body = f"""
    %u = resize %_x {{{attrs}}} : ({x}) -> {u}
    %c = conv2d %u, %_w {{{", ".join(a for a in (conv, f"groups = {groups}") if a)}}} : ({u}, {w}) -> {y}
    %a = add %c, %_b : ({y}, {b}) -> {y}
    %r = relu %a : ({y}) -> {y}
    yield %r : {y}"""
    m, _ = run(module({"x": x}, {"w": w, "b": b}, body, ["x", "w", "b"], [y], "epilogue"))
    text = source(m)
    assert f"upsampled to [{dst[0]}, {dst[1]}] (nearest" in text and "_uy[" in text and "_ux[" in text
    period = dst[1] // src[1] if dst[1] % src[1] == 0 and "align" not in resize else 0
    if period in (1, 2, 4) and ((cin // groups) % 16 == 0 or groups == cin >= 16):
        # 16-channel blocks, a column period of 1, 2 or 4: whole source vectors widened, transposed
        assert f"vload{16 // period}(0, x + " in text, text
    else:
        assert "gathered into one vector" in text


def test_matmul_add_gelu() -> None:
    """Bias along N (40: a vector column and a tail) read with vector loads in the epilogue."""
    a, b, y, bias = T(2, 33, 24), T(24, 40), T(2, 33, 40), T(40)
    body = f"""
    %m = matmul %_a, %_w : ({a}, {b}) -> {y}
    %s = add %m, %_bias : ({y}, {bias}) -> {y}
    %g = gelu %s : ({y}) -> {y}
    yield %g : {y}"""
    m, _ = run(module({"a": a}, {"w": b, "bias": bias}, body, ["a", "w", "bias"], [y], "epilogue"))
    assert re.search(r"k\d+_\w+_epi16\(", source(m))


def test_gemm_epilogue() -> None:
    """gemm (transposed B, C) then a per-row scale ([M, 1]: splat lanes) and a clip."""
    a, b, c, y, s = T(20, 48), T(36, 48), T(36), T(20, 36), T(20, 1)
    body = f"""
    %g = gemm %_a, %_w, %_c {{trans_b = true, alpha = 0.5}} : ({a}, {b}, {c}) -> {y}
    %m = mul %g, %_s : ({y}, {s}) -> {y}
    %r = clip %m {{min = -0.5, max = 0.5}} : ({y}) -> {y}
    yield %r : {y}"""
    run(module({"a": a, "s": s}, {"w": b, "c": c}, body, ["a", "w", "c", "s"], [y], "epilogue"))


@pytest.mark.parametrize(
    ("m", "k", "n", "tail"),
    [(64, 128, 128, "post"), (33, 24, 40, "none"), (5, 7, 48, "post"), (20, 64, 128, "one-scale")],
    ids=["bert-shape-with-epilogue", "scalar-rows-and-m-tail", "tiny-k", "scalar-scale-no-bias"],
)
def test_matmul_residual_layer_norm_in_one_launch(m: int, k: int, n: int, tail: str) -> None:
    """matmul + bias + residual, then layer_norm over N (and an epilogue after it) in one launch: each
    work-item stores its rows' pre-norm values, then normalizes them in place. N = 40 is not whole
    vectors (the row pass goes scalar); M = 33 and 5 leave a partial row block."""
    a, w, y, v = T(2, m, k), T(k, n), T(2, m, n), T(n)
    one = tail == "one-scale"
    g = T(1) if one else v
    norm = (f"%n = layer_norm %r, %_g {{axis = -1, epsilon = 1e-5}} : ({y}, {g}) -> {y}" if one else
            f"%n = layer_norm %r, %_g, %_gb {{axis = -1, epsilon = 1e-5}} : ({y}, {v}, {v}) -> {y}")
    after = f"""
    %e = mul %n, %_s : ({y}, {v}) -> {y}
    %o = relu %e : ({y}) -> {y}
    yield %o : {y}""" if tail == "post" else f"""
    yield %n : {y}"""
    body = f"""
    %p = matmul %_a, %_w : ({a}, {w}) -> {y}
    %q = add %p, %_bias : ({y}, {v}) -> {y}
    %r = add %q, %_res : ({y}, {y}) -> {y}
    {norm}""" + after
    consts = {"w": w, "bias": v, "g": g, **({} if one else {"gb": v}), **({"s": v} if tail == "post" else {})}
    operands = ["a", "w", "bias", "res", "g", *([] if one else ["gb"]), *(["s"] if tail == "post" else [])]
    text = module({"a": a, "res": y}, consts, body, operands, [y], "epilogue")
    lowered, _ = run(text)
    src = source(lowered)
    assert "normalize the rows just computed" in src
    assert ("_post" in src) == (tail == "post")


def test_gemm_layer_norm_without_chain_before() -> None:
    """gemm (transposed B, bias C) read straight into the layer_norm: no helper before the norm."""
    a, b, c, y = T(12, 32), T(64, 32), T(64), T(12, 64)
    body = f"""
    %g = gemm %_a, %_w, %_c {{trans_b = true}} : ({a}, {b}, {c}) -> {y}
    %n = layer_norm %g, %_s, %_t {{axis = 1, epsilon = 1e-3}} : ({y}, {c}, {c}) -> {y}
    yield %n : {y}"""
    m, _ = run(module({"a": a}, {"w": b, "c": c, "s": c, "t": c}, body, ["a", "w", "c", "s", "t"], [y],
                      "epilogue"))
    assert "_epi" not in source(m)


@pytest.mark.parametrize(
    ("shape", "n", "params", "after"),
    [((2, 32, 128), 384, "both", "bias"), ((1, 17, 64), 256, "both", "gelu"), ((33, 24), 40, "scale", "none"),
     ((3, 20), 48, "scalar", "none"), ((1, 5, 12), 1, "both", "none")],
    ids=["gpt2-qkv", "vit-fc1-gelu", "k-by-8-n-tail", "scalar-scale-no-bias", "gemv"],
)
def test_layer_norm_before_matmul_in_one_launch(shape: tuple[int, ...], n: int, params: str,
                                                after: str) -> None:
    """A layer_norm over K read by a matmul (pre-LN transformers): the matmul normalizes A's rows as it
    reads them, the normalized A is never written. K = 24 and 12 take 8- and 4-lane statistics."""
    k = shape[-1]
    x, w, y, v = T(*shape), T(k, n), T(*shape[:-1], n), T(n)
    ps = {"both": [T(k), T(k)], "scale": [T(k)], "scalar": [T(1)]}[params]
    names = ["g", "gb"][: len(ps)]
    norm = (f"%n = layer_norm %_x, {', '.join(f'%_{p}' for p in names)} {{axis = -1, epsilon = 1e-5}} : "
            f"({x}, {', '.join(ps)}) -> {x}")
    tail = {"bias": [f"%q = add %p, %_bias : ({y}, {v}) -> {y}", f"yield %q : {y}"],
            "gelu": [f"%q = add %p, %_bias : ({y}, {v}) -> {y}", f"%o = gelu %q : ({y}) -> {y}",
                     f"yield %o : {y}"],
            "none": [f"yield %p : {y}"]}[after]
    body = "\n".join([norm, f"%p = matmul %n, %_w : ({x}, {w}) -> {y}", *tail])
    consts = {**dict(zip(names, ps, strict=True)), "w": w, **({"bias": v} if after != "none" else {})}
    operands = ["x", *names, "w", *(["bias"] if after != "none" else [])]
    lowered, _ = run(module({"x": x}, consts, body, operands, [y], "epilogue"))
    assert "A's rows normalized as read" in source(lowered)


def test_layer_norm_through_a_view_before_gemm() -> None:
    """GPT-2's Conv1D: the norm's [1, T, C] result viewed as [T, C] rows before a gemm (bias C): the view
    joins the kernel too, which reads the norm's input as the same rows."""
    x, a, w, c, y = T(1, 32, 64), T(32, 64), T(64, 192), T(192), T(32, 192)
    body = f"""
    %n = layer_norm %_x, %_p, %_q {{axis = 2}} : ({x}, {T(64)}, {T(64)}) -> {x}
    %v = reshape %n {{shape = [32, 64]}} : ({x}) -> {a}
    %g = gemm %v, %_w, %_c : ({a}, {w}, {c}) -> {y}
    yield %g : {y}"""
    consts = {"p": T(64), "q": T(64), "w": w, "c": c}
    m, _ = run(module({"x": x}, consts, body, ["x", "p", "q", "w", "c"], [y], "epilogue"))
    assert "A's rows normalized as read" in source(m)


def test_layer_norm_before_gemm_and_after_it() -> None:
    """A gemm whose A is normalized as read and whose rows are normalized after: both in one launch."""
    a, b, c, y = T(12, 32), T(64, 32), T(64), T(12, 64)
    body = f"""
    %n = layer_norm %_a, %_p, %_q {{axis = 1}} : ({a}, {T(32)}, {T(32)}) -> {a}
    %g = gemm %n, %_w, %_c {{trans_b = true}} : ({a}, {b}, {c}) -> {y}
    %o = layer_norm %g, %_s, %_t {{axis = 1, epsilon = 1e-3}} : ({y}, {c}, {c}) -> {y}
    yield %o : {y}"""
    consts = {"p": T(32), "q": T(32), "w": b, "c": c, "s": c, "t": c}
    m, _ = run(module({"a": a}, consts, body, ["a", "p", "q", "w", "c", "s", "t"], [y], "epilogue"))
    src = source(m)
    assert "A's rows normalized as read" in src and "normalize the rows just computed" in src


@pytest.mark.parametrize(
    ("sizes", "cols"), [((128, 128, 128), 16), ((24, 8, 40), 8), ((12, 20), 4)], ids=["qkv", "by-8", "by-4"]
)
def test_matmul_split_stores_each_piece(sizes: tuple[int, ...], cols: int) -> None:
    """matmul + bias, then a split of the columns: each vector goes straight to its piece's result, the
    vector width being the largest power of two dividing every piece."""
    n = sum(sizes)
    a, w, y, v = T(1, 64, 32), T(32, n), T(1, 64, n), T(n)
    pieces = [T(1, 64, s) for s in sizes]
    names = ", ".join(f"%y{j}" for j in range(len(sizes)))
    body = f"""
    %p = matmul %_a, %_w : ({a}, {w}) -> {y}
    %q = add %p, %_bias : ({y}, {v}) -> {y}
    {names} = split %q {{axis = 2, sizes = {list(sizes)}}} : ({y}) -> ({', '.join(pieces)})
    yield {names} : {', '.join(pieces)}"""
    m, got = run(module({"a": a}, {"w": w, "bias": v}, body, ["a", "w", "bias"], pieces, "epilogue"))
    assert [g.shape[-1] for g in got] == list(sizes)
    launch = next(op for op in m.funcs[0].block.ops if op.name == "cl.launch")
    assert launch.attrs["schedule"]["cols"] == cols


# reduction regions --------------------------------------------------------------------------------------
def test_softmax_with_scaled_masked_prologue() -> None:
    """softmax(x * 0.125 + mask) along the last axis: the scale and a broadcast mask in the prologue."""
    x, mask = T(2, 4, 24, 24), T(1, 1, 24, 24)
    body = f"""
    %k = const {{value = dense<0.125> : {T()}}} : () -> {T()}
    %s = mul %_x, %k : ({x}, {T()}) -> {x}
    %a = add %s, %_mask : ({x}, {mask}) -> {x}
    %y = softmax %a {{axis = -1}} : ({x}) -> {x}
    yield %y : {x}"""
    m, _ = run(module({"x": x, "mask": mask}, {}, body, ["x", "mask"], [x], "reduction"))
    assert re.search(r"k0_\w+_pro16\(", source(m))


def test_log_softmax_column_with_epilogue() -> None:
    """log_softmax over a non-innermost axis (lanes are neighbouring lines) with a broadcast epilogue."""
    x, b = T(3, 10, 20), T(10, 1)
    body = f"""
    %y = log_softmax %_x {{axis = 1}} : ({x}) -> {x}
    %a = mul %y, %_b : ({x}, {b}) -> {x}
    yield %a : {x}"""
    run(module({"x": x, "b": b}, {}, body, ["x", "b"], [x], "reduction"))


def test_layer_norm_with_residual_prologue_and_epilogue() -> None:
    x, g = T(4, 16, 96), T(96)
    body = f"""
    %s = add %_x, %_res : ({x}, {x}) -> {x}
    %n = layer_norm %s, %_g, %_b {{axis = -1}} : ({x}, {g}, {g}) -> {x}
    %e = gelu %n : ({x}) -> {x}
    %y = add %e, %_r2 : ({x}, {g}) -> {x}
    yield %y : {x}"""
    text = module(
        {"x": x, "res": x, "r2": g}, {"g": g, "b": g}, body, ["x", "res", "g", "b", "r2"], [x], "reduction"
    )
    m, _ = run(text)
    assert re.search(r"k0_\w+_pro16\(", source(m)) and re.search(r"k0_\w+_epi16\(", source(m))


def test_reduce_mean_with_epilogue() -> None:
    x, y, s = T(2, 32, 7, 7), T(2, 32, 1, 1), T(1, 32, 1, 1)
    body = f"""
    %r = reduce_mean %_x {{axes = [2, 3], keepdims = true}} : ({x}) -> {y}
    %m = mul %r, %_s : ({y}, {s}) -> {y}
    %t = tanh %m : ({y}) -> {y}
    yield %t : {y}"""
    run(module({"x": x, "s": s}, {}, body, ["x", "s"], [y], "reduction"))


@pytest.mark.parametrize(
    ("shape", "axes", "op", "extra"),
    [((1, 24, 128), [-1], "reduce_mean", False),  # RMSNorm's mean of squares: a row kernel
     ((2, 32, 7, 7), [2, 3], "reduce_mean", True),  # a global pool after an activation and a residual
     ((64, 24), [0], "reduce_sum", True),  # a column kernel
     ((3, 40000), [1], "reduce_mean", True),  # a row split across work-items: the prologue in the first
     ((40000, 6), [0], "reduce_max", False),  # a column split
     ((5, 37), [1], "reduce_log_sum_exp", True)],
    ids=["rms-row", "pool-2d", "column", "row-split", "column-split", "log-sum-exp"],
)
def test_reduction_with_a_prologue(shape: tuple[int, ...], axes: list[int], op: str, extra: bool) -> None:
    """Elementwise ops computing a reduce_*'s input run on each element as the kernel loads it (the
    reduced input is never written): squares (x * x, as canonicalize turns pow(x, 2)), a sigmoid, and an
    operand of the input's shape read at the element's position, in row, column and split kernels."""
    x = T(*shape)
    keep = [1 if (a % len(shape)) in {b % len(shape) for b in axes} else d for a, d in enumerate(shape)]
    y = T(*keep)
    args = {"x": x, **({"z": x} if extra else {})}
    pro = [f"%q = mul %_x, %_x : ({x}, {x}) -> {x}"]
    if extra:
        pro += [f"%e = add %q, %_z : ({x}, {x}) -> {x}", f"%p = sigmoid %e : ({x}) -> {x}"]
    last = "%p" if extra else "%q"
    body = "\n".join([*pro, f"%r = {op} {last} {{axes = {axes}, keepdims = true}} : ({x}) -> {y}",
                      f"%s = sqrt %r : ({y}) -> {y}", f"yield %s : {y}"])
    m, _ = run(module(args, {}, body, list(args), [y], "reduction"))
    assert "KERNEL_pro" not in source(m) and re.search(r"k\d+_\w+_pro\d+\(", source(m))


@pytest.mark.parametrize(
    ("shape", "axes", "op", "dtype"),
    [((1, 32, 7, 7), [2, 3], "reduce_mean", "ui8"),  # a QDQ squeeze-excitation's pool: a row kernel
     ((64, 24), [0], "reduce_sum", "i8"),  # a column kernel
     ((3, 40000), [1], "reduce_mean", "ui8")],  # a row split: the prologue in the first kernel
    ids=["pool-ui8", "column-i8", "row-split-ui8"],
)
def test_reduction_reads_the_8_bit_values_its_dequantize_prologue_takes(
        shape: tuple[int, ...], axes: list[int], op: str, dtype: str) -> None:
    """A dequantize prologue of 8-bit values: the kernel reads the bytes and converts them as it loads
    them (the dequantized floats are never written), in row, column and split kernels."""
    x, xf = T(*shape, dtype=dtype), T(*shape)
    keep = [1 if (a % len(shape)) in {b % len(shape) for b in axes} else d for a, d in enumerate(shape)]
    y = T(*keep)
    body = "\n".join([
        f"%s = const {{value = dense<0.05> : {T()}}} : () -> {T()}",
        f"%z = const {{value = dense<3> : {T(dtype=dtype)}}} : () -> {T(dtype=dtype)}",
        f"%d = dequantize %_x, %s, %z : ({x}, {T()}, {T(dtype=dtype)}) -> {xf}",
        f"%r = {op} %d {{axes = {axes}, keepdims = true}} : ({xf}) -> {y}", f"yield %r : {y}"])
    m, _ = run(module({"x": x}, {}, body, ["x"], [y], "reduction"))
    c = "uchar" if dtype == "ui8" else "char"
    assert re.search(rf"__global const {c}\* restrict in0", source(m)) and "dequantize" not in [
        op.name for op in m.funcs[0].block.ops]


def test_a_norm_keeps_its_dequantize_prologue_out_of_its_kernel() -> None:
    """layer_norm of dequantized bytes: the norms' kernels read their input as floats, so the region runs
    unfused (two launches) and stays right; only the reduce_* kernels read 8-bit values themselves."""
    x, xf = T(2, 5, 48, dtype="ui8"), T(2, 5, 48)
    text = module({"x": x}, {}, "\n".join([
        f"%s = const {{value = dense<0.05> : {T()}}} : () -> {T()}",
        f"%z = const {{value = dense<3> : {T(dtype='ui8')}}} : () -> {T(dtype='ui8')}",
        f"%d = dequantize %_x, %s, %z : ({x}, {T()}, {T(dtype='ui8')}) -> {xf}",
        f"%n = softmax %d {{axis = -1}} : ({xf}) -> {xf}", f"yield %n : {xf}"]), ["x"], [xf], "reduction")
    want_m, got_m = parse_module(text), parse_module(text)
    func = want_m.funcs[0]
    inputs = [np.random.default_rng(0).integers(0, 256, (2, 5, 48)).astype(np.uint8)]
    want = run_func(want_m, func, inputs)
    lower_module(got_m)
    assert sum(op.name == "cl.launch" for op in got_m.funcs[0].block.ops) == 2
    got = Executable(got_m, got_m.funcs[0]).run(inputs)
    np.testing.assert_allclose(got[0], want[0], **TOL)


def test_global_avg_pool_with_epilogue() -> None:
    x, y = T(1, 48, 7, 7), T(1, 48, 1, 1)
    body = f"""
    %p = global_avg_pool %_x : ({x}) -> {y}
    %r = relu %p : ({y}) -> {y}
    yield %r : {y}"""
    run(module({"x": x}, {}, body, ["x"], [y], "reduction"))


# blocked (NCHWc) layouts --------------------------------------------------------------------------------
def test_blocked_conv_bias_relu_residual() -> None:
    """unpack -> conv2d -> add bias (NCHW, before the pack) -> pack -> add residual (blocked) -> relu."""
    xb, yb, w, b = T(1, 2, 8, 8, 16), T(1, 2, 8, 8, 16), T(32, 32, 3, 3), T(32, 1, 1)
    x, y = T(1, 32, 8, 8), T(1, 32, 8, 8)
    lay = "inner_dims_pos = [1], inner_tiles = [16]"
    body = f"""
    %x = unpack %_xb {{{lay}, shape = [1, 32, 8, 8]}} : ({xb}) -> {x}
    %c = conv2d %x, %_w {{pads = [1, 1, 1, 1]}} : ({x}, {w}) -> {y}
    %a = add %c, %_b : ({y}, {b}) -> {y}
    %p = pack %a {{{lay}}} : ({y}) -> {yb}
    %s = add %p, %_res : ({yb}, {yb}) -> {yb}
    %r = relu %s : ({yb}) -> {yb}
    yield %r : {yb}"""
    m, _ = run(
        module({"xb": xb, "res": yb}, {"w": w, "b": b}, body, ["xb", "w", "b", "res"], [yb], "epilogue")
    )
    launch = next(op for op in m.funcs[0].block.ops if op.name == "cl.launch")
    assert launch.attrs["schedule"]["out_block"] == 16


def test_blocked_conv_with_a_partial_channel_block() -> None:
    """24 output channels in blocks of 16 (what propagate-layout pads 24 -> 32 to): the epilogue runs on
    the 24 real channels, the last block's 8 padding lanes are stored as zeros, matching the reference,
    where hard_swish(0) = 0 keeps the pack's zero padding."""
    xb, yb, w, b = T(1, 1, 8, 8, 16), T(1, 2, 8, 8, 16), T(24, 16, 3, 3), T(24, 1, 1)
    x, y = T(1, 16, 8, 8), T(1, 24, 8, 8)
    lay = "inner_dims_pos = [1], inner_tiles = [16]"
    body = f"""
    %x = unpack %_xb {{{lay}, shape = [1, 16, 8, 8]}} : ({xb}) -> {x}
    %c = conv2d %x, %_w {{pads = [1, 1, 1, 1]}} : ({x}, {w}) -> {y}
    %a = add %c, %_b : ({y}, {b}) -> {y}
    %p = pack %a {{{lay}}} : ({y}) -> {yb}
    %h = hard_swish %p : ({yb}) -> {yb}
    yield %h : {yb}"""
    _, (got,) = run(module({"xb": xb}, {"w": w, "b": b}, body, ["xb", "w", "b"], [yb], "epilogue"))
    assert (got[:, 1, ..., 8:] == 0).all()


def test_blocked_max_pool_with_epilogue() -> None:
    xb, x, y, yb = T(1, 1, 9, 9, 16), T(1, 16, 9, 9), T(1, 16, 4, 4), T(1, 1, 4, 4, 16)
    lay = "inner_dims_pos = [1], inner_tiles = [16]"
    body = f"""
    %x = unpack %_xb {{{lay}, shape = [1, 16, 9, 9]}} : ({xb}) -> {x}
    %p = max_pool2d %x {{kernel = [3, 3], strides = [2, 2]}} : ({x}) -> {y}
    %r = relu %p : ({y}) -> {y}
    %b = pack %r {{{lay}}} : ({y}) -> {yb}
    yield %b : {yb}"""
    run(module({"xb": xb}, {}, body, ["xb"], [yb], "reduction"))


def edge_cases() -> dict[str, str]:
    """Paths the cases above leave out, one region each."""
    cases, lay = {}, "inner_dims_pos = [1], inner_tiles = [16]"
    x, s = T(4, 6, 10), T(6, 1)
    cases["copy-and-small-intermediate"] = module(
        {"x": x, "s": s, "u": s},
        {},
        f"""
    %m = mul %_s, %_u : ({s}, {s}) -> {s}
    %a = add %_x, %m : ({x}, {s}) -> {x}
    %e = exp %a : ({x}) -> {x}
    yield %e, %_x : {x}, {x}""",
        ["x", "s", "u"],
        [x, x],
        "elementwise",
    )
    x, s = T(2, 3, 40), T(3, 1)
    cases["vector-rows-with-tail"] = module(
        {"x": x, "s": s},
        {},
        f"""
    %a = mul %_x, %_s : ({x}, {s}) -> {x}
    %e = hard_swish %a : ({x}) -> {x}
    yield %e : {x}""",
        ["x", "s"],
        [x],
        "elementwise",
    )
    xd = T(3, 17, dtype="f64")
    cases["f64"] = module(
        {"x": xd},
        {},
        f"""
    %e = tanh %_x : ({xd}) -> {xd}
    yield %e : {xd}""",
        ["x"],
        [xd],
        "elementwise",
    )
    a, b, y, m = T(5, 24), T(24, 40), T(5, 40), T(5, 40, dtype="i1")
    cases["matmul-lane-by-lane"] = module(
        {"a": a},
        {"w": b},
        f"""
    %m = matmul %_a, %_w : ({a}, {b}) -> {y}
    %z = const {{value = dense<0.0> : {T()}}} : () -> {T()}
    %c = less %m, %z : ({y}, {T()}) -> {m}
    %k = const {{value = dense<0.1> : {T()}}} : () -> {T()}
    %l = mul %m, %k : ({y}, {T()}) -> {y}
    %r = where %c, %l, %m : ({m}, {y}, {y}) -> {y}
    yield %r : {y}""",
        ["a", "w"],
        [y],
        "epilogue",
    )
    xs, ys = T(4, 70000), T(4, 1)
    cases["split-reduce-sum"] = module(
        {"x": xs, "b": ys},
        {},
        f"""
    %r = reduce_sum %_x {{axes = [1], keepdims = true}} : ({xs}) -> {ys}
    %a = add %r, %_b : ({ys}, {ys}) -> {ys}
    yield %a : {ys}""",
        ["x", "b"],
        [ys],
        "reduction",
    )
    xs, ys = T(6, 2, 37), T(2, 37)
    cases["column-reduce-max"] = module(
        {"x": xs, "b": T(37)},
        {},
        f"""
    %r = reduce_max %_x {{axes = [0], keepdims = false}} : ({xs}) -> {ys}
    %a = mul %r, %_b : ({ys}, {T(37)}) -> {ys}
    yield %a : {ys}""",
        ["x", "b"],
        [ys],
        "reduction",
    )
    xc, wc, bc = T(1, 32, 12, 12), T(32, 1, 3, 3), T(32, 1, 1)
    cases["depthwise-bias-clip"] = module(
        {"x": xc},
        {"w": wc, "b": bc},
        f"""
    %c = conv2d %_x, %_w {{pads = [1, 1, 1, 1], groups = 32}} : ({xc}, {wc}) -> {xc}
    %a = add %c, %_b : ({xc}, {bc}) -> {xc}
    %r = clip %a {{min = 0.0, max = 6.0}} : ({xc}) -> {xc}
    yield %r : {xc}""",
        ["x", "w", "b"],
        [xc],
        "epilogue",
    )
    y4, y5, w1 = T(1, 32, 6, 6), T(1, 2, 6, 6, 16), T(32, 32, 1, 1)
    cases["nchw-chain-then-pack"] = module(
        {"x": y4, "res": y4},
        {"w": w1, "b": bc},
        f"""
    %c = conv2d %_x, %_w : ({y4}, {w1}) -> {y4}
    %a = add %c, %_b : ({y4}, {bc}) -> {y4}
    %s = sub %a, %_res : ({y4}, {y4}) -> {y4}
    %p = pack %s {{{lay}}} : ({y4}) -> {y5}
    yield %p : {y5}""",
        ["x", "w", "b", "res"],
        [y5],
        "epilogue",
    )
    xg, yg, yb = T(1, 32, 5, 5), T(1, 32, 1, 1), T(1, 2, 1, 1, 16)
    cases["global-pool-packed"] = module(
        {"x": xg, "s": bc},
        {},
        f"""
    %p = global_avg_pool %_x : ({xg}) -> {yg}
    %m = mul %p, %_s : ({yg}, {bc}) -> {yg}
    %b = pack %m {{{lay}}} : ({yg}) -> {yb}
    yield %b : {yb}""",
        ["x", "s"],
        [yb],
        "reduction",
    )
    return cases


EDGE = edge_cases()


@pytest.mark.parametrize("name", EDGE)
def test_edge_case(name: str) -> None:
    run(EDGE[name])


# what the template refuses falls back to the region's ops ------------------------------------------------
def test_generic_region_falls_back_op_by_op() -> None:
    x = T(4, 8)
    body = f"""
    %a = relu %_x : ({x}) -> {x}
    %t = transpose %a {{perm = [1, 0]}} : ({x}) -> {T(8, 4)}
    yield %t : {T(8, 4)}"""
    text = module({"x": x}, {}, body, ["x"], [T(8, 4)], "generic")
    with pytest.raises(AssertionError, match=r"\['relu', 'transpose'\]"):
        run(text)


def test_source_is_deterministic() -> None:
    x, b = T(2, 8, 5, 16), T(8, 1, 1)
    body = f"""
    %a = add %_x, %_b : ({x}, {b}) -> {x}
    yield %a : {x}"""
    text = module({"x": x, "b": b}, {}, body, ["x", "b"], [x], "elementwise")
    one, two = parse_module(text), parse_module(text)
    lower_module(one)
    lower_module(two)
    assert source(one) == source(two)
    assert re.search(r"fused elementwise: add", source(one))


# end to end ---------------------------------------------------------------------------------------------
PIPELINES = {
    "fuse": "canonicalize,fold-constants,cse,dce,fuse",  # batch_norm + relu (+ add) regions
    "fold-batchnorm+fuse": "canonicalize,fold-batchnorm,fold-constants,cse,dce,fuse",  # NCHW conv epilogues
    "O2": "",  # -O2: NCHWc layouts, so blocked conv epilogues and pools
}


@pytest.mark.parametrize("name", PIPELINES)
def test_resnet50_fused_matches_onnxruntime(name: str) -> None:
    """The random-weight light resnet50 through `fuse`: every region one launch, logits and probabilities
    within rtol 1e-3 / atol 1e-4 of onnxruntime."""
    from tessel.passes.manager import get_pass
    from tessel.passes.pipeline import O_LEVELS

    pipeline = PIPELINES[name] or O_LEVELS[2]

    for pass_name in pipeline.split(","):
        try:
            found = get_pass(pass_name.split("{")[0])
        except ImportError as e:
            pytest.skip(f"pass '{pass_name}' does not import: {e}")
        if found is None:
            pytest.skip(f"pass '{pass_name}' is not there yet")
    import onnx
    from tessel.frontends.onnx.importer import import_model
    from tessel.frontends.onnx.randomize import randomize_weights
    from tessel.passes.manager import PassManager
    from tessel.passes.pipeline import parse_pipeline

    from tests.models.test_models import DATA, graph_inputs, run_onnxruntime, with_logits

    model = with_logits(randomize_weights(onnx.load(DATA / "light" / "light_resnet50.onnx"), seed=0))
    (vi,) = graph_inputs(model)
    x = np.random.default_rng(7).standard_normal([d.dim_value for d in vi.type.tensor_type.shape.dim])
    x = x.astype(np.float32)
    m = import_model(model.SerializeToString(), "resnet50.onnx", {})
    PassManager(parse_pipeline(pipeline)).run(m)
    regions = sum(op.name == "kernel" for op in m.funcs[0].block.ops)
    assert regions >= 40
    lower_module(m, here())
    launches = [op for op in m.funcs[0].block.ops if op.name == "cl.launch"]
    assert sum(op.regions[0].block.ops[-2].name == "kernel" for op in launches) == regions
    got = Executable(m, m.funcs[0]).run([x])
    want = run_onnxruntime(model, {vi.name: x})
    for g, w, what in zip(got, want, ["probabilities", "logits"], strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-4, err_msg=what)


def test_elementwise_region_writes_in_place_over_a_dying_operand() -> None:
    """The memory plan gives the region's result the buffer of its full-shape operand, which dies there;
    the kernel reads each element before writing it, so the results stay right."""
    x = T(4, 64)
    text = f"""module @m {{
  func @main(%x: {x}, %y: {x}) -> {x} {{
    %0 = exp %x : ({x}) -> {x}
    %1 = kernel %0, %y {{kind = "elementwise"}} : ({x}, {x}) -> {x} ({{
    ^bb0(%a: {x}, %b: {x}):
      %2 = add %a, %b : ({x}, {x}) -> {x}
      %3 = relu %2 : ({x}) -> {x}
      yield %3 : {x}
    }})
    return %1 : {x}
  }}
}}
"""
    want_m, m = parse_module(text), parse_module(text)
    inputs = [np.random.default_rng(3).standard_normal((4, 64)).astype(np.float32) for _ in range(2)]
    want = run_func(want_m, want_m.funcs[0], inputs)
    lower_module(m, here())
    exp, region = [op for op in m.funcs[0].block.ops if op.name == "cl.launch"]
    assert region.attrs["buffers"] == exp.attrs["buffers"]
    got = Executable(m, m.funcs[0]).run(inputs)
    np.testing.assert_allclose(got[0], want[0], **TOL)


@pytest.mark.parametrize("local", [True, False], ids=["local-repack", "two-kernels"])
@pytest.mark.parametrize("c, g, hw", [(32, 4, 8), (12, 3, 5), (272, 4, 14)])
def test_channel_shuffle_fused_into_a_depthwise_conv(c: int, g: int, hw: int, local: bool) -> None:
    """shufflenet's channel shuffle (reshape, transpose, reshape) fused into the depthwise conv after it,
    the numpy interpreter's results: one launch whose conv repacks the shuffled channels where they are.
    All take the 16-channel paths (12 channels: a partial block): the repack into local memory by the
    conv's own work-group (one kernel), or, on a device with too little local memory, a repack kernel into
    scratch before the conv (two kernels)."""
    from tessel.passes.manager import PassManager
    from tessel.passes.pipeline import parse_pipeline
    from tessel.targets.opencl.kernels.base import DeviceInfo

    x5 = T(1, g, c // g, hw, hw)
    xt = T(1, c // g, g, hw, hw)
    x, w = T(1, c, hw, hw), T(c, 1, 3, 3)
    text = f"""module @m {{
  func @main(%x: {x}, %w: {w}, %b: {T(c)}) -> {x} {{
    %0 = reshape %x {{shape = [1, {g}, {c // g}, {hw}, {hw}]}} : ({x}) -> {x5}
    %1 = transpose %0 {{perm = [0, 2, 1, 3, 4]}} : ({x5}) -> {xt}
    %2 = reshape %1 {{shape = [1, {c}, {hw}, {hw}]}} : ({xt}) -> {x}
    %3 = conv2d %2, %w, %b {{groups = {c}, pads = [1, 1, 1, 1]}} : ({x}, {w}, {T(c)}) -> {x}
    %4 = relu %3 : ({x}) -> {x}
    return %4 : {x}
  }}
}}
"""
    rng = np.random.default_rng(3)
    inputs = [rng.uniform(-1, 1, (1, c, hw, hw)).astype(np.float32),
              rng.uniform(-1, 1, (c, 1, 3, 3)).astype(np.float32), rng.uniform(-1, 1, c).astype(np.float32)]
    m = parse_module(text.encode(), "shuffle.tsl")
    want = run_func(m, m.funcs[0], inputs)
    PassManager(parse_pipeline("fuse")).run(m)
    assert [op.name for op in m.funcs[0].block.ops] == ["kernel", "return"]
    lower_module(m, DeviceInfo() if local else DeviceInfo(local_mem_size=16))
    launches = [op for op in m.funcs[0].block.ops if op.name == "cl.launch"]
    names = [[k["name"] for k in op.attrs["kernels"]] for op in launches]
    # the weights' pack, then one launch of the region: its kernels
    kernels = 1 if local else 2
    assert len(names) == 2 and "pack" in names[0][0] and len(names[1]) == kernels, names
    got = Executable(m, m.funcs[0]).run(inputs)
    np.testing.assert_allclose(got[0], want[0], **TOL)


@pytest.mark.parametrize("level", [2, 3])
def test_upsample_conv_decoder_matches_onnxruntime(level: int) -> None:
    """A decoder block as PyTorch exports it (nn.Upsample nearest: Resize asymmetric/floor by scales 2,
    then Conv, ReLU) at -O2 and -O3: the resize joins the conv's kernel and the result is onnxruntime's."""
    import onnxruntime as ort
    from onnx import TensorProto, helper
    from tessel.frontends.onnx.importer import import_model
    from tessel.passes.manager import PassManager
    from tessel.passes.pipeline import O_LEVELS, parse_pipeline

    from .conftest import here

    rng = np.random.default_rng(3)
    w1, w2 = (helper.make_tensor(name, TensorProto.FLOAT, dims, (0.1 * rng.standard_normal(4608)).tolist())
              for name, dims in (("w1", [32, 16, 3, 3]), ("w2", [16, 32, 3, 3])))
    scales = helper.make_tensor("scales", TensorProto.FLOAT, [4], [1.0, 1.0, 2.0, 2.0])
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Resize", ["r1", "", "scales"], ["u"], mode="nearest", name="up",
                         coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
        helper.make_node("Conv", ["u", "w2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
        helper.make_node("Relu", ["c2"], ["y"], name="relu2"),
    ]
    graph = helper.make_graph(nodes, "decoder", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                              [1, 16, 12, 20])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 24, 40])],
                              [w1, w2, scales])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    x = rng.standard_normal((1, 16, 12, 20)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    m = import_model(model.SerializeToString(), "decoder.onnx")
    PassManager(parse_pipeline(O_LEVELS[level])).run(m)
    lower_module(m, here())
    exe = Executable(m, m.funcs[0])
    assert not any(s.name.endswith("_resize") for s in exe.steps)  # no kernel of its own
    assert any("resize_conv2d" in s.name for s in exe.steps)
    np.testing.assert_allclose(exe.run([x])[0], want, rtol=1e-4, atol=1e-5)
