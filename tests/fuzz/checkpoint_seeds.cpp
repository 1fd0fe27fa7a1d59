// Writes the checkpoint harness's seed corpus (corpus/checkpoint/) into the folder given: small
// valid checkpoints made by write_checkpoint itself. They are committed, unlike other fixtures
// (STYLE.md), because HDF5 stamps times into them and the smoke run must start from the same
// bytes every time; run this again when the checkpoint format changes.
#include <ATen/ATen.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "core/error.h"
#include "io/checkpoint.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s FOLDER\n", argv[0]);
    return 2;
  }
  const std::filesystem::path folder = argv[1];
  using tessel::io::CheckpointState;
  try {
    std::filesystem::create_directories(folder);
    // Weights, optimizer state, and every attribute of /state.
    CheckpointState full;
    // One layer (each group costs HDF5 a kilobyte or more), tensors of every stored dtype.
    full.weights = {{"conv1.weight", at::arange(6, at::kFloat).reshape({2, 3})},
                    {"conv1.bias", at::ones({2}, at::kDouble)},
                    {"conv1.num_batches_tracked", at::tensor(int64_t{7})}};
    full.optimizer = {{"conv1.weight.momentum_buffer", at::ones({2, 3})}};
    full.epoch = 3;
    full.step = 42;
    full.seed = 1;
    full.rng_state = std::string("\x00\x01\xff rng", 7);
    full.class_names = {"normal", "tumour"};
    full.config = "manifest: slides.csv\nmodel: tiny\nepochs: 4\n";
    full.run_state = R"({"epoch": 2, "position": 5})";
    full.tessel_version = "0.1.0";
    tessel::io::write_checkpoint(folder / "full.h5", full);
    // The least a checkpoint can hold: no tensors, no classes.
    tessel::io::write_checkpoint(folder / "empty.h5", CheckpointState{});
  } catch (const tessel::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
