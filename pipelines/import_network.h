// `tessel import` as one call, in a header without LibTorch (the GUI's model chooser includes
// it beside Qt): an ONNX file as a checkpoint that holds the network. pipelines/onnx_import.h
// has the mapping itself.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace tessel::pipelines {

// How BatchNormalization comes in: as a frozen per-channel affine of the file's running
// statistics (what the exported network computes), or as batch norm in training mode (batch
// statistics while training, a barrier; the running statistics, starting from the file's, in
// evaluation), `tessel import --batch-norm train`.
enum class BatchNormImport { kFrozen, kTrain };

struct ImportOptions {
  // The image size the network is checked at (0: the file's input size, else 224×224).
  int64_t height = 0, width = 0;
  BatchNormImport batch_norm = BatchNormImport::kFrozen;
};

// `tessel import`: an ONNX file as a checkpoint that holds the network (trunk and, where it
// maps, the file's head) and its weights, for `model: NET.h5` in a run. Nothing is written when
// anything fails, or when the network does not fit the image size of `options`.
struct ImportReport {
  std::string summary;  // readable: the file, layers, parameters, head, notes
  int64_t layers = 0, parameters = 0;
  bool has_head = false;
  double seconds = 0.0;
};
ImportReport import_onnx_file(const std::filesystem::path& onnx, const std::filesystem::path& out,
                              const ImportOptions& options = {});

}  // namespace tessel::pipelines
