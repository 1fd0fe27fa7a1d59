#include "models/network_json.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace tessel::models {
namespace {

using core::Node;
using core::OpKind;
using core::Pointwise;
using nlohmann::json;

constexpr int kFormat = 1;

const char* op_name(const Node& n) {
  switch (n.kind) {
    case OpKind::kInput:
      return "input";
    case OpKind::kConv:
      return "conv";
    case OpKind::kMaxPool:
      return "max_pool";
    case OpKind::kAvgPool:
      return "avg_pool";
    case OpKind::kBinary:
      switch (n.binary) {
        case core::Binary::kAdd:
          return "add";
        case core::Binary::kSub:
          return "sub";
        case core::Binary::kMul:
          return "mul";
        case core::Binary::kDiv:
          return "div";
      }
      break;
    case OpKind::kConcat:
      return "concat";
    case OpKind::kBarrier:
      switch (n.barrier) {
        case core::BarrierOp::kBatchNorm:
          return "batch_norm";
        case core::BarrierOp::kGroupNorm:
          return "group_norm";
        case core::BarrierOp::kSqueezeExcite:
          return "squeeze_excite";
      }
      break;
    case OpKind::kGlobalAvgPool:
      return "global_avg_pool";
    case OpKind::kGlobalMaxPool:
      return "global_max_pool";
    case OpKind::kAttentionPool:
      return "attention_pool";
    case OpKind::kFlatten:
      return "flatten";
    case OpKind::kLinear:
      return "linear";
    case OpKind::kDropout:
      return "dropout";
    case OpKind::kPointwise:
      switch (n.pointwise) {
        case Pointwise::kIdentity:
          return "identity";
        case Pointwise::kRelu:
          return "relu";
        case Pointwise::kLeakyRelu:
          return "leaky_relu";
        case Pointwise::kGelu:
          return "gelu";
        case Pointwise::kSigmoid:
          return "sigmoid";
        case Pointwise::kTanh:
          return "tanh";
        case Pointwise::kAffine:
          return "frozen_batch_norm";
        case Pointwise::kGeluTanh:
          return "gelu_tanh";
        case Pointwise::kSilu:
          return "silu";
        case Pointwise::kHardSigmoid:
          return "hard_sigmoid";
        case Pointwise::kHardSwish:
          return "hard_swish";
        case Pointwise::kClamp:
          return "clamp";
        case Pointwise::kErf:
          return "erf";
        case Pointwise::kScalar:
          return "scalar";
        case Pointwise::kScale:
          return "scale";
        case Pointwise::kChannelNorm:
          return "channel_norm";
        case Pointwise::kDropout:
          return "dropout";
      }
      break;
  }
  throw Error("network_json: node " + n.name + " has an op this format does not know");
}

json pair(const std::array<int64_t, 2>& v) { return json::array({v[0], v[1]}); }

std::array<int64_t, 2> pair_of(const json& j, const char* key) {
  const json& v = j.at(key);
  if (!v.is_array() || v.size() != 2) throw Error(std::string("'") + key + "' is not [y, x]");
  return {v.at(0).get<int64_t>(), v.at(1).get<int64_t>()};
}

}  // namespace

std::string network_json(const core::Graph& graph, bool trunk_only) {
  size_t end = graph.nodes().size();
  if (trunk_only) {
    for (const Node& n : graph.nodes()) {
      if (n.kind == OpKind::kGlobalAvgPool || n.kind == OpKind::kGlobalMaxPool) {
        end = static_cast<size_t>(n.id);
        if (n.inputs.front() != n.id - 1) {
          throw Error("network_json: " + n.name + " does not pool the last feature map");
        }
        break;
      }
      if (n.kind == OpKind::kAttentionPool) {
        // The head starts after the features its scores and pool read (models::add_head).
        const Node& joined = graph.node(n.inputs.front());
        if (joined.kind != OpKind::kConcat) {
          throw Error("network_json: " + n.name + " does not read [scores | features]");
        }
        end = static_cast<size_t>(joined.inputs.back()) + 1;
        break;
      }
    }
  }
  json nodes = json::array();
  for (size_t i = 0; i < end; ++i) {
    const Node& n = graph.nodes()[i];
    json j = {{"op", op_name(n)}, {"name", n.name}};
    if (n.kind != OpKind::kInput) j["inputs"] = n.inputs;
    switch (n.kind) {
      case OpKind::kInput:
        j["channels"] = n.channels;
        break;
      case OpKind::kConv: {
        const core::ConvSpec& c = *n.conv;
        j.update({{"in", c.in_channels},
                  {"out", c.out_channels},
                  {"kernel", pair(c.kernel_size)},
                  {"stride", pair(c.stride_)},
                  {"padding", pair(c.padding_)},
                  {"dilation", pair(c.dilation_)},
                  {"groups", c.groups_},
                  {"bias", c.bias_}});
        if (c.padding_end_ != c.padding_) j["padding_end"] = pair(c.padding_end_);
        break;
      }
      case OpKind::kMaxPool:
      case OpKind::kAvgPool: {
        const core::PoolSpec& p = *n.pool;
        j.update({{"kernel", pair(p.kernel_size)},
                  {"stride", pair(p.stride_)},
                  {"padding", pair(p.padding_)},
                  {"dilation", pair(p.dilation_)},
                  {"ceil_mode", p.ceil_mode_},
                  {"count_include_pad", p.count_include_pad_},
                  {"divisor_override", p.divisor_override_}});
        if (p.padding_end_ != p.padding_) j["padding_end"] = pair(p.padding_end_);
        break;
      }
      case OpKind::kPointwise:
        switch (n.pointwise) {
          case Pointwise::kLeakyRelu:
            j["slope"] = n.slope;
            break;
          case Pointwise::kAffine:
          case Pointwise::kChannelNorm:
            j["eps"] = n.eps;
            break;
          case Pointwise::kHardSigmoid:
            j.update({{"alpha", n.coeff[0]}, {"beta", n.coeff[1]}});
            break;
          case Pointwise::kClamp:  // an open side (±inf, which JSON cannot hold) is left out
            if (std::isfinite(n.coeff[0])) j["min"] = n.coeff[0];
            if (std::isfinite(n.coeff[1])) j["max"] = n.coeff[1];
            break;
          case Pointwise::kScalar:
            j.update({{"scale", n.coeff[0]}, {"shift", n.coeff[1]}});
            break;
          case Pointwise::kScale:
            j["bias"] = n.layer->named_parameters(false).contains("bias");
            break;
          case Pointwise::kDropout:
            j["p"] = n.dropout_p;
            break;
          default:
            break;
        }
        break;
      case OpKind::kBarrier:
        switch (n.barrier) {
          case core::BarrierOp::kBatchNorm:
            j.update({{"eps", n.eps}, {"momentum", n.momentum}});
            break;
          case core::BarrierOp::kGroupNorm:
            j.update({{"eps", n.eps}, {"groups", n.groups}});
            break;
          case core::BarrierOp::kSqueezeExcite: {
            const core::SqueezeSpec& se = *n.squeeze;
            j.update({{"squeeze", se.squeeze_channels},
                      {"activation", se.activation == Pointwise::kSilu ? "silu" : "relu"}});
            if (se.gate == Pointwise::kHardSigmoid) {
              j.update({{"gate", "hard_sigmoid"},
                        {"alpha", se.gate_coeff[0]},
                        {"beta", se.gate_coeff[1]}});
            } else {
              j["gate"] = "sigmoid";
            }
            break;
          }
        }
        break;
      case OpKind::kLinear:
        j["out"] = n.channels;
        if (n.groups != 1) j["groups"] = n.groups;
        break;
      case OpKind::kAttentionPool:
        j["branches"] = n.branches;
        break;
      case OpKind::kDropout:
        j["p"] = n.dropout_p;
        break;
      default:
        break;
    }
    nodes.push_back(std::move(j));
  }
  return json{{"format", kFormat}, {"nodes", nodes}}.dump();
}

core::Graph network_from_json(const std::string& text, const std::string& source) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(source + ": the network description is not JSON (" + e.what() + ")");
  }
  if (!doc.is_object() || !doc.contains("nodes") || !doc["nodes"].is_array() ||
      doc["nodes"].empty()) {
    throw Error(source + ": the network description has no nodes");
  }
  if (doc.value("format", 0) != kFormat) {
    throw Error(source + ": network description format " + doc.value("format", json()).dump() +
                " is not one this Tessel reads (" + std::to_string(kFormat) + "); update Tessel");
  }
  const json& nodes = doc["nodes"];
  size_t i = 0;
  try {
    const json& first = nodes.at(0);
    if (first.at("op") != "input") throw Error("the first node is not the input");
    core::Graph g(first.at("channels").get<int64_t>());
    for (i = 1; i < nodes.size(); ++i) {
      const json& j = nodes[i];
      const std::string op = j.at("op").get<std::string>();
      const std::string name = j.value("name", "");
      const std::vector<core::NodeId> in = j.at("inputs").get<std::vector<core::NodeId>>();
      if (in.empty()) throw Error("it has no inputs");
      for (core::NodeId id : in) {
        if (id < 0 || static_cast<size_t>(id) >= i) {
          throw Error("input " + std::to_string(id) + " is not an earlier node");
        }
      }
      const auto one = [&in]() {
        if (in.size() != 1) throw Error("it takes one input");
        return in.front();
      };
      core::NodeId id = 0;
      if (op == "conv") {
        core::ConvSpec c(j.at("in").get<int64_t>(), j.at("out").get<int64_t>(), 1);
        c.kernel_size = pair_of(j, "kernel");
        c.stride_ = pair_of(j, "stride");
        c.padding_ = pair_of(j, "padding");
        c.padding_end_ = j.contains("padding_end") ? pair_of(j, "padding_end") : c.padding_;
        c.dilation_ = pair_of(j, "dilation");
        c.groups_ = j.at("groups").get<int64_t>();
        c.bias_ = j.at("bias").get<bool>();
        id = g.conv(one(), c, name);
      } else if (op == "max_pool" || op == "avg_pool") {
        const auto kernel = pair_of(j, "kernel");
        core::PoolSpec p(1);
        p.kernel_size = kernel;
        p.stride_ = pair_of(j, "stride");
        p.padding_ = pair_of(j, "padding");
        p.padding_end_ = j.contains("padding_end") ? pair_of(j, "padding_end") : p.padding_;
        p.dilation_ = pair_of(j, "dilation");
        p.ceil_mode_ = j.at("ceil_mode").get<bool>();
        p.count_include_pad_ = j.at("count_include_pad").get<bool>();
        p.divisor_override_ = j.at("divisor_override").get<int64_t>();
        id = op == "max_pool" ? g.max_pool(one(), p) : g.avg_pool(one(), p);
      } else if (op == "identity") {
        id = g.identity(one());
      } else if (op == "relu") {
        id = g.relu(one());
      } else if (op == "leaky_relu") {
        id = g.leaky_relu(one(), j.at("slope").get<double>());
      } else if (op == "gelu") {
        id = g.gelu(one());
      } else if (op == "sigmoid") {
        id = g.sigmoid(one());
      } else if (op == "tanh") {
        id = g.tanh(one());
      } else if (op == "frozen_batch_norm") {
        id = g.frozen_batch_norm(one(), name, j.at("eps").get<double>());
      } else if (op == "gelu_tanh") {
        id = g.gelu_tanh(one());
      } else if (op == "silu") {
        id = g.silu(one());
      } else if (op == "hard_swish") {
        id = g.hard_swish(one());
      } else if (op == "erf") {
        id = g.erf(one());
      } else if (op == "hard_sigmoid") {
        id = g.hard_sigmoid(one(), j.at("alpha").get<double>(), j.at("beta").get<double>());
      } else if (op == "clamp") {
        constexpr double kInf = std::numeric_limits<double>::infinity();
        id = g.clamp(one(), j.value("min", -kInf), j.value("max", kInf));
      } else if (op == "scalar") {
        id = g.scalar(one(), j.at("scale").get<double>(), j.at("shift").get<double>());
      } else if (op == "scale") {
        id = g.scale(one(), j.at("bias").get<bool>(), name);
      } else if (op == "channel_norm") {
        id = g.channel_norm(one(), j.at("eps").get<double>(), name);
      } else if (op == "batch_norm") {
        id = g.batch_norm(one(), name, j.at("eps").get<double>(), j.at("momentum").get<double>());
      } else if (op == "group_norm") {
        id = g.group_norm(one(), j.at("groups").get<int64_t>(), name, j.at("eps").get<double>());
      } else if (op == "squeeze_excite") {
        core::SqueezeSpec se;
        se.squeeze_channels = j.at("squeeze").get<int64_t>();
        const std::string act = j.at("activation").get<std::string>();
        if (act != "relu" && act != "silu") throw Error("activation '" + act + "' is unknown");
        se.activation = act == "silu" ? Pointwise::kSilu : Pointwise::kRelu;
        const std::string gate = j.at("gate").get<std::string>();
        if (gate == "hard_sigmoid") {
          se.gate = Pointwise::kHardSigmoid;
          se.gate_coeff = {j.at("alpha").get<double>(), j.at("beta").get<double>()};
        } else if (gate != "sigmoid") {
          throw Error("gate '" + gate + "' is unknown");
        }
        id = g.squeeze_excite(one(), se, name);
      } else if (op == "add" || op == "sub" || op == "mul" || op == "div") {
        if (in.size() != 2) throw Error(op + " takes two inputs");
        const core::Binary b = op == "add"   ? core::Binary::kAdd
                               : op == "sub" ? core::Binary::kSub
                               : op == "mul" ? core::Binary::kMul
                                             : core::Binary::kDiv;
        id = g.binary(in[0], in[1], b);
      } else if (op == "concat") {
        id = g.concat(in);
      } else if (op == "global_avg_pool") {
        id = g.global_avg_pool(one());
      } else if (op == "global_max_pool") {
        id = g.global_max_pool(one());
      } else if (op == "attention_pool") {
        id = g.attention_pool(one(), j.at("branches").get<int64_t>(), name);
      } else if (op == "flatten") {
        id = g.flatten(one());
      } else if (op == "linear") {
        id = g.linear(one(), j.at("out").get<int64_t>(), name, j.value("groups", int64_t{1}));
      } else if (op == "dropout") {
        id = g.dropout(one(), j.at("p").get<double>());
      } else {
        throw Error("'" + op + "' is not an op this Tessel knows");
      }
      if (static_cast<size_t>(id) != i) throw Error("it was not added in order");
    }
    return g;
  } catch (const json::exception& e) {
    throw Error(source + ": network node " + std::to_string(i) + " is malformed (" + e.what() +
                ")");
  } catch (const Error& e) {
    throw Error(source + ": network node " + std::to_string(i) + ": " + e.what());
  }
}

core::Graph network_with_head(const std::string& trunk, const std::string& source,
                              const ModelOptions& options) {
  core::Graph g = network_from_json(trunk, source);
  // A whole network (an imported one with its own classifier): its trunk.
  const bool pooled = std::any_of(g.nodes().begin(), g.nodes().end(), [](const Node& n) {
    return n.kind == OpKind::kGlobalAvgPool || n.kind == OpKind::kGlobalMaxPool ||
           n.kind == OpKind::kAttentionPool;
  });
  if (pooled) g = network_from_json(network_json(g, true), source);
  const Node& last = g.node(g.output());
  if (!last.spatial() || last.kind == OpKind::kInput) {
    throw Error(source + ": the network ends in " + last.name +
                ", not a feature map: its trunk is stored without a head");
  }
  add_head(g, g.output(), options);
  return g;
}

}  // namespace tessel::models
