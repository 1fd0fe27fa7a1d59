# The two commands of README.md, and the steps they are made of. Each step does what it needs
# first: `make test` on a fresh Debian 12 machine installs, configures, builds and tests.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_ARGS ?=
TESSEL := $(BUILD)/app/tessel

.PHONY: all setup configure build test cuda-check demo format-check format clean

all: build

setup:
	@scripts/setup

$(BUILD)/build.ninja: CMakeLists.txt | setup
	cmake -S . -B $(BUILD) -G Ninja $(CMAKE_ARGS)

configure: setup $(BUILD)/build.ninja

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# The tests: formatting, the CUDA code paths compile (where nvcc is), every unit and
# integration test, and a smoke run of the benchmark harness.
test: build format-check cuda-check
	bench/run --quick --out $(BUILD)/bench-quick.jsonl > $(BUILD)/bench-quick.log || \
	  { cat $(BUILD)/bench-quick.log; exit 1; }
	@echo "bench: the harness runs (bench/run --quick; no timing claims)"
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -L 'unit|integration'

# Compiles the nvcc-only sources (-DTESSEL_CUDA=ON) without a GPU; skipped where there is no nvcc.
cuda-check: setup
	@if [ -x /usr/local/cuda/bin/nvcc ]; then \
	  cmake -S . -B $(BUILD)-cuda -G Ninja -DTESSEL_CUDA=ON -DTESSEL_GUI=OFF -DTESSEL_TESTS=OFF \
	    > $(BUILD)-cuda.log 2>&1 || { cat $(BUILD)-cuda.log; exit 1; }; \
	  cmake --build $(BUILD)-cuda --target tessel_core_cuda && echo "cuda-check: CUDA sources compile"; \
	else echo "cuda-check: skipped, no nvcc at /usr/local/cuda/bin/nvcc"; fi

# The main job. Until the training pipeline lands: what this build can do, and how a VGG-16
# training step on a 20000×20000 slide runs in 2 GiB, checked exact on a random network.
demo: build
	$(TESSEL) doctor
	$(TESSEL) plan --model vgg16 --size 20000x20000 --budget 2GiB
	$(TESSEL) gradcheck --model random --seed 7 --size 97x83

format-check: setup
	@scripts/format-check

format:
	@scripts/format-check --fix

clean:
	rm -rf $(BUILD) $(BUILD)-cuda $(BUILD)-cuda.log
