# The two commands of README.md, and the steps they are made of. Each step does what it needs
# first: `make test` on a fresh Debian 12 machine installs, configures, builds and tests.
BUILD ?= build
BUILD_FUZZ ?= build-fuzz
BUILD_ASAN ?= build-asan
JOBS ?= $(shell nproc)
CMAKE_ARGS ?=
TESSEL := $(BUILD)/app/tessel

.PHONY: all setup configure build test fuzz-smoke test-asan sample-data demo demo-attention \
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

# The main job: the synthetic sample slides (made once; deterministic), vgg-mini trained on them
# (sample_data/demo.yaml), the test split evaluated, and heatmaps of the test slides checked
# against the lesions the generator placed.
DEMO_RUN := runs/demo
sample-data: build
	@if [ -f sample_data/manifest.csv ] && [ -f sample_data/lesions.json ]; then \
	  echo "demo: sample_data/ exists (delete it to regenerate)"; else \
	  $(TESSEL) sample-data --out sample_data --slides 24 --size 8192 --seed 1 --force; fi

demo: build sample-data
	$(TESSEL) doctor
	rm -rf $(DEMO_RUN)
	$(TESSEL) train --config sample_data/demo.yaml output=$(DEMO_RUN)
	$(TESSEL) eval --checkpoint $(DEMO_RUN)/checkpoints/best.h5 --split test \
	  --out $(DEMO_RUN)/test_predictions.csv
	for slide in $$(awk -F, '$$3 == "test" {print $$1}' sample_data/manifest.csv); do \
	  $(TESSEL) heatmap --checkpoint $(DEMO_RUN)/checkpoints/best.h5 \
	    --slide sample_data/$$slide --out $(DEMO_RUN)/heatmaps || exit 1; done
	scripts/check-heatmaps --split test sample_data/lesions.json $(DEMO_RUN)/heatmaps

# The same with the attention-MIL head (pool: attention, docs/models.md): the attention map's
# maximum must lie on a lesion for every tumour test slide.
DEMO_ATTENTION_RUN := runs/demo-attention
demo-attention: build sample-data
	rm -rf $(DEMO_ATTENTION_RUN)
	$(TESSEL) train --config sample_data/demo.yaml pool=attention output=$(DEMO_ATTENTION_RUN)
	$(TESSEL) eval --checkpoint $(DEMO_ATTENTION_RUN)/checkpoints/best.h5 --split test \
	  --out $(DEMO_ATTENTION_RUN)/test_predictions.csv
	for slide in $$(awk -F, '$$3 == "test" {print $$1}' sample_data/manifest.csv); do \
	  $(TESSEL) heatmap --checkpoint $(DEMO_ATTENTION_RUN)/checkpoints/best.h5 \
	    --slide sample_data/$$slide --out $(DEMO_ATTENTION_RUN)/heatmaps || exit 1; done
	scripts/check-heatmaps --all --split test sample_data/lesions.json \
	  $(DEMO_ATTENTION_RUN)/heatmaps

format-check: setup
	@scripts/format-check

tidy-check: configure
	@scripts/tidy-check $(BUILD)

format:
	@scripts/format-check --fix

clean:
	rm -rf $(BUILD)
