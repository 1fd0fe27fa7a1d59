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
  explicit Fuser(const OnnxModel& model) : model_(model), nodes_(model.nodes) {
    for (size_t i = 0; i < nodes_.size(); ++i) {
      for (const std::string& out : nodes_[i].outputs) producer_[out] = i;
      for (const std::string& in : nodes_[i].inputs) readers_[in].push_back(i);
    }
    for (const std::string& out : model.outputs) readers_[out].push_back(nodes_.size());
  }

  std::vector<OnnxNode> run(std::vector<std::string>& notes) {
    std::vector<bool> gone(nodes_.size(), false);
    std::map<size_t, OnnxNode> replaced;
    int gelu = 0, silu = 0, hard_swish = 0;
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
    }
    std::vector<OnnxNode> out;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (auto r = replaced.find(i); r != replaced.end()) {
        out.push_back(r->second);
      } else if (!gone[i]) {
        out.push_back(nodes_[i]);
      }
    }
    if (gelu) notes.push_back(std::to_string(gelu) + " GELU fused from Div, Erf, Add, Mul, Mul");
    if (silu) notes.push_back(std::to_string(silu) + " SiLU fused from Sigmoid, Mul");
    if (hard_swish) {
      notes.push_back(std::to_string(hard_swish) + " hard swish fused from HardSigmoid, Mul");
    }
    return out;
  }

 private:
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
};

}  // namespace

std::vector<io::OnnxNode> fuse_onnx_patterns(const io::OnnxModel& model,
                                             std::vector<std::string>& notes) {
  return Fuser(model).run(notes);
}

}  // namespace tessel::pipelines
