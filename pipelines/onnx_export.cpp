#include "pipelines/onnx_export.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <array>
#include <chrono>
#include <iomanip>
#include <map>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/version.h"
#include "io/checkpoint.h"
#include "io/onnx_writer.h"
#include "io/slide_tile_source.h"
#include "models/network_json.h"
#include "pipelines/evaluate.h"

namespace tessel::pipelines {
namespace {

namespace fs = std::filesystem;

// The network a checkpoint holds, with what a user of the ONNX file needs to know about it.
struct Exported {
  core::Graph graph;
  std::vector<std::string> classes;
  std::string model;          // the zoo model or network file it was trained as
  std::string input;          // how the image must be prepared; empty: as the imported file's
  std::optional<double> mpp;  // the resolution it was trained at, when given in µm per pixel
  std::string resolution;     // the same in words, whatever its kind
};

std::string numbers(const std::array<float, 3>& v) {
  std::ostringstream text;
  text << v[0] << ", " << v[1] << ", " << v[2];
  return text.str();
}

std::string resolution_words(const TrainConfig& c) {
  std::ostringstream text;
  if (c.mpp) {
    text << *c.mpp << " µm per pixel";
  } else if (c.magnification) {
    text << *c.magnification << "× magnification";
  } else {
    text << "level " << c.level.value_or(0) << " of the slide";
  }
  return text.str();
}

// A checkpoint `tessel import` wrote: the network as the ONNX file held it (its own head, if it
// had one), in the weights' dtype.
Exported imported(const fs::path& checkpoint, const io::CheckpointState& state) {
  Exported e{models::network_from_json(state.network, checkpoint.string()), {}, "", "", {}, ""};
  if (!state.weights.empty() && state.weights.front().tensor.scalar_type() == at::kDouble) {
    e.graph.module().to(at::kDouble);
  }
  try {
    io::load_weights(e.graph.module(), state.weights, /*strict=*/true);
  } catch (const Error& error) {
    throw Error("checkpoint " + checkpoint.string() + " does not fit its network: " + error.what());
  }
  e.model = "imported network";
  try {  // `tessel import` keeps the file's name and producer in the config
    const nlohmann::json origin = nlohmann::json::parse(state.config);
    e.model += " from " + origin.at("imported_from").get<std::string>() + ", " +
               origin.at("producer").get<std::string>();
  } catch (const nlohmann::json::exception&) {
  }
  return e;
}

// A training checkpoint: rebuilt as `tessel eval` rebuilds it, on the CPU.
Exported trained(const fs::path& checkpoint) {
  TrainedModel m = load_trained_model(checkpoint, /*class_map=*/false, "cpu");
  Exported e{std::move(m.graph), m.classes, m.config.model, "", m.config.mpp, ""};
  e.input = "RGB, each pixel value v (0-255) as (v / 255 - mean) / std with ImageNet's mean " +
            numbers(io::kImageNetMean) + " and std " + numbers(io::kImageNetStd);
  e.resolution = resolution_words(m.config);
  return e;
}

}  // namespace

ExportReport export_onnx_file(const fs::path& checkpoint, const fs::path& onnx) {
  const auto start = std::chrono::steady_clock::now();
  const io::CheckpointState state = io::read_checkpoint(checkpoint);
  // Training checkpoints name their classes; `tessel import`'s carry a network and none.
  Exported e = state.class_names.empty() && !state.network.empty() ? imported(checkpoint, state)
                                                                   : trained(checkpoint);
  core::Graph& g = e.graph;
  const core::Node& last = g.node(g.output());
  const int64_t channels = g.node(g.input()).channels;

  std::map<std::string, std::string> metadata = {{"tessel.checkpoint", checkpoint.string()},
                                                 {"tessel.model", e.model}};
  if (!e.input.empty()) metadata["tessel.input"] = e.input;
  if (!e.resolution.empty()) metadata["tessel.resolution"] = e.resolution;
  if (e.mpp) {
    std::ostringstream mpp;
    mpp << std::setprecision(15) << *e.mpp;
    metadata["tessel.mpp"] = mpp.str();
  }
  std::string class_list;
  for (const std::string& c : e.classes) class_list += (class_list.empty() ? "" : ",") + c;
  if (!class_list.empty()) metadata["tessel.classes"] = class_list;
  try {
    io::write_onnx(g, onnx, std::string("tessel ") + kVersion, metadata);
  } catch (const Error& error) {
    throw Error("cannot export checkpoint " + checkpoint.string() + ": " + error.what());
  }

  ExportReport report;
  report.layers = g.size() - 1;
  bool float64 = false;
  for (const io::NamedTensor& w : io::named_weights(g.module())) {
    report.parameters += w.tensor.numel();
    float64 = float64 || w.tensor.scalar_type() == at::kDouble;
  }
  report.classes = e.classes;
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::ostringstream text;
  text << "exported   " << checkpoint.string() << " (" << e.model << ")\n"
       << "network    " << report.layers << " layers, " << report.parameters
       << " parameters and statistics, " << (float64 ? "float64" : "float32") << "\n"
       << "input      'image': N×" << channels << "×H×W, "
       << (e.input.empty() ? "as the imported network took it" : e.input);
  if (!e.resolution.empty()) text << ", at " << e.resolution;
  text << "\noutput     'output': ";
  if (!e.classes.empty() && last.kind == core::OpKind::kLinear) {
    text << "N×" << last.channels << " logits for " << class_list
         << " (a softmax gives the probabilities)";
  } else if (last.spatial()) {
    text << "N×" << last.channels << "×h×w feature map";
  } else {
    text << "N×" << last.channels
         << (last.kind == core::OpKind::kLinear ? " values of the file's classifier"
                                                : " pooled features");
  }
  text << "\nwrote      " << onnx.string() << " (ONNX IR " << io::kExportIrVersion << ", opset "
       << io::kExportOpset << ") in " << std::fixed << std::setprecision(2) << report.seconds
       << " s\n";
  report.summary = text.str();
  return report;
}

}  // namespace tessel::pipelines
