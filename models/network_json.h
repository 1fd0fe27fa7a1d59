// A network as JSON text: what a checkpoint stores for a network that is not in the zoo (an
// imported ONNX network, issue 19), so that train, eval and heatmap can rebuild it from the file
// alone. One object per node in execution order, with the op's arguments:
//   {"format": 1, "nodes": [{"op": "input", "channels": 3},
//     {"op": "conv", "name": "conv1", "inputs": [0], "in": 3, "out": 64, "kernel": [3, 3],
//      "stride": [1, 1], "padding": [1, 1], "dilation": [1, 1], "groups": 1, "bias": true}, ...]}
// Parameters are not in it (the checkpoint's datasets hold them, by the layers' names).
#pragma once

#include <string>

#include "core/graph/graph.h"
#include "models/zoo.h"

namespace tessel::models {

// With `trunk_only`, the nodes before the head (the first global pool, or the last node if
// there is none): what a checkpoint stores, so that every run puts its own head on it.
std::string network_json(const core::Graph& graph, bool trunk_only = false);

// Rebuilds the network through core::Graph's builders (so every check they make applies), with
// parameters initialised as init_parameters leaves them to the caller. Throws tessel::Error naming
// `source` (a file) and the node for anything it cannot read or build.
core::Graph network_from_json(const std::string& text, const std::string& source);

// A trunk (network_json(..., true)), or a whole network whose head is cut off at its first
// global pool, with the slide-level head for `options` (add_head): the run's classes, pool and
// head form. Throws tessel::Error when the trunk ends in a tail op.
core::Graph network_with_head(const std::string& trunk, const std::string& source,
                              const ModelOptions& options);

}  // namespace tessel::models
