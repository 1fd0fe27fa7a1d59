// An ONNX network as a Tessel network (issue 19, docs/models.md): io::read_onnx's nodes mapped
// onto core's graph with the file's weights. Every node is either mapped exactly, or refused
// with its name, its op and the reason; nothing is approximated. A head Tessel cannot hold
// (after the global pool) is left out and said so: a run puts its own head on the trunk.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/graph.h"
#include "io/onnx_model.h"

namespace tessel::pipelines {

struct ImportedNetwork {
  core::Graph graph{3};
  // Whether the graph ends in the file's own classifier (a global pool, flatten, linear) and so
  // gives the file's output; otherwise it ends at the pool or the last feature map.
  bool has_head = false;
  // What the import changed in form (never in value) or left out, for the user: fused patterns
  // ("18 GELU from Div, Erf, Add, Mul, Mul"), the head left out and why.
  std::vector<std::string> notes;
};

// Throws tessel::Error "ONNX file F: node 'N' (Op): reason" for anything that cannot be mapped
// exactly: an op outside the supported list, a global pool inside the trunk (squeeze-and-
// excitation), shapes computed while it runs, weights of the wrong shape.
ImportedNetwork import_onnx(const io::OnnxModel& model);

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
