#!/usr/bin/env bash
# make demo: a real model through the tools. A seeded random-weight copy of the onnx package's bundled
# ResNet-50 is imported, optimized with -O1, and run on the numpy reference target; the result is checked
# against onnxruntime on the same input. Every step is a plain shell command you can rerun.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$PWD/.venv/bin
MODEL=${MODEL:-resnet50}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
ops() { grep -cE '^ +(%[^ ]+ = )?[a-z_.]+ ' "$1" || true; }
if [ -t 1 ]; then B=$'\033[1m' N=$'\033[0m'; else B='' N=''; fi
step() { printf '\n%s== %s%s\n' "$B" "$*" "$N"; }

step "1. a random-weight copy of the bundled light_$MODEL.onnx, and an input image"
$BIN/python examples/prepare_demo.py "$MODEL" "$OUT"

step "2. tessel-import $MODEL.onnx -o $MODEL.tsl"
start=$(date +%s%N)
$BIN/tessel-import "$OUT/$MODEL.onnx" -o "$OUT/$MODEL.tsl"
ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "imported in ${ms} ms: $(ops "$OUT/$MODEL.tsl") ops; the first lines, weights elided:"
$BIN/tessel-opt --elide-resources "$OUT/$MODEL.tsl" | head -8 | cut -c1-150

step "3. tessel-opt -O1 ($($BIN/tessel-opt -O1 --print-pipeline))"
$BIN/tessel-opt -O1 --pass-statistics "$OUT/$MODEL.tsl" -o "$OUT/$MODEL.opt.tsl" 2> "$OUT/stats.txt"
grep -E "^'|\(S\) [1-9]" "$OUT/stats.txt" || true
echo "ops: $(ops "$OUT/$MODEL.tsl") before, $(ops "$OUT/$MODEL.opt.tsl") after"

step "4. tessel-run --target=numpy --inputs input.npz --outputs out.npz"
$BIN/tessel-run "$OUT/$MODEL.opt.tsl" --inputs "$OUT/input.npz" --outputs "$OUT/out.npz"

step "5. compare with onnxruntime"
$BIN/python examples/prepare_demo.py --compare "$MODEL" "$OUT"
