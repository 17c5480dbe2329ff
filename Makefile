# Two commands for a newcomer on a fresh Debian machine:
#   make demo   installs missing Debian packages, builds, runs the demo
#   make test   the same set-up, then every test
# Other targets: build, test-asan, test-tsan, fuzz, bench, bench-compile, wheel-smoke, format,
# clean.
PRESET ?= release
JOBS ?= $(shell nproc)
BUILD_DIR = build/$(PRESET)
BIN = $(BUILD_DIR)/bin
CTEST_ARGS ?= --output-on-failure --timeout 300

.PHONY: deps build demo test test-asan test-tsan fuzz bench bench-compile format clean wheel-smoke

deps:
	@scripts/install-deps.sh

build: deps
	@cmake --preset $(PRESET) >/dev/null
	@cmake --build --preset $(PRESET) -j $(JOBS)

demo: build
	@$(BIN)/symmflow demo
	@$(BIN)/symmflow run examples/tp_mlp.sf --ranks 4 --check --iters 5
	@PYTHONPATH=$(BUILD_DIR)/python OMP_NUM_THREADS=1 python3 -m torch.distributed.run \
	  --nproc-per-node 4 --master-addr 127.0.0.1 --master-port 29517 \
	  examples/pytorch/run.py --case decoder --iters 10

test: build
	@cd $(BUILD_DIR) && ctest $(CTEST_ARGS) -j $(JOBS)

# ASan+UBSan on every layer's tests, compiled by clang; the fuzzers live in the same tree
# (Note [one sanitizer tree] in scripts/run-fuzz.sh).
test-asan:
	@scripts/install-deps.sh --clang
	@$(MAKE) --no-print-directory test PRESET=asan

# ThreadSanitizer on the concurrent parts (runtime, collectives and groups across simulated
# hosts; the matrix shrinks itself): only the three test binaries that hold them are built.
test-tsan: deps
	@cmake --preset tsan >/dev/null
	@cmake --build --preset tsan -j $(JOBS) --target test_runtime test_collectives test_multihost
	@cd build/tsan && ctest $(CTEST_ARGS) -j $(JOBS) -R '^(Runtime|Collective|Reduce|Collectives|Multihost|SpanningGroups)'

fuzz:
	@scripts/install-deps.sh --clang
	@scripts/run-fuzz.sh $(FUZZ_SECONDS)

bench: build
	@$(BIN)/bench_compute --benchmark_min_time=0.2

# Compiler speed on generated model graphs of 1k, 10k and 100k nodes (complexity fit, parse, and
# per-pass timings); builds only what it needs.
bench-compile: deps
	@cmake --preset $(PRESET) >/dev/null
	@cmake --build --preset $(PRESET) -j $(JOBS) --target bench_compile
	@$(BIN)/bench_compile --benchmark_min_time=0.3

# The manylinux wheel, installed into a fresh venv without MPI (Note [wheel]): built from a
# read-only copy of the checkout, or with TREE=build/release from that tree's objects (CI, after
# `make test`); exit 77 is the script's skip (it names what is missing).
wheel-smoke: deps
	@JOBS=$(JOBS) TREE=$(TREE) scripts/wheel_smoke.sh || [ $$? = 77 ]

format:
	@git ls-files '*.cpp' '*.hpp' | xargs clang-format -i

clean:
	rm -rf build
