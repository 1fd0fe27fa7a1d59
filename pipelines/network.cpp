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
  Network n{models::network_with_head(state.network, model, options), state.network, {}};
  // The file's head (if it has one) is for other classes: the run trains its own.
  for (io::NamedTensor& w : state.weights) {
    if (!w.name.starts_with("classifier.")) n.trunk_weights.push_back(std::move(w));
  }
  return n;
}

}  // namespace tessel::pipelines
