// The networks Tessel ships, declared on core's graph, each with a slide-level head: a global
// pool (a streaming reduction, so memory does not grow with the slide) and a linear classifier.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/graph/graph.h"

namespace tessel::models {

// What follows the last feature map.
enum class Head {
  kPool,      // global pool, dropout, linear: the slide-level classifier
  kClassMap,  // the linear layer as a 1×1 convolution at every position: class activation maps
              // (same parameter names; the linear weight K×C is the conv weight K×C×1×1)
};

// How the zoo's batch-normalised networks (darknet19, resnet18/34/50) normalise.
enum class Norm {
  kFrozen,  // a per-channel affine from the running statistics (the usual whole-slide choice)
  kBatch,   // batch norm in training mode: whole-image statistics, exact under tiling
  kGroup,   // group norm, 32 groups (fewer where the channels do not divide)
};
std::string to_string(Norm norm);
Norm parse_norm(const std::string& text);  // "frozen", "batch", "group"; throws tessel::Error

// Attention pooling instead of a global pool (core/exec/attention.h): Ilse et al.'s attention
// network, CLAM's gated form, and CLAM-MB's one attention branch and classifier per class.
struct AttentionHead {
  int64_t hidden = 128;  // the attention network's width
  bool gated = true;     // tanh(V h) ⊙ sigmoid(U h), else tanh(V h)
  int64_t branches = 1;  // 1, or the classes (one attention map and classifier per class)
  double dropout = 0.0;  // in the attention network, after its tanh and sigmoid (CLAM)
};

struct ModelOptions {
  int64_t classes = 2;
  int64_t in_channels = 3;
  bool global_max_pool = false;            // default: global average pool
  std::optional<AttentionHead> attention;  // attention pooling instead of either global pool
  double dropout = 0.0;                    // before the classifier
  Head head = Head::kPool;
  Norm norm = Norm::kFrozen;
};

// The slide-level head on feature map `x`: global pool, dropout, linear "classifier" (or the
// class map's 1×1 convolution "classifier"), for options.classes. Returns the output node.
// With attention: the scores from 1×1 convolutions at every position ("attention_a", the gate
// "attention_b", "attention_c" with one output per branch and no bias: the softmax ignores a
// constant shift of a branch's scores), concatenated before the features
// for the attention pool "attention", then dropout and the classifier (grouped by branch: each
// class's logit from its own branch). Its class map form is [scores | class maps] at every
// position: the slide's logits are each class map weighted by its branch's attention
// (pipelines' heatmaps).
core::NodeId add_head(core::Graph& g, core::NodeId x, const ModelOptions& options);

// Whether a parameter or buffer (by its module name, "classifier.weight") belongs to the layers
// add_head names: a run's own head, which a checkpoint from other classes or another head need
// not fill (init_weights).
bool in_head(const std::string& parameter);

// "tiny", "vgg-mini", "vgg16", "vgg19", "darknet19", "resnet18", "resnet34", "resnet50".
std::vector<std::string> model_names();
// Throws tessel::Error listing the known names for an unknown one.
core::Graph build_model(const std::string& name, const ModelOptions& options = {});

// A random network for exactness tests (`tessel gradcheck --model random`): convs with random
// kernel, stride, padding, dilation, groups and bias; max and avg pools with ceil mode and
// padding; pointwise ops; residual adds and concats; and a random head (global avg or max pool
// + linear, or none). Valid for inputs of at least `min_size` pixels per side. Deterministic.
// With `barriers`, the same network with barriers (core/exec/barrier.h: train-mode batch norm,
// group norm, squeeze-and-excitation) after some activations, between blocks and inside residual
// branches, each after a nonlinearity (a per-channel shift straight before a batch norm has a
// gradient of exactly 0, which only rounding noise could be compared against).
core::Graph random_network(uint64_t seed, int64_t min_size = 16, int64_t in_channels = 3,
                           bool barriers = false);

}  // namespace tessel::models
