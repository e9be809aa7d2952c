#!/usr/bin/env bash
# make demo: a hand-written module through tessel-opt -O1 and tessel-run, checking the optimized module
# computes what the original did. (The ONNX importer will put a real model in front of this.)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
ops() { grep -cE '^ +(%[^ ]+ = )?[a-z_]+ ' "$1" || true; }

echo "== 1. the input: examples/block.tsl ($(ops examples/block.tsl) ops)"
$BIN/tessel-opt examples/block.tsl -o "$OUT/in.tsl"
echo
echo "== 2. tessel-opt -O1 (passes: $($BIN/tessel-opt -O1 --print-pipeline))"
$BIN/tessel-opt -O1 --pass-statistics --time-passes examples/block.tsl -o "$OUT/opt.tsl" 2> "$OUT/report.txt"
grep -E "^'|\(S\) [1-9]|Total Execution" "$OUT/report.txt" || true
echo
echo "== 3. the optimized module ($(ops "$OUT/opt.tsl") ops)"
cat "$OUT/opt.tsl"
echo
echo "== 4. tessel-run on the numpy reference target, same seeded inputs for both"
$BIN/tessel-run "$OUT/in.tsl" --random-inputs --seed 7 --outputs "$OUT/before.npz" -q
$BIN/tessel-run "$OUT/opt.tsl" --random-inputs --seed 7 --outputs "$OUT/after.npz"
$BIN/python - "$OUT/before.npz" "$OUT/after.npz" <<'PY'
import sys, numpy as np
a, b = np.load(sys.argv[1]), np.load(sys.argv[2])
err = max(float(np.abs(a[k] - b[k]).max()) for k in a.files)
print(f"optimized vs original: max abs difference {err:.3g} -> {'OK' if err < 1e-5 else 'MISMATCH'}")
sys.exit(0 if err < 1e-5 else 1)
PY
