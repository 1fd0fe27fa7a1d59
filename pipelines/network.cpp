#include "pipelines/network.h"

#include "core/error.h"
#include "models/network_json.h"

namespace tessel::pipelines {

Network build_network(const std::string& model, const models::ModelOptions& options) {
  if (!model.ends_with(".h5")) return {models::build_model(model, options), {}, {}};
  io::CheckpointState state = io::read_checkpoint(model);
  if (state.network.empty()) {
    throw Error("model " + model +
                " holds no network (a checkpoint of a zoo model: name the model and give the "
                "file as init_weights instead)");
  }
  core::Graph graph = models::network_with_head(state.network, model, options);
  std::string trunk = models::network_json(graph, true);
  Network n{std::move(graph), std::move(trunk), {}};
  // The file's head (if it has one) is for other classes: the run trains its own. The trunk's
  // weights are those whose names the trunk's layers have.
  core::Graph trunk_graph = models::network_from_json(n.trunk, model);
  const auto names = trunk_graph.module().named_parameters(true);
  const auto buffers = trunk_graph.module().named_buffers(true);
  for (io::NamedTensor& w : state.weights) {
    if (names.contains(w.name) || buffers.contains(w.name)) n.trunk_weights.push_back(std::move(w));
  }
  return n;
}

models::ModelOptions model_options(const TrainConfig& config, int64_t classes) {
  models::ModelOptions options;
  options.classes = classes;
  options.global_max_pool = config.pool == "max";
  options.dropout = config.dropout;
  options.norm = models::parse_norm(config.norm);
  if (config.pool == "attention") {
    models::AttentionHead a;
    a.hidden = config.attention_hidden;
    a.gated = config.attention_gated;
    a.branches = config.attention_branches == "classes" ? classes : 1;
    a.dropout = config.attention_dropout;
    options.attention = a;
  }
  return options;
}

}  // namespace tessel::pipelines
