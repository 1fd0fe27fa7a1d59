#include "models/zoo.h"

#include <cstring>
#include <functional>
#include <map>
#include <string_view>

#include "core/error.h"

namespace tessel::models {

using core::ConvSpec;
using core::Graph;
using core::NodeId;
using core::PoolSpec;

bool in_head(const std::string& parameter) {
  for (const char* layer : {"classifier", "attention_a", "attention_b", "attention_c"}) {
    const std::string_view name(parameter);
    if (name.starts_with(layer) && name.substr(std::strlen(layer)).starts_with('.')) return true;
  }
  return false;
}

namespace {

// The attention network's scores at every position of `x`: 1×B×h×w.
NodeId attention_scores(Graph& g, NodeId x, const AttentionHead& a) {
  const int64_t c = g.node(x).channels;
  // CLAM's Attn_Net_Gated: dropout after the tanh and after the sigmoid, at every position
  // (its mask a function of the position: exact under tiling, core/exec/dropout.h).
  const auto drop = [&](NodeId v) { return a.dropout > 0 ? g.dropout(v, a.dropout) : v; };
  NodeId v = drop(g.tanh(g.conv(x, ConvSpec(c, a.hidden, 1), "attention_a")));
  if (a.gated) {
    const NodeId gate = drop(g.sigmoid(g.conv(x, ConvSpec(c, a.hidden, 1), "attention_b")));
    v = g.binary(v, gate, core::Binary::kMul);
  }
  // No bias: a softmax over the positions does not see a constant added to every score, so its
  // gradient is exactly 0 (plain autograd's is rounding noise around it).
  return g.conv(v, ConvSpec(a.hidden, a.branches, 1).bias(false), "attention_c");
}

}  // namespace

NodeId add_head(Graph& g, NodeId x, const ModelOptions& o) {
  if (o.attention) {
    const AttentionHead& a = *o.attention;
    if (a.hidden < 1) throw Error("the attention network needs a hidden size of at least 1");
    if (a.branches != 1 && a.branches != o.classes) {
      throw Error("attention branches must be 1 or the number of classes (" +
                  std::to_string(o.classes) + "), not " + std::to_string(a.branches));
    }
    const NodeId scores = attention_scores(g, x, a);
    if (o.head == Head::kClassMap) {
      const NodeId maps = g.conv(x, ConvSpec(g.node(x).channels, o.classes, 1), "classifier");
      return g.concat({scores, maps});
    }
    NodeId z = g.attention_pool(g.concat({scores, x}), a.branches, "attention");
    if (o.dropout > 0) z = g.dropout(z, o.dropout);
    return g.linear(z, o.classes, "classifier", a.branches);
  }
  if (o.head == Head::kClassMap) {
    // The classifier applied at every position of the last feature map: a 1×1 convolution
    // with the linear layer's weights. Its global average is the pooled model's logits.
    return g.conv(x, ConvSpec(g.node(x).channels, o.classes, 1), "classifier");
  }
  x = o.global_max_pool ? g.global_max_pool(x) : g.global_avg_pool(x);
  if (o.dropout > 0) x = g.dropout(x, o.dropout);
  return g.linear(x, o.classes, "classifier");
}

namespace {

// VGG (Simonyan & Zisserman): 3×3/p1 convs + ReLU, 2×2/s2 max pools; `cfg` 0 marks a pool.
Graph vgg(const std::vector<int64_t>& cfg, int64_t width_divisor, const ModelOptions& o) {
  Graph g(o.in_channels);
  NodeId x = g.input();
  int64_t channels = o.in_channels;
  int block = 1, layer = 1;
  for (int64_t c : cfg) {
    if (c == 0) {
      x = g.max_pool(x, PoolSpec(2));
      ++block;
      layer = 1;
      continue;
    }
    const int64_t out = c / width_divisor;
    x = g.conv(x, ConvSpec(channels, out, 3).padding(1),
               "conv" + std::to_string(block) + "_" + std::to_string(layer++));
    x = g.relu(x);
    channels = out;
  }
  add_head(g, x, o);
  return g;
}

const std::vector<int64_t> kVgg16 = {64, 64,  0,   128, 128, 0,   256, 256, 256,
                                     0,  512, 512, 512, 0,   512, 512, 512, 0};
const std::vector<int64_t> kVgg19 = {64,  64,  0,   128, 128, 0,   256, 256, 256, 256, 0,
                                     512, 512, 512, 512, 0,   512, 512, 512, 512, 0};

// The normalisation after a bias-free conv, as ModelOptions::norm says.
NodeId norm(Graph& g, NodeId x, const std::string& name, const ModelOptions& o) {
  switch (o.norm) {
    case Norm::kFrozen:
      return g.frozen_batch_norm(x, name);
    case Norm::kBatch:
      return g.batch_norm(x, name);
    case Norm::kGroup: {
      int64_t groups = 32;
      while (g.node(x).channels % groups != 0) groups /= 2;
      return g.group_norm(x, groups, name);
    }
  }
  throw Error("unknown norm");
}

// Darknet-19 (Redmon & Farhadi, YOLO9000): 3×3 and 1×1 convs with batch norm and leaky ReLU 0.1,
// five 2×2 max pools.
Graph darknet19(const ModelOptions& o) {
  Graph g(o.in_channels);
  NodeId x = g.input();
  int64_t channels = o.in_channels;
  int n = 1;
  auto conv = [&](int64_t out, int64_t k) {
    x = g.conv(x, ConvSpec(channels, out, k).padding(k / 2).bias(false),
               "conv" + std::to_string(n));
    x = norm(g, x, "bn" + std::to_string(n++), o);
    x = g.leaky_relu(x, 0.1);
    channels = out;
  };
  auto pool = [&] { x = g.max_pool(x, PoolSpec(2)); };
  conv(32, 3);
  pool();
  conv(64, 3);
  pool();
  conv(128, 3);
  conv(64, 1);
  conv(128, 3);
  pool();
  conv(256, 3);
  conv(128, 1);
  conv(256, 3);
  pool();
  conv(512, 3);
  conv(256, 1);
  conv(512, 3);
  conv(256, 1);
  conv(512, 3);
  pool();
  conv(1024, 3);
  conv(512, 1);
  conv(1024, 3);
  conv(512, 1);
  conv(1024, 3);
  add_head(g, x, o);
  return g;
}

// ResNet-18/34 (He et al.) with basic blocks, ResNet-50 with bottlenecks (torchvision's: the
// stride on the 3×3 conv); batch norm as ModelOptions::norm says.
Graph resnet(const std::vector<int>& blocks, bool bottleneck, const ModelOptions& o) {
  Graph g(o.in_channels);
  NodeId x =
      g.conv(g.input(), ConvSpec(o.in_channels, 64, 7).stride(2).padding(3).bias(false), "conv1");
  x = g.relu(norm(g, x, "bn1", o));
  x = g.max_pool(x, PoolSpec(3).stride(2).padding(1));
  int64_t channels = 64;
  const int64_t expansion = bottleneck ? 4 : 1;
  for (size_t stage = 0; stage < blocks.size(); ++stage) {
    const int64_t width = 64 << stage;
    const int64_t out = width * expansion;
    for (int b = 0; b < blocks[stage]; ++b) {
      const int64_t stride = (b == 0 && stage > 0) ? 2 : 1;
      const std::string name = "layer" + std::to_string(stage + 1) + "_" + std::to_string(b);
      NodeId y;
      if (bottleneck) {
        y = g.conv(x, ConvSpec(channels, width, 1).bias(false), name + "_conv1");
        y = g.relu(norm(g, y, name + "_bn1", o));
        y = g.conv(y, ConvSpec(width, width, 3).stride(stride).padding(1).bias(false),
                   name + "_conv2");
        y = g.relu(norm(g, y, name + "_bn2", o));
        y = g.conv(y, ConvSpec(width, out, 1).bias(false), name + "_conv3");
        y = norm(g, y, name + "_bn3", o);
      } else {
        y = g.conv(x, ConvSpec(channels, out, 3).stride(stride).padding(1).bias(false),
                   name + "_conv1");
        y = g.relu(norm(g, y, name + "_bn1", o));
        y = g.conv(y, ConvSpec(out, out, 3).padding(1).bias(false), name + "_conv2");
        y = norm(g, y, name + "_bn2", o);
      }
      NodeId shortcut = x;
      if (stride != 1 || channels != out) {
        shortcut = g.conv(x, ConvSpec(channels, out, 1).stride(stride).bias(false), name + "_down");
        shortcut = norm(g, shortcut, name + "_down_bn", o);
      }
      x = g.relu(g.add(y, shortcut));
      channels = out;
    }
  }
  add_head(g, x, o);
  return g;
}

// A few layers for tests and smoke runs.
Graph tiny(const ModelOptions& o) {
  Graph g(o.in_channels);
  NodeId x = g.relu(g.conv(g.input(), ConvSpec(o.in_channels, 8, 3).padding(1), "conv1"));
  x = g.max_pool(x, PoolSpec(2));
  x = g.relu(g.conv(x, ConvSpec(8, 16, 3).padding(1), "conv2"));
  x = g.max_pool(x, PoolSpec(2));
  x = g.relu(g.conv(x, ConvSpec(16, 16, 3).padding(1), "conv3"));
  add_head(g, x, o);
  return g;
}

const std::map<std::string, std::function<Graph(const ModelOptions&)>>& registry() {
  static const std::map<std::string, std::function<Graph(const ModelOptions&)>> models = {
      {"tiny", tiny},
      {"vgg-mini", [](const ModelOptions& o) { return vgg(kVgg16, 4, o); }},
      {"vgg16", [](const ModelOptions& o) { return vgg(kVgg16, 1, o); }},
      {"vgg19", [](const ModelOptions& o) { return vgg(kVgg19, 1, o); }},
      {"darknet19", darknet19},
      {"resnet18",
       [](const ModelOptions& o) {
         return resnet({2, 2, 2, 2}, false, o);
       }},
      {"resnet34",
       [](const ModelOptions& o) {
         return resnet({3, 4, 6, 3}, false, o);
       }},
      {"resnet50",
       [](const ModelOptions& o) {
         return resnet({3, 4, 6, 3}, true, o);
       }},
  };
  return models;
}

}  // namespace

std::vector<std::string> model_names() {
  return {"tiny", "vgg-mini", "vgg16", "vgg19", "darknet19", "resnet18", "resnet34", "resnet50"};
}

std::string to_string(Norm norm) {
  switch (norm) {
    case Norm::kFrozen:
      return "frozen";
    case Norm::kBatch:
      return "batch";
    case Norm::kGroup:
      return "group";
  }
  return "?";
}

Norm parse_norm(const std::string& text) {
  if (text == "frozen") return Norm::kFrozen;
  if (text == "batch") return Norm::kBatch;
  if (text == "group") return Norm::kGroup;
  throw Error("unknown norm '" + text + "': choose frozen, batch or group");
}

Graph build_model(const std::string& name, const ModelOptions& options) {
  const auto it = registry().find(name);
  if (it == registry().end()) {
    std::string known;
    for (const auto& n : model_names()) known += (known.empty() ? "" : ", ") + n;
    throw Error("unknown model '" + name + "': choose one of " + known);
  }
  if (options.classes < 1) throw Error("a model needs at least one class");
  return it->second(options);
}

}  // namespace tessel::models
