// An ONNX network as a Tessel network (issue 19, docs/models.md): io::read_onnx's nodes mapped
// onto core's graph with the file's weights. Every node is either mapped exactly, or refused
// with its name, its op and the reason; nothing is approximated. A head Tessel cannot hold
// (after the global pool) is left out and said so: a run puts its own head on the trunk.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/graph/graph.h"
#include "io/onnx_model.h"
#include "pipelines/import_network.h"

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
// exactly: an op outside the supported list, a global pool inside the trunk other than in the
// squeeze-and-excitation pattern (pipelines/onnx_fuse.h), shapes computed while it runs, weights
// of the wrong shape. Of `options`, the batch norms' form is used.
ImportedNetwork import_onnx(const io::OnnxModel& model, const ImportOptions& options = {});

}  // namespace tessel::pipelines
