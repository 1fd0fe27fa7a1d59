#include "pipelines/onnx_fuse.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

namespace tessel::pipelines {
namespace {

using io::OnnxModel;
using io::OnnxNode;

bool near(double a, double b) { return std::abs(a - b) <= 1e-6 * std::max(1.0, std::abs(b)); }

// The ONNX node list with fused patterns: the exporters write GELU as Div, Erf, Add, Mul, Mul
// (opset 18 has no Gelu), SiLU as Sigmoid and Mul, and hard swish sometimes as HardSigmoid and
// Mul. A fused node ("Gelu", "Silu", "HardSwish") computes the same function in one op, holding
// one activation instead of four. A pattern whose intermediates have other readers stays as is
// (each of its ops is supported on its own).
class Fuser {
 public:
  Fuser(const OnnxModel& model, std::vector<OnnxNode> nodes)
      : model_(model), nodes_(std::move(nodes)) {
    for (size_t i = 0; i < nodes_.size(); ++i) {
      for (const std::string& out : nodes_[i].outputs) producer_[out] = i;
      for (const std::string& in : nodes_[i].inputs) readers_[in].push_back(i);
    }
    for (const std::string& out : model.outputs) readers_[out].push_back(nodes_.size());
  }

  // The activations' patterns and group norm.
  std::vector<OnnxNode> run(std::vector<std::string>& notes) {
    std::vector<bool> gone(nodes_.size(), false);
    std::map<size_t, OnnxNode> replaced;
    int gelu = 0, silu = 0, hard_swish = 0, group_norm = 0;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      // A pattern starts at a node with an input and an output (a damaged file may have
      // neither: found by fuzzing).
      if (gone[i] || !unary(nodes_[i])) continue;
      if (nodes_[i].op_type == "Erf" && fuse_gelu(i, gone, replaced)) ++gelu;
      if (nodes_[i].op_type == "Sigmoid" && fuse_gated(i, "Silu", gone, replaced)) ++silu;
      if (nodes_[i].op_type == "HardSigmoid" && near(attr(nodes_[i], "alpha", 0.2), 1.0 / 6.0) &&
          near(attr(nodes_[i], "beta", 0.5), 0.5) && fuse_gated(i, "HardSwish", gone, replaced)) {
        ++hard_swish;
      }
      if (nodes_[i].op_type == "Reshape" && fuse_group_norm(i, gone, replaced)) ++group_norm;
    }
    std::vector<OnnxNode> out = rebuilt(gone, replaced);
    if (gelu) notes.push_back(std::to_string(gelu) + " GELU fused from Div, Erf, Add, Mul, Mul");
    if (silu) notes.push_back(std::to_string(silu) + " SiLU fused from Sigmoid, Mul");
    if (hard_swish) {
      notes.push_back(std::to_string(hard_swish) + " hard swish fused from HardSigmoid, Mul");
    }
    if (group_norm) {
      notes.push_back(std::to_string(group_norm) +
                      " group norm fused from Reshape, InstanceNormalization, Reshape, Mul, Add");
    }
    return out;
  }

  // Squeeze-and-excitation, on the first pass's result (its activation may be a fused SiLU).
  std::vector<OnnxNode> run_squeeze_excite(std::vector<std::string>& notes) {
    std::vector<bool> gone(nodes_.size(), false);
    std::map<size_t, OnnxNode> replaced;
    int blocks = 0;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      const std::string& op = nodes_[i].op_type;
      if (!gone[i] && unary(nodes_[i]) && (op == "GlobalAveragePool" || op == "ReduceMean") &&
          fuse_squeeze_excite(i, gone, replaced)) {
        ++blocks;
      }
    }
    if (blocks) {
      notes.push_back(std::to_string(blocks) +
                      " squeeze-and-excitation fused from a global average pool, Conv, "
                      "activation, Conv, gate, Mul");
    }
    return rebuilt(gone, replaced);
  }

 private:
  std::vector<OnnxNode> rebuilt(const std::vector<bool>& gone,
                                const std::map<size_t, OnnxNode>& replaced) const {
    std::vector<OnnxNode> out;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (auto r = replaced.find(i); r != replaced.end()) {
        out.push_back(r->second);
      } else if (!gone[i]) {
        out.push_back(nodes_[i]);
      }
    }
    return out;
  }

  static double attr(const OnnxNode& n, const char* key, double fallback) {
    auto it = n.floats.find(key);
    return it == n.floats.end() || it->second.empty() ? fallback : it->second[0];
  }

  static bool unary(const OnnxNode& n) {
    return !n.inputs.empty() && !n.inputs[0].empty() && !n.outputs.empty() && !n.outputs[0].empty();
  }

  // The one node that reads `value` (none if several or none), when it makes an output that a
  // pattern can go on from.
  std::optional<size_t> only_reader(const std::string& value) const {
    auto it = readers_.find(value);
    if (value.empty() || it == readers_.end() || it->second.size() != 1 ||
        it->second[0] >= nodes_.size() || !unary(nodes_[it->second[0]])) {
      return std::nullopt;
    }
    return it->second[0];
  }

  std::optional<double> scalar(const std::string& value) const {
    auto it = model_.constants.find(value);
    if (it == model_.constants.end() || it->second.numel() != 1) return std::nullopt;
    return it->second.to(at::kDouble).item<double>();
  }

  // For a binary node reading `value`, its other input.
  static std::optional<std::string> other_input(const OnnxNode& n, const std::string& value) {
    if (n.inputs.size() != 2) return std::nullopt;
    if (n.inputs[0] == value) return n.inputs[1];
    if (n.inputs[1] == value) return n.inputs[0];
    return std::nullopt;
  }

  // x / √2 (or x · 1/√2) → Erf → + 1 → then x and 0.5 multiplied in, in any of the orders the
  // exporters write: ((1 + erf) · x) · 0.5, ((1 + erf) · 0.5) · x, (x · 0.5) · (1 + erf).
  bool fuse_gelu(size_t erf, std::vector<bool>& gone, std::map<size_t, OnnxNode>& replaced) {
    const OnnxNode& e = nodes_[erf];
    auto p = producer_.find(e.inputs[0]);
    if (p == producer_.end() || !only_reader(e.inputs[0])) return false;
    const OnnxNode& scale = nodes_[p->second];
    if (scale.inputs.size() != 2) return false;
    const std::string x = scale.inputs[0];
    const auto c = scalar(scale.inputs[1]);
    if (!c || !((scale.op_type == "Div" && near(*c, std::sqrt(2.0))) ||
                (scale.op_type == "Mul" && near(*c, std::sqrt(0.5))))) {
      return false;
    }
    const auto add = only_reader(e.outputs[0]);
    if (!add || nodes_[*add].op_type != "Add") return false;
    const auto one = other_input(nodes_[*add], e.outputs[0]);
    if (!one || scalar(*one) != 1.0) return false;
    const auto m1 = only_reader(nodes_[*add].outputs[0]);
    if (!m1 || nodes_[*m1].op_type != "Mul") return false;
    const auto o1 = other_input(nodes_[*m1], nodes_[*add].outputs[0]);
    if (!o1) return false;
    std::vector<size_t> parts{p->second, erf, *add, *m1};
    size_t last = *m1;
    const auto half = [&](const std::string& v) { return scalar(v) == 0.5; };
    if (*o1 == x || half(*o1)) {
      // (1 + erf) · x, then · 0.5; or (1 + erf) · 0.5, then · x.
      const auto m2 = only_reader(nodes_[*m1].outputs[0]);
      if (!m2 || nodes_[*m2].op_type != "Mul") return false;
      const auto o2 = other_input(nodes_[*m2], nodes_[*m1].outputs[0]);
      if (!o2 || !(*o1 == x ? half(*o2) : *o2 == x)) return false;
      parts.push_back(*m2);
      last = *m2;
    } else {
      // (x · 0.5) · (1 + erf).
      auto h = producer_.find(*o1);
      if (h == producer_.end() || !only_reader(*o1)) return false;
      const OnnxNode& hn = nodes_[h->second];
      const auto ho = hn.op_type == "Mul" ? other_input(hn, x) : std::nullopt;
      if (!ho || !half(*ho) || h->second > *m1) return false;
      parts.push_back(h->second);
    }
    if (std::any_of(parts.begin(), parts.end(), [&](size_t part) { return gone[part]; })) {
      return false;  // a node of another pattern already
    }
    for (size_t part : parts) gone[part] = true;
    replaced[last] = fused("Gelu", x, nodes_[last]);
    return true;
  }

  // x · f(x) where f is Sigmoid (SiLU) or PyTorch's HardSigmoid (hard swish).
  bool fuse_gated(size_t gate, const char* op, std::vector<bool>& gone,
                  std::map<size_t, OnnxNode>& replaced) {
    const OnnxNode& g = nodes_[gate];
    const auto m = only_reader(g.outputs[0]);
    if (!m || nodes_[*m].op_type != "Mul") return false;
    const auto o = other_input(nodes_[*m], g.outputs[0]);
    if (!o || *o != g.inputs[0] || gone[*m]) return false;
    gone[gate] = gone[*m] = true;
    replaced[*m] = fused(op, g.inputs[0], nodes_[*m]);
    return true;
  }

  static int64_t int_attr(const OnnxNode& n, const char* key, int64_t fallback) {
    auto it = n.ints.find(key);
    return it == n.ints.end() || it->second.empty() ? fallback : it->second[0];
  }

  // An integer constant's values (axes, a shape), or none.
  std::optional<std::vector<int64_t>> ints_of(const std::string& value) const {
    auto it = model_.constants.find(value);
    if (value.empty() || it == model_.constants.end() || it->second.dim() > 1 ||
        it->second.is_floating_point()) {
      return std::nullopt;
    }
    const at::Tensor c = it->second.to(at::kLong).contiguous();
    return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
  }

  // Whether `value` is known before the network runs: a constant, or made from constants only
  // (the legacy exporter's Unsqueeze of a group norm's weight), which the importer folds.
  // Remembered per value, so that a damaged file's web of nodes costs one visit each.
  bool constant_value(const std::string& value, int depth = 0) {
    if (model_.constants.contains(value)) return true;
    if (auto known = constant_values_.find(value); known != constant_values_.end()) {
      return known->second;
    }
    auto p = producer_.find(value);
    if (value.empty() || depth > 8 || p == producer_.end()) return false;
    const OnnxNode& n = nodes_[p->second];
    const bool constant = !n.inputs.empty() && n.op_type != "Shape" &&
                          std::all_of(n.inputs.begin(), n.inputs.end(), [&](const std::string& in) {
                            return in.empty() || constant_value(in, depth + 1);
                          });
    constant_values_[value] = constant;
    return constant;
  }

  // A constant all of whose values are `v`.
  bool all_equal(const std::string& value, double v) const {
    auto it = model_.constants.find(value);
    return !value.empty() && it != model_.constants.end() && it->second.numel() > 0 &&
           (it->second.to(at::kDouble) == v).all().item<bool>();
  }

  // The mean over an N×C×H×W value's height and width, kept N×C×1×1.
  bool global_mean(const OnnxNode& n) const {
    if (n.op_type == "GlobalAveragePool") return true;
    if (n.op_type != "ReduceMean" || int_attr(n, "keepdims", 1) != 1) return false;
    std::optional<std::vector<int64_t>> axes;
    if (auto it = n.ints.find("axes"); it != n.ints.end()) axes = it->second;
    if (n.inputs.size() > 1 && !n.inputs[1].empty()) axes = ints_of(n.inputs[1]);
    if (!axes) return false;
    for (int64_t& a : *axes) a = a < 0 ? a + 4 : a;
    std::sort(axes->begin(), axes->end());
    return *axes == std::vector<int64_t>{2, 3};
  }

  // A Conv of `input` that is a 1×1 convolution without stride, padding, dilation or groups (a
  // fully connected layer on the pooled N×C×1×1 value); the importer checks its weight's shape.
  bool pointwise_conv(const OnnxNode& n, const std::string& input) const {
    const auto all = [&](const char* key, int64_t v) {
      auto it = n.ints.find(key);
      return it == n.ints.end() ||
             std::all_of(it->second.begin(), it->second.end(), [v](int64_t x) { return x == v; });
    };
    const auto pad = n.strings.find("auto_pad");
    return n.op_type == "Conv" && n.inputs.size() >= 2 && n.inputs.size() <= 3 &&
           n.inputs[0] == input && !n.inputs[1].empty() && all("kernel_shape", 1) &&
           all("strides", 1) && all("dilations", 1) && all("pads", 0) && all("group", 1) &&
           (pad == n.strings.end() || pad->second == "NOTSET" || pad->second == "VALID");
  }

  // GlobalAveragePool or ReduceMean(H, W) of x → Conv 1×1 → Relu or SiLU → Conv 1×1 → Sigmoid,
  // HardSigmoid (or the Mul, Add, Clip(0, 1) Tessel's export writes for one float32 cannot
  // hold) → Mul with x: one "SqueezeExcite" node (torchvision's SqueezeExcitation, timm's
  // SqueezeExcite), reading x and the two convs' weights and biases.
  bool fuse_squeeze_excite(size_t pool, std::vector<bool>& gone,
                           std::map<size_t, OnnxNode>& replaced) {
    const OnnxNode& p = nodes_[pool];
    if (!global_mean(p)) return false;
    const std::string& x = p.inputs[0];
    const auto c1 = only_reader(p.outputs[0]);
    if (!c1 || !pointwise_conv(nodes_[*c1], p.outputs[0])) return false;
    const auto act = only_reader(nodes_[*c1].outputs[0]);
    if (!act || (nodes_[*act].op_type != "Relu" && nodes_[*act].op_type != "Silu")) return false;
    const auto c2 = only_reader(nodes_[*act].outputs[0]);
    if (!c2 || !pointwise_conv(nodes_[*c2], nodes_[*act].outputs[0])) return false;
    std::vector<size_t> parts{pool, *c1, *act, *c2};
    OnnxNode se;
    se.op_type = "SqueezeExcite";
    se.strings["activation"] = nodes_[*act].op_type;
    auto gate = only_reader(nodes_[*c2].outputs[0]);
    if (!gate) return false;
    const OnnxNode& g = nodes_[*gate];
    if (g.op_type == "Sigmoid") {
      se.strings["gate"] = "Sigmoid";
    } else if (g.op_type == "HardSigmoid") {
      se.strings["gate"] = "HardSigmoid";
      se.floats["alpha"] = {attr(g, "alpha", 0.2)};
      se.floats["beta"] = {attr(g, "beta", 0.5)};
    } else if (g.op_type == "Mul") {  // · alpha, + beta, Clip(0, 1)
      const auto alpha = other_input(g, nodes_[*c2].outputs[0]);
      const auto add = only_reader(g.outputs[0]);
      if (!alpha || !scalar(*alpha) || !add || nodes_[*add].op_type != "Add") return false;
      const auto beta = other_input(nodes_[*add], g.outputs[0]);
      const auto clip = only_reader(nodes_[*add].outputs[0]);
      if (!beta || !scalar(*beta) || !clip || nodes_[*clip].op_type != "Clip" ||
          nodes_[*clip].inputs.size() != 3 || scalar(nodes_[*clip].inputs[1]) != 0.0 ||
          scalar(nodes_[*clip].inputs[2]) != 1.0) {
        return false;
      }
      se.strings["gate"] = "HardSigmoid";
      se.floats["alpha"] = {*scalar(*alpha)};
      se.floats["beta"] = {*scalar(*beta)};
      parts.push_back(*gate);
      parts.push_back(*add);
      gate = clip;
    } else {
      return false;
    }
    parts.push_back(*gate);
    const auto m = only_reader(nodes_[*gate].outputs[0]);
    if (!m || nodes_[*m].op_type != "Mul" ||
        other_input(nodes_[*m], nodes_[*gate].outputs[0]) != x) {
      return false;
    }
    parts.push_back(*m);
    if (std::any_of(parts.begin(), parts.end(), [&](size_t part) { return gone[part]; })) {
      return false;
    }
    for (size_t part : parts) gone[part] = true;
    const auto bias = [](const OnnxNode& conv) {
      return conv.inputs.size() > 2 ? conv.inputs[2] : std::string();
    };
    se.name = nodes_[*m].name;
    se.inputs = {x, nodes_[*c1].inputs[1], bias(nodes_[*c1]), nodes_[*c2].inputs[1],
                 bias(nodes_[*c2])};
    se.outputs = {nodes_[*m].outputs[0]};
    replaced[*m] = se;
    return true;
  }

  // PyTorch's GroupNorm (opset 17 and 18 have none): Reshape of x to [N, G, -1] →
  // InstanceNormalization (scale 1, bias 0) → Reshape back to x's shape (Shape(x), or the
  // export's static shape) → Mul by the weight → Add the bias: one "GroupNorm" node reading x,
  // the weight and the bias, with `groups` and `epsilon`.
  bool fuse_group_norm(size_t reshape, std::vector<bool>& gone,
                       std::map<size_t, OnnxNode>& replaced) {
    const OnnxNode& r = nodes_[reshape];
    const auto to = r.inputs.size() == 2 ? ints_of(r.inputs[1]) : std::nullopt;
    if (!to || to->size() != 3 || (*to)[0] < 0 || (*to)[0] > 1 || (*to)[1] < 1 || (*to)[2] != -1 ||
        int_attr(r, "allowzero", 0) != 0) {
      return false;
    }
    const std::string& x = r.inputs[0];
    const auto norm = only_reader(r.outputs[0]);
    if (!norm || nodes_[*norm].op_type != "InstanceNormalization" ||
        nodes_[*norm].inputs.size() != 3 || !all_equal(nodes_[*norm].inputs[1], 1.0) ||
        !all_equal(nodes_[*norm].inputs[2], 0.0)) {
      return false;
    }
    const auto back = only_reader(nodes_[*norm].outputs[0]);
    if (!back || nodes_[*back].op_type != "Reshape" || nodes_[*back].inputs.size() != 2) {
      return false;
    }
    std::vector<size_t> parts{reshape, *norm, *back};
    const std::string& shape = nodes_[*back].inputs[1];
    std::optional<int64_t> channels;
    if (const auto s = ints_of(shape)) {  // the export's static shape: N, C, H, W
      if (s->size() != 4) return false;
      channels = (*s)[1];
    } else if (auto p = producer_.find(shape);
               p != producer_.end() && nodes_[p->second].op_type == "Shape" &&
               nodes_[p->second].inputs.size() == 1 && nodes_[p->second].inputs[0] == x &&
               nodes_[p->second].ints.empty() && readers_.at(shape).size() == 1) {
      parts.push_back(p->second);
    } else {
      return false;
    }
    OnnxNode gn;
    gn.op_type = "GroupNorm";
    gn.ints["groups"] = {(*to)[1]};
    gn.floats["epsilon"] = {attr(nodes_[*norm], "epsilon", 1e-5)};
    gn.inputs = {x, "", ""};
    size_t last = *back;
    // The affine part, when there is one: a per-channel weight, then a per-channel bias.
    if (const auto mul = only_reader(nodes_[last].outputs[0]);
        mul && nodes_[*mul].op_type == "Mul") {
      const auto w = other_input(nodes_[*mul], nodes_[last].outputs[0]);
      const auto add = only_reader(nodes_[*mul].outputs[0]);
      if (w && constant_value(*w) && add && nodes_[*add].op_type == "Add") {
        const auto b = other_input(nodes_[*add], nodes_[*mul].outputs[0]);
        if (b && constant_value(*b)) {
          gn.inputs = {x, *w, *b};
          parts.push_back(*mul);
          parts.push_back(*add);
          last = *add;
        }
      }
    }
    // A static shape to go back to must hold the weight's channels (the importer checks the
    // weight against the activation).
    if (channels) {
      auto w = model_.constants.find(gn.inputs[1]);
      if (gn.inputs[1].empty() || (w != model_.constants.end() && w->second.numel() != *channels)) {
        return false;
      }
    }
    if (std::any_of(parts.begin(), parts.end(), [&](size_t part) { return gone[part]; })) {
      return false;
    }
    for (size_t part : parts) gone[part] = true;
    gn.name = nodes_[last].name;
    gn.outputs = {nodes_[last].outputs[0]};
    replaced[last] = gn;
    return true;
  }

  static OnnxNode fused(const char* op, const std::string& x, const OnnxNode& last) {
    OnnxNode n;
    n.name = last.name;
    n.op_type = op;
    n.inputs = {x};
    n.outputs = {last.outputs[0]};
    return n;
  }

  const OnnxModel& model_;
  std::vector<OnnxNode> nodes_;
  std::map<std::string, size_t> producer_;
  std::map<std::string, std::vector<size_t>> readers_;  // nodes_.size(): a graph output
  std::map<std::string, bool> constant_values_;
};

}  // namespace

std::vector<io::OnnxNode> fuse_onnx_patterns(const io::OnnxModel& model,
                                             std::vector<std::string>& notes) {
  std::vector<io::OnnxNode> nodes = Fuser(model, model.nodes).run(notes);
  return Fuser(model, std::move(nodes)).run_squeeze_excite(notes);
}

}  // namespace tessel::pipelines
