#!/usr/bin/env bash
# make demo: a real model through the tools. A seeded random-weight copy of the onnx package's bundled
# ResNet-50 (its classifier scaled so the softmax is not saturated: every probability counts) is imported,
# optimized with -O2, lowered to OpenCL C kernels and run on the OpenCL device (PoCL on a CPU) with a
# per-kernel profile; the result is checked against onnxruntime on the same input.
# Without OpenCL it runs on the numpy reference target instead. Every step is a plain shell command you
# can rerun.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$PWD/.venv/bin
MODEL=${MODEL:-resnet50}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
ops() { grep -cE '^ +(%[^ ]+ = )?[a-z_.]+ ' "$1" || true; }
if [ -t 1 ]; then B=$'\033[1m' N=$'\033[0m'; else B='' N=''; fi
step() { printf '\n%s== %s%s\n' "$B" "$*" "$N"; }

step "1. a random-weight copy of the bundled light_$MODEL.onnx (classifier calibrated), and an input image"
$BIN/python examples/prepare_demo.py "$MODEL" "$OUT"

step "2. tessel-import $MODEL.onnx -o $MODEL.tsl"
start=$(date +%s%N)
$BIN/tessel-import "$OUT/$MODEL.onnx" -o "$OUT/$MODEL.tsl"
ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "imported in ${ms} ms: $(ops "$OUT/$MODEL.tsl") ops; the first lines, weights elided:"
$BIN/tessel-opt --elide-resources "$OUT/$MODEL.tsl" | head -8 | cut -c1-150

step "3. tessel-opt -O2 (patterns, BN folding, NCHWc16 layout, fusion; --print-pipeline shows it)"
$BIN/tessel-opt -O2 --pass-statistics --remarks-missed "$OUT/$MODEL.tsl" -o "$OUT/$MODEL.opt.tsl" \
  2> "$OUT/stats.txt"
awk "/^'(fold-batchnorm|propagate-layout|fuse)'/{p=1; print; next} /^'/{p=0} p && /\(S\) [1-9]/" "$OUT/stats.txt"
k0=$($BIN/tessel-opt --print-analysis=traffic "$OUT/$MODEL.tsl" | tail -1)
k2=$($BIN/tessel-opt --print-analysis=traffic "$OUT/$MODEL.opt.tsl" | tail -1)
echo "kernels and bytes they move, before: ${k0#*total }"
echo "                             after:  ${k2#*total }"
echo "why the rest did not fuse (tessel-opt --remarks-missed), the first three:"
grep "remark: \[fuse\] missed" "$OUT/stats.txt" | head -3 | sed 's/^[^ ]* //' | cut -c1-150

if $BIN/tessel-run --list-devices > "$OUT/devices.txt" 2>&1; then
  step "4. tessel-codegen --target=opencl $MODEL.opt.tsl -o $MODEL.cl.tsl"
  start=$(date +%s%N)
  $BIN/tessel-codegen --target=opencl "$OUT/$MODEL.opt.tsl" -o "$OUT/$MODEL.cl.tsl"
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  echo "lowered in ${ms} ms: $(grep -c ' = cl.launch ' "$OUT/$MODEL.cl.tsl") launches of" \
       "$(grep -c '^__kernel void' "$OUT/$MODEL.cl.tsl") distinct OpenCL kernels; one of them:"
  awk '/^__kernel void/{p=1} p{print; n++} n>=6{exit}' "$OUT/$MODEL.cl.tsl" | cut -c1-150

  step "5. tessel-run --inputs input.npz --repeat 10 --profile --top 8 (on $(head -1 "$OUT/devices.txt" | cut -d' ' -f2- | cut -c1-70))"
  $BIN/tessel-run "$OUT/$MODEL.cl.tsl" --inputs "$OUT/input.npz" --outputs "$OUT/out.npz" --repeat 10 \
    --profile --top 8
else
  step "4. no OpenCL here ($(tail -1 "$OUT/devices.txt" | cut -c1-80)...): tessel-run --target=numpy"
  $BIN/tessel-run "$OUT/$MODEL.opt.tsl" --inputs "$OUT/input.npz" --outputs "$OUT/out.npz"
fi

step "6. compare with onnxruntime"
$BIN/python examples/prepare_demo.py --compare "$MODEL" "$OUT"
