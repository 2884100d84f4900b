# Front end for the CMake build. The README's two commands are `make run`
# (main job) and `make test` (all tests); both install dependencies first.
BUILD      ?= build
JOBS       ?= $(shell nproc)
CMAKE_ARGS ?=
CTEST_ARGS ?=

.PHONY: all build deps configure test run bench format format-check \
        asan-test tsan-test experiments release-build fuzz-build fuzz-smoke \
        fuzz mutants python install-python uninstall-python clean

all: build

deps:
	@tools/install_deps.sh

configure:
	@cmake -S . -B $(BUILD) $(CMAKE_ARGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j$(JOBS)

# Dependencies + build + every test (unit, integration, conformance).
test: deps
	@$(MAKE) --no-print-directory build
	@cd $(BUILD) && ctest --output-on-failure -j$(JOBS) $(CTEST_ARGS)

# Dependencies + build + the main job: transport_test server and client over
# the software NIC on loopback, printing throughput.
run: deps
	@$(MAKE) --no-print-directory build
	@tools/run_main_job.sh $(BUILD)

# Builds the Python module uccl.p2p and prints how to import it.
python: deps
	@$(MAKE) --no-print-directory build
	@test -d $(BUILD)/python/uccl || { echo "no Python module: pybind11 or Python headers missing (see make deps)"; exit 1; }
	@echo "export PYTHONPATH=$(CURDIR)/$(BUILD)/python   # then: python3 -c 'from uccl import p2p'"

# The same module importable without PYTHONPATH (a .pth file in the
# interpreter's site-packages pointing at the build; PY_SITE= overrides).
install-python: python
	@tools/install_python.sh $(BUILD)

uninstall-python:
	@tools/install_python.sh $(BUILD) --uninstall

bench: deps
	@$(MAKE) --no-print-directory build
	@tools/run_benchmarks.sh $(BUILD)

experiments: deps
	@$(MAKE) --no-print-directory build
	@tools/run_experiments.sh $(BUILD)

format:
	@git ls-files '*.h' '*.cc' '*.cu' | xargs clang-format -i

format-check:
	@git ls-files '*.h' '*.cc' '*.cu' | xargs clang-format --dry-run -Werror

# ASan+UBSan and TSan builds of everything, with the full test suite.
asan-test: deps
	@$(MAKE) --no-print-directory test BUILD=build-asan \
	    CMAKE_ARGS="-DUCCL_SANITIZE=asan -DCMAKE_BUILD_TYPE=RelWithDebInfo"

# tests/tsan.supp: races inside uninstrumented system libraries only.
tsan-test: deps
	@TSAN_OPTIONS="suppressions=$(CURDIR)/tests/tsan.supp $$TSAN_OPTIONS" \
	    $(MAKE) --no-print-directory test BUILD=build-tsan \
	    CMAKE_ARGS="-DUCCL_SANITIZE=tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo"

# The build most users type (-O3): compiled, not tested (CI builds it, so no
# build type a user may choose is broken).
release-build: deps
	@cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build build-release -j$(JOBS)

# libFuzzer targets (tests/fuzz, clang, ASan+UBSan). fuzz-smoke runs each
# for FUZZ_SECONDS (CI); fuzz runs each for FUZZ_RUNS executions (by hand,
# before a change to a parser lands). New corpus entries go to build-fuzz/.
FUZZ_SECONDS ?= 20
FUZZ_RUNS    ?= 10000000
FUZZERS       = fuzz_softnic fuzz_engine_wire fuzz_bootstrap
fuzz-build: deps
	@CC=clang CXX=clang++ cmake -S . -B build-fuzz -DUCCL_FUZZ=ON \
	    -DUCCL_SANITIZE=asan -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	    -DUCCL_CUDA=OFF >/dev/null
	@cmake --build build-fuzz -j$(JOBS) --target fuzzers

fuzz-smoke: fuzz-build
	@tools/run_fuzzers.sh build-fuzz -max_total_time=$(FUZZ_SECONDS) -- $(FUZZERS)

fuzz: fuzz-build
	@tools/run_fuzzers.sh build-fuzz -runs=$(FUZZ_RUNS) -- $(FUZZERS)

# Mutation checks (tools/mutants.py): each small break of a mechanism in a
# scratch copy of the tree must fail the tests named for it.
mutants: deps
	@python3 tools/mutants.py

clean:
	rm -rf build build-asan build-tsan build-release build-fuzz
