// The network a run names in `model`: a zoo model ("resnet18"), or a checkpoint that holds a
// network (`model: NET.h5`: an imported one, issue 19), whose trunk gets the run's own head
// (classes, pool) and whose trunk weights are the run's initial weights.
#pragma once

#include <string>
#include <vector>

#include "core/graph/graph.h"
#include "io/checkpoint.h"
#include "models/zoo.h"
#include "pipelines/train_config.h"

namespace tessel::pipelines {

struct Network {
  core::Graph graph;
  std::string trunk;                           // models/network_json.h; empty for a zoo model
  std::vector<io::NamedTensor> trunk_weights;  // the file's weights; empty for a zoo model
};

// Throws tessel::Error naming the model or file: an unknown name, a checkpoint without a network.
Network build_network(const std::string& model, const models::ModelOptions& options);

// The zoo's options for this config's head (pool, dropout, attention) and norm, for `classes`
// classes; models::add_head checks them.
models::ModelOptions model_options(const TrainConfig& config, int64_t classes);

}  // namespace tessel::pipelines
