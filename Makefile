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
# integration test.
test: build format-check cuda-check
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -L 'unit|integration'

# Compiles the nvcc-only sources (-DTESSEL_CUDA=ON) without a GPU; skipped where there is no nvcc.
cuda-check: setup
	@if [ -x /usr/local/cuda/bin/nvcc ]; then \
	  cmake -S . -B $(BUILD)-cuda -G Ninja -DTESSEL_CUDA=ON -DTESSEL_GUI=OFF -DTESSEL_TESTS=OFF \
	    > $(BUILD)-cuda.log 2>&1 || { cat $(BUILD)-cuda.log; exit 1; }; \
	  cmake --build $(BUILD)-cuda --target tessel_core_cuda && echo "cuda-check: CUDA sources compile"; \
	else echo "cuda-check: skipped, no nvcc at /usr/local/cuda/bin/nvcc"; fi

# The main job.
demo: build
	$(TESSEL) doctor

format-check: setup
	@scripts/format-check

format:
	@scripts/format-check --fix

clean:
	rm -rf $(BUILD) $(BUILD)-cuda $(BUILD)-cuda.log
