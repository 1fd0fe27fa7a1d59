// `tessel import` as one call, in a header without LibTorch (the GUI's model chooser includes
// it beside Qt): an ONNX file as a checkpoint that holds the network. pipelines/onnx_import.h
// has the mapping itself.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace tessel::pipelines {

// `tessel import`: an ONNX file as a checkpoint that holds the network (trunk and, where it
// maps, the file's head) and its weights, for `model: NET.h5` in a run. Nothing is written when
// anything fails. `height`/`width` (0: the file's input size, else 224) must fit the network.
struct ImportReport {
  std::string summary;  // readable: the file, layers, parameters, head, notes
  int64_t layers = 0, parameters = 0;
  bool has_head = false;
  double seconds = 0.0;
};
ImportReport import_onnx_file(const std::filesystem::path& onnx, const std::filesystem::path& out,
                              int64_t height = 0, int64_t width = 0);

}  // namespace tessel::pipelines
