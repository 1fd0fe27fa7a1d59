# The two commands of README.md, and the steps they are made of. Each step does what it needs
# first: `make test` on a fresh Debian 12 machine installs, configures, builds and tests.
BUILD ?= build
BUILD_FUZZ ?= build-fuzz
BUILD_ASAN ?= build-asan
JOBS ?= $(shell nproc)
CMAKE_ARGS ?=
TESSEL := $(BUILD)/app/tessel

.PHONY: all setup configure build test fuzz-smoke test-asan sample-data demo demo-control \
  format-check tidy-check format clean

all: build

setup:
	@scripts/setup

$(BUILD)/build.ninja: CMakeLists.txt | setup
	cmake -S . -B $(BUILD) -G Ninja $(CMAKE_ARGS)

configure: setup $(BUILD)/build.ninja

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# The tests: formatting, clang-tidy on core/ (no warning beyond scripts/tidy-baseline), the
# engine-only build's own sources (the GPU node's), every unit and integration test, a smoke run
# of the benchmark harness, and a short fuzz of the file readers.
test: build format-check tidy-check
	scripts/engine-only-check $(BUILD)
	bench/run --quick --out $(BUILD)/bench-quick.jsonl > $(BUILD)/bench-quick.log || \
	  { cat $(BUILD)/bench-quick.log; exit 1; }
	@echo "bench: the harness runs (bench/run --quick; no timing claims)"
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -L 'unit|integration'
	$(MAKE) --no-print-directory fuzz-smoke

# The file readers (manifest, training config, region of interest, checkpoint, ONNX with its
# importer) under libFuzzer, ASan and UBSan, built with clang in $(BUILD_FUZZ): a fixed-seed run
# of each over its seed corpus, then every regression input (tests/fuzz/README.md).
# `scripts/fuzz` is the long run.
fuzz-smoke: setup
	BUILD_FUZZ=$(BUILD_FUZZ) scripts/fuzz --smoke

# The readers' unit tests under AddressSanitizer and UBSan (GCC), in a build of the readers
# alone ($(BUILD_ASAN) holds no other tests).
$(BUILD_ASAN)/build.ninja: CMakeLists.txt | setup
	cmake -S . -B $(BUILD_ASAN) -G Ninja -DTESSEL_READERS_ONLY=ON \
	  -DTESSEL_SANITIZE=address,undefined

test-asan: setup $(BUILD_ASAN)/build.ninja
	cmake --build $(BUILD_ASAN) -j $(JOBS)
	cd $(BUILD_ASAN) && ctest --output-on-failure -j $(JOBS) \
	  -R '^(ManifestTest|ManifestFile|AssignSplits|RegionOfInterest|TrainingRegion|CheckpointTest|LoadWeights|Crc32|TrainConfig)\.'

# The main job: the synthetic sample slides (made once; deterministic; `--task cells`: a tumour
# focus differs from the tissue only in its nuclei), a small network trained on them at 2 µm per
# pixel (sample_data/demo.yaml), the test split evaluated, and heatmaps of the test slides checked
# against the foci the generator placed.
DEMO_RUN := runs/demo
DEMO_SLIDES := --task cells --slides 48 --size 4096 --seed 1
sample-data: build
	@if grep -qs '"task": "cells"' sample_data/lesions.json && \
	  grep -qs '"generator": 3' sample_data/lesions.json && [ -f sample_data/manifest.csv ]; then \
	  echo "demo: sample_data/ exists (delete it to regenerate)"; else \
	  $(TESSEL) sample-data --out sample_data $(DEMO_SLIDES) --force; fi

# Evaluates RUN's best checkpoint on the test split and draws a heatmap of every test slide.
define test_and_heatmaps
	$(TESSEL) eval --checkpoint $(1)/checkpoints/best.h5 --split test \
	  --out $(1)/test_predictions.csv
	for slide in $$(awk -F, '$$3 == "test" {print $$1}' sample_data/manifest.csv); do \
	  $(TESSEL) heatmap --checkpoint $(1)/checkpoints/best.h5 \
	    --slide sample_data/$$slide --out $(1)/heatmaps || exit 1; done
endef

demo: build sample-data
	$(TESSEL) doctor
	rm -rf $(DEMO_RUN)
	$(TESSEL) train --config sample_data/demo.yaml output=$(DEMO_RUN)
	$(call test_and_heatmaps,$(DEMO_RUN))
	scripts/check-heatmaps --all --split test sample_data/lesions.json $(DEMO_RUN)/heatmaps

# The control: the same recipe with the slides read at 8 µm per pixel, where a nucleus is smaller
# than a pixel. It should stay near chance (test AUC about 0.5): the label lives in the cells.
DEMO_CONTROL_RUN := runs/demo-control
demo-control: build sample-data
	rm -rf $(DEMO_CONTROL_RUN)
	$(TESSEL) train --config sample_data/demo.yaml mpp=8.0 output=$(DEMO_CONTROL_RUN)
	$(TESSEL) eval --checkpoint $(DEMO_CONTROL_RUN)/checkpoints/best.h5 --split test \
	  --out $(DEMO_CONTROL_RUN)/test_predictions.csv

format-check: setup
	@scripts/format-check

tidy-check: configure
	@scripts/tidy-check $(BUILD)

format:
	@scripts/format-check --fix

clean:
	rm -rf $(BUILD)
