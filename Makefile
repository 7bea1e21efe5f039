# Set-up, build, test and demo. Every target creates what it needs on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
CPP_SOURCES := $(shell find cpp -name '*.h' -o -name '*.cc') CMakeLists.txt pyproject.toml
# The executor stress tests run 1/STRESS_DIVISOR of their repetitions (cpp/tests/runtime/
# executor_stress_test.cc); `make test-cpp STRESS_DIVISOR=1` runs them whole.
STRESS_DIVISOR ?= 10
export TT_STRESS_DIVISOR := $(STRESS_DIVISOR)

.PHONY: all demo test test-cpp test-python test-transformers4 lint sanitize sanitize-thread fuzz fuzz-native fuzz-python fuzz-short bench system-deps clean gpu-wheels

all: $(VENV)/.built

# Debian packages the C++ build needs: GoogleTest, clang (the sanitizer and fuzz builds: its
# ASan and TSan builds and runs take half GCC's time), and Python's headers where the
# interpreter came without them (Debian's own python3); hey, the HTTP load generator
# of the serve benchmark (and its smoke test); and chromium, the headless browser that
# renders compiled.visualize()'s page in its test. Installed once, as root.
system-deps:
	@missing=""; \
	[ -f /usr/include/gtest/gtest.h ] || missing="$$missing libgtest-dev"; \
	command -v hey >/dev/null || missing="$$missing hey"; \
	command -v clang++ >/dev/null || missing="$$missing clang"; \
	command -v chromium >/dev/null || command -v chromium-browser >/dev/null || missing="$$missing chromium"; \
	$(PYTHON) -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
		|| missing="$$missing python3-dev"; \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages:$$missing"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq $$missing; \
	fi

# The virtual environment with the build tools and torch pinned for development.
$(VENV)/.deps: Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0 "scikit-build-core>=0.10" "nanobind>=2.0" cmake ninja
	touch $@

# The package, editable, with the extension built; rebuilt when C++ sources change.
$(VENV)/.built: $(VENV)/.deps $(CPP_SOURCES) | system-deps
	$(PY) -m pip install -q --no-build-isolation -e ".[test]"
	touch $@

demo: $(VENV)/.built
	$(BIN)/tensortorrent demo

build/cpp/build.ninja: $(VENV)/.deps CMakeLists.txt | system-deps
	$(BIN)/cmake -S . -B build/cpp -G Ninja -DCMAKE_MAKE_PROGRAM=$(abspath $(BIN)/ninja) \
		-DCMAKE_BUILD_TYPE=RelWithDebInfo -DTT_BUILD_PYTHON=OFF -DTT_BUILD_TESTS=ON

test-cpp: build/cpp/build.ninja
	$(BIN)/cmake --build build/cpp
	$(BIN)/ctest --test-dir build/cpp --output-on-failure

# pytest on PYTEST_WORKERS processes (pytest-xdist), a test file to each at a time, so that
# a file's module-scoped fixtures (models compiled once) are built once; the suite's
# slowest lines print at the end. PYTEST_WORKERS=0 runs it in this one process.
PYTEST_WORKERS ?= 2
test-python: $(VENV)/.built
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile --durations=15 tests

# Ruff: pyflakes, pycodestyle, import order, bugbear, pyupgrade, and formatting.
lint: $(VENV)/.built
	$(BIN)/ruff check python tests bench fuzz
	$(BIN)/ruff format --check python tests bench fuzz

test: lint test-cpp sanitize sanitize-thread fuzz-short test-python

# Generation on transformers 4 (the oldest line it supports, 4.56), installed beside the
# venv's 5 under build/transformers4: not part of `make test`, which runs the venv's.
TRANSFORMERS4 := "transformers==4.57.1" "huggingface-hub>=0.34,<1.0" "tokenizers>=0.22,<0.23" \
	requests urllib3 idna charset_normalizer certifi
test-transformers4: $(VENV)/.built
	$(PY) -m pip install -q --no-deps --upgrade --target build/transformers4 $(TRANSFORMERS4)
	PYTHONPATH=build/transformers4 $(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile \
		tests/e2e/test_generation.py tests/e2e/test_generation_artifact.py tests/e2e/test_compressed_experts.py

# Wheels of pytest and rich for bench/gpu_check.sh on a GPU machine without network or them:
# carry build/gpu-wheels there beside the tree.
gpu-wheels: $(VENV)/.deps
	$(PY) -m pip download -q --only-binary=:all: --python-version 3.12 -d build/gpu-wheels pytest rich

# The C++ tests under AddressSanitizer and UndefinedBehaviorSanitizer.
sanitize: $(VENV)/.deps | system-deps
	$(BIN)/cmake -S . -B build/sanitize -G Ninja -DCMAKE_MAKE_PROGRAM=$(abspath $(BIN)/ninja) \
		-DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug -DTT_BUILD_PYTHON=OFF \
		-DTT_BUILD_TESTS=ON -DTT_SANITIZE=ON
	$(BIN)/cmake --build build/sanitize
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
		$(BIN)/ctest --test-dir build/sanitize --output-on-failure

# The C++ tests under ThreadSanitizer (races in the executor and its tests).
sanitize-thread: $(VENV)/.deps | system-deps
	$(BIN)/cmake -S . -B build/sanitize-thread -G Ninja -DCMAKE_MAKE_PROGRAM=$(abspath $(BIN)/ninja) \
		-DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug -DTT_BUILD_PYTHON=OFF \
		-DTT_BUILD_TESTS=ON -DTT_SANITIZE_THREAD=ON
	$(BIN)/cmake --build build/sanitize-thread
	TSAN_OPTIONS=halt_on_error=1 $(BIN)/ctest --test-dir build/sanitize-thread --output-on-failure

# The fuzz targets, each for FUZZ_SECONDS from its seed corpus, growing a corpus in
# build/fuzz, where a crash is written (and fails the target); `make test` runs 30 s of
# each. libFuzzer with ASan and UBSan (clang; one CMake build of the core and every
# target, build/fuzz-native) on the core's readers (cpp/fuzz/<target>_fuzz.cc: the
# safetensors header and JSON reader; a program's spec and its schedule; seeds in
# cpp/fuzz/corpus/<target>), and atheris on the Python readers (fuzz/<target>_fuzz.py:
# an artifact's manifest; a checkpoint index; the read-mode cache; seeds in fuzz/corpus).
# An input that ever broke a target stays in its seeds as found-*. FUZZ_SEED fixes
# libFuzzer's random seed: `make test` sets it, so that its pass makes the same mutations in
# the same order on every machine (a find in CI is one a local run makes too); unset, each
# run draws one.
FUZZ_SECONDS ?= 60
FUZZ_SEED ?=
FUZZ_TARGETS ?= safetensors program
FUZZ_PYTHON_TARGETS ?= manifest checkpoint_index read_mode_cache
FUZZ_SEED_FLAG = $(if $(FUZZ_SEED),-seed=$(FUZZ_SEED))
fuzz: fuzz-native fuzz-python

fuzz-native: $(VENV)/.deps | system-deps
	$(BIN)/cmake -S . -B build/fuzz-native -G Ninja -DCMAKE_MAKE_PROGRAM=$(abspath $(BIN)/ninja) \
		-DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug -DTT_BUILD_PYTHON=OFF -DTT_BUILD_FUZZERS=ON
	@# Ninja builds on both cores, not as a client of make's jobserver: beside it, fuzz-short's
	@# Python targets run for a set time whatever the load, and the build is done sooner.
	MAKEFLAGS= $(BIN)/cmake --build build/fuzz-native
	@set -e; for target in $(FUZZ_TARGETS); do \
		mkdir -p build/fuzz/corpus/$$target cpp/fuzz/corpus/$$target; \
		echo "fuzzing $$target for $(FUZZ_SECONDS) s"; \
		UBSAN_OPTIONS=print_stacktrace=1 build/fuzz-native/$${target}_fuzz -max_total_time=$(FUZZ_SECONDS) $(FUZZ_SEED_FLAG) \
			-max_len=4096 -print_final_stats=1 -artifact_prefix=build/fuzz/$$target- \
			build/fuzz/corpus/$$target cpp/fuzz/corpus/$$target 2>build/fuzz/$$target.log \
			|| { tail -60 build/fuzz/$$target.log; exit 1; }; \
		grep -E "^stat::number_of_executed_units|^stat::new_units_added" build/fuzz/$$target.log; \
	done

fuzz-python: $(VENV)/.built
	@set -e; for target in $(FUZZ_PYTHON_TARGETS); do \
		mkdir -p build/fuzz/corpus/$$target; \
		echo "fuzzing $$target for $(FUZZ_SECONDS) s"; \
		$(PY) fuzz/$${target}_fuzz.py -max_total_time=$(FUZZ_SECONDS) $(FUZZ_SEED_FLAG) -max_len=8192 \
			-print_final_stats=1 -artifact_prefix=build/fuzz/$$target- build/fuzz/corpus/$$target fuzz/corpus/$$target \
			2>build/fuzz/$$target.log || { tail -60 build/fuzz/$$target.log; exit 1; }; \
		grep -E "^stat::number_of_executed_units|^stat::new_units_added" build/fuzz/$$target.log; \
	done

# The native and the Python targets side by side, a core each (each target runs for a set time).
fuzz-short:
	$(MAKE) -j2 --output-sync=target fuzz FUZZ_SECONDS=30 FUZZ_SEED=1

# The benchmarks, suite S1 first, S4 only where torch sees a CUDA GPU; then the tables of docs/benchmarks.md
# and docs/figures from the results. Their baselines are pyproject.toml's bench extra, installed
# first as plain packages (torch stays as it is). QUICK=1 runs every script with --quick (small
# and short: a smoke test, not a measurement), its results under build/bench-quick, so that
# bench/results keeps full runs only. A suite that fails is reported and the others still run.
BENCH_SUITES := s1_fit compile_time overhead artifact_load planner streaming train_step pipeline serve_load generate compressed weight_only_kernels
bench: $(VENV)/.built
	$(PY) -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["bench"]))' \
		| xargs -d '\n' $(PY) -m pip install -q
	@failed=""; \
	for suite in $(BENCH_SUITES); do \
		args=$$( [ "$(QUICK)" = 1 ] && echo "--quick --out build/bench-quick/$$suite.json" ); \
		echo "== bench/$$suite.py $$args"; \
		$(PY) bench/$$suite.py $$args || failed="$$failed $$suite"; \
	done; \
	if $(PY) -c 'import sys, torch; sys.exit(not torch.cuda.is_available())'; then \
		args=$$( [ "$(QUICK)" = 1 ] && echo "--quick --out build/bench-quick/s4_gpu.json" || echo "--out bench/results/s4-latest.json" ); \
		echo "== bench/s4_gpu.py $$args"; \
		$(PY) bench/s4_gpu.py $$args || failed="$$failed s4_gpu"; \
	else \
		echo "== S4 (bench/s4_gpu.py) skipped: torch sees no CUDA GPU here"; \
	fi; \
	if [ "$(QUICK)" != 1 ]; then $(PY) bench/figures.py && $(PY) bench/tables.py || failed="$$failed tables"; fi; \
	if [ -n "$$failed" ]; then echo "bench: failed:$$failed"; exit 1; fi

clean:
	rm -rf build $(VENV)
