#include <chrono>
#include <iomanip>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/version.h"
#include "io/checkpoint.h"
#include "io/onnx_model.h"
#include "models/network_json.h"
#include "pipelines/import_network.h"
#include "pipelines/onnx_import.h"

namespace tessel::pipelines {

ImportReport import_onnx_file(const std::filesystem::path& onnx, const std::filesystem::path& out,
                              const ImportOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const io::OnnxModel model = io::read_onnx(onnx);
  ImportedNetwork net = import_onnx(model, options);
  int64_t height = options.height, width = options.width;
  core::Graph& g = net.graph;
  // The size it is checked at: the caller's, the file's own, or ImageNet's.
  if (height <= 0 || width <= 0) {
    const bool known = model.input_shape[2] > 0 && model.input_shape[3] > 0;
    height = known ? model.input_shape[2] : 224;
    width = known ? model.input_shape[3] : 224;
  }
  const int64_t channels = g.node(g.input()).channels;
  std::vector<core::Shape> shapes;
  try {
    shapes = g.shapes({channels, height, width});
  } catch (const Error& e) {
    throw Error("ONNX file " + onnx.string() + " does not fit a " + std::to_string(width) + "×" +
                std::to_string(height) + " image: " + e.what());
  }
  io::CheckpointState state;
  state.weights = io::named_weights(g.module());
  // A checkpoint every other command would refuse is not written.
  for (const io::NamedTensor& w : state.weights) {
    if (w.tensor.is_floating_point() && !at::isfinite(w.tensor).all().item<bool>()) {
      throw Error("ONNX file " + onnx.string() + ": its weights hold NaN or infinite values (" +
                  w.name + "); no checkpoint was written, since no command could use it");
    }
  }
  state.network = models::network_json(g);
  state.tessel_version = kVersion;
  nlohmann::json origin = {
      {"imported_from", onnx.string()},
      {"producer", model.producer},
      {"opset", model.opset},
      {"has_head", net.has_head},
      {"batch_norm", options.batch_norm == BatchNormImport::kTrain ? "train" : "frozen"},
      {"notes", net.notes}};
  state.config = origin.dump();
  io::write_checkpoint(out, state);

  ImportReport report;
  report.layers = g.size() - 1;
  for (const io::NamedTensor& w : state.weights) report.parameters += w.tensor.numel();
  report.has_head = net.has_head;
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const core::Shape& last = shapes.back();
  std::ostringstream text;
  text << "imported   " << onnx.string() << " (" << model.producer << ", opset " << model.opset
       << ")\n"
       << "network    " << report.layers << " layers, " << report.parameters
       << " parameters and statistics, input " << channels << " channels\n"
       << "output     " << (net.has_head ? "the file's classifier, " : "features, ")
       << (g.node(g.output()).spatial() ? core::to_string(last)
                                        : std::to_string(last.channels) + " values")
       << " at " << width << "×" << height << "\n";
  for (const std::string& note : net.notes) text << "note       " << note << "\n";
  text << "wrote      " << out.string() << " in " << std::fixed << std::setprecision(2)
       << report.seconds << " s (train it with `model: " << out.string()
       << "`; a run puts its own head for its classes on the trunk)\n";
  report.summary = text.str();
  return report;
}

}  // namespace tessel::pipelines
