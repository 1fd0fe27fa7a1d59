// Evaluation and heatmaps from a training checkpoint: the model, classes and resolution come
// from the checkpoint's saved config, so a checkpoint is all a user needs to keep.
#pragma once

#include <c10/core/Device.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/graph/graph.h"
#include "io/heatmap_writer.h"
#include "pipelines/metrics.h"
#include "pipelines/train.h"
#include "pipelines/train_config.h"

namespace tessel::pipelines {

// A trained network rebuilt from a checkpoint (weights checked against the model, strictly).
struct TrainedModel {
  TrainConfig config;  // as saved in the checkpoint
  std::vector<std::string> classes;
  core::Graph graph;  // on `device`, the one it was loaded for
  c10::Device device = c10::Device(c10::kCPU);
};
// `class_map`: build the network with its classifier as a 1×1 convolution (class activation
// maps) instead of the global pool + linear head.
// `device`: core::resolve_device's cpu, cuda, cuda:N or auto (the first GPU when there is one);
// where it was trained does not matter.
TrainedModel load_trained_model(const std::filesystem::path& checkpoint, bool class_map = false,
                                const std::string& device = "auto");

struct EvaluationRequest {
  std::filesystem::path checkpoint;
  std::filesystem::path manifest;         // empty: the checkpoint's
  std::string split = "test";             // train, val, test or all
  std::filesystem::path predictions_csv;  // empty: not written
  std::string budget;                     // empty: the checkpoint's
  // Checkpoints offloaded to disk when they do not fit the budget; empty: the temporary directory.
  std::filesystem::path scratch_dir;
  std::string device = "auto";  // cpu, cuda, cuda:N or auto (the first GPU when there is one)
  TrainObserver* observer = nullptr;
  // Non-empty: each slide's network input (as the network sees it: resolution, tissue fill,
  // normalisation) is written there as raw float32 1×C×H×W, "NAME.input.f32", with a line in
  // "inputs.jsonl" ({"slide", "input", "shape", "logits"}): for checking a network exported to
  // ONNX against this evaluation (tests/onnx/ort_run.py). Meant for small slides.
  std::filesystem::path inputs_dir;
};

struct SlidePrediction {
  std::string slide;
  std::string label;
  std::vector<double> probabilities;
};

struct EvaluationResult {
  std::vector<std::string> classes;
  std::vector<SlidePrediction> predictions;
  ClassificationMetrics metrics;
  int64_t skipped = 0;
};

EvaluationResult evaluate(const EvaluationRequest& request);

struct HeatmapRequest {
  std::filesystem::path checkpoint;
  std::filesystem::path slide;
  std::filesystem::path out_dir;
  std::string class_name;          // the class drawn in the TIFF and PNG; empty: the last class
  std::optional<double> base_mpp;  // µm per level-0 pixel, for a slide whose file lacks it
  std::filesystem::path roi;       // GeoJSON region: its bounding box is mapped, outside it glass
  std::string budget;              // empty: the checkpoint's
  // Checkpoints offloaded to disk when they do not fit the budget; empty: the temporary directory.
  std::filesystem::path scratch_dir;
  std::string device = "auto";  // cpu, cuda, cuda:N or auto (the first GPU when there is one)
  TrainObserver* observer = nullptr;
};

struct HeatmapResult {
  io::Heatmap heatmap;
  std::string drawn;  // the map the TIFF and PNG show: the class, or its attention map
  std::vector<double> slide_probabilities;  // the slide-level prediction (softmax of the logits)
  std::filesystem::path tiff, png, geojson;
};

// Class activation maps computed tile by tile at the last feature map's resolution: for a
// global-average-pool + linear head, the mean of the class map is exactly the slide's logits;
// for a max-pool head the map is the classifier applied at each position (the slide's
// prediction then comes from the pooled network).
// Scores are the per-cell softmax over classes. An attention head's maps are its attention too
// ("attention", or "attention:<class>" per branch, each relative to its largest weight), and the
// slide's prediction is each class map weighted by its branch's attention (exactly the pooled
// network's). Cells on glass (the slide's tissue mask) are marked. Writes <slide>.heatmap.tif
// and .heatmap.png (the attention map of `class_name`'s branch for an attention head, else
// `class_name`'s score) and .heatmap.geojson (every map) into out_dir.
HeatmapResult make_heatmap(const HeatmapRequest& request);

}  // namespace tessel::pipelines
