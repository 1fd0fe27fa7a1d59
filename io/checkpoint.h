// Training checkpoints in HDF5 (DESIGN.md "Checkpoints"): weights, optimizer state and the run's
// state in one file, laid out so h5py and Keras users find their way:
//   /model_weights                      attr layer_names
//   /model_weights/<layer>              attr weight_names
//   /model_weights/<layer>/<param>      dataset; attrs torch_name, crc32
//   /optimizer_weights/<layer>/<param>/<state>   dataset (e.g. momentum_buffer); attrs as above
//   /state                              attrs epoch, step, seed, class_names, tessel_version,
//                                       config, run_state, format_version, state_crc32, and
//                                       network when there is one; dataset rng_state
// A checkpoint is written to "<path>.partial" and renamed into place, so a crash during the write
// never destroys the previous checkpoint. Every dataset carries a CRC-32 of its bytes; a read
// that finds a mismatch, a truncated file or a missing dataset throws naming file and dataset.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace torch::nn {
class Module;
}

namespace tessel::io {

// A tensor and its LibTorch name: "features.conv1_1.weight" for a parameter; for optimizer state
// the parameter's name, a dot and the state's name ("features.conv1_1.weight.momentum_buffer").
struct NamedTensor {
  std::string name;
  at::Tensor tensor;  // float32, float64, int64 or uint8, any device (copied to the CPU to write)
};

struct CheckpointState {
  std::vector<NamedTensor> weights;
  std::vector<NamedTensor> optimizer;
  int64_t epoch = 0;  // epochs completed
  int64_t step = 0;   // optimizer steps taken
  uint64_t seed = 0;
  std::string rng_state;  // opaque bytes (the pipeline's random generators)
  std::vector<std::string> class_names;
  std::string config;     // the resolved run configuration, as text
  std::string run_state;  // the pipeline's own position in the run (JSON text)
  std::string tessel_version;
  // The network itself (models/network_json.h), for one that is not in the zoo (an imported
  // ONNX network); empty for zoo models, whose config names them. Older checkpoints: empty.
  std::string network;
};

void write_checkpoint(const std::filesystem::path& path, const CheckpointState& state);
CheckpointState read_checkpoint(const std::filesystem::path& path);

// The header of a checkpoint (its size and CRC-32 as text) without reading the rest; empty for a
// missing file or one without a header. Equal non-empty headers: the same bytes, to CRC-32's odds.
std::string checkpoint_header(const std::filesystem::path& path);

// Which parameters of a module a set of weights filled, for the report users see when they
// start from a checkpoint's weights.
struct WeightLoadReport {
  std::vector<std::string> loaded;
  std::vector<std::string> missing;     // in the module, not in the weights
  std::vector<std::string> unexpected;  // in the weights, not in the module
  std::vector<std::string> mismatched;  // same name, other shape: "name: [64, 3, 3, 3] vs [...]"
  std::string to_string() const;
};

// Copies `weights` into the module's parameters and buffers of the same name and shape (in the
// parameter's dtype and device). With `strict`, anything missing, unexpected or mismatched
// throws tessel::Error listing it; otherwise the report says what happened.
WeightLoadReport load_weights(torch::nn::Module& module, const std::vector<NamedTensor>& weights,
                              bool strict);

// The module's parameters and buffers as named tensors (not copied), in the module's order.
std::vector<NamedTensor> named_weights(const torch::nn::Module& module);

// CRC-32 (IEEE 802.3, as zlib's crc32), for the per-dataset checksums.
uint32_t crc32(const void* data, size_t bytes, uint32_t crc = 0);

}  // namespace tessel::io
