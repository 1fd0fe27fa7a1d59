#include "core/plan/glass.h"

#include <algorithm>

#include "core/plan/geometry.h"

namespace tessel::core {

std::string glass_obstacle(const Graph& graph, const Segment& s, bool training) {
  if (s.is<SharedRows>()) return "shared rows do not skip glass yet";
  if (s.reduction >= 0 && graph.node(s.reduction).kind == OpKind::kGlobalMaxPool) {
    return "a global max pool closes it (its ties with the uniform value)";
  }
  for (NodeId v = s.input + 1; v <= s.output; ++v) {
    const Node& node = graph.node(v);
    if (training && node.kind == OpKind::kPointwise && node.pointwise == Pointwise::kDropout) {
      return node.name + " draws a dropout mask per position";
    }
    if (node.is_barrier() && (training || node.barrier != BarrierOp::kBatchNorm)) {
      return node.name + " reads a statistic of the whole activation";
    }
  }
  return "";
}

bool padding_free(const Graph& graph, const std::vector<Shape>& shapes, NodeId input, NodeId output,
                  const std::vector<Region>& need) {
  for (NodeId v = input + 1; v <= output; ++v) {
    const Region& r = need[static_cast<size_t>(v)];
    if (r.empty()) continue;
    const Node& node = graph.node(v);
    const Region window{input_window(node.axis_op(0), r.y), input_window(node.axis_op(1), r.x)};
    for (NodeId p : node.inputs) {
      const Shape& in = shapes[static_cast<size_t>(p)];
      if (window.y.begin < 0 || window.x.begin < 0 || window.y.end > in.height ||
          window.x.end > in.width) {
        return false;
      }
    }
  }
  return true;
}

namespace {

std::vector<uint8_t> classify(const Graph& graph, const std::vector<Shape>& shapes,
                              const Segment& s, const Partition& part, const CellMask& input) {
  std::vector<uint8_t> glass(static_cast<size_t>(part.tiles()), 0);
  for (int64_t t = 0; t < part.tiles(); ++t) {
    const std::vector<Region> need = segment_needs(graph, shapes, s.input, s.output, part.tile(t));
    glass[static_cast<size_t>(t)] = input.contains(need[static_cast<size_t>(s.input)]) &&
                                    padding_free(graph, shapes, s.input, s.output, need);
  }
  return glass;
}

}  // namespace

int64_t SegmentGlass::forward_count() const {
  return std::count(forward.begin(), forward.end(), 1);
}

int64_t SegmentGlass::backward_count() const {
  return std::count(backward.begin(), backward.end(), 1);
}

SegmentGlass glass_tiles(const Graph& graph, const std::vector<Shape>& shapes, const Segment& s,
                         const CellMask& input, bool training, bool skip_backward) {
  SegmentGlass g;
  if (input.none()) {
    g.forward.assign(static_cast<size_t>(s.forward.tiles()), 0);
    g.backward.assign(static_cast<size_t>(s.backward.tiles()), 0);
    return g;
  }
  g.forward = classify(graph, shapes, s, s.forward, input);
  g.backward = training && skip_backward
                   ? classify(graph, shapes, s, s.backward, input)
                   : std::vector<uint8_t>(static_cast<size_t>(s.backward.tiles()), 0);
  const Partition& covered = training ? s.backward : s.forward;
  const std::vector<uint8_t>& glass = training ? g.backward : g.forward;
  if (std::count(glass.begin(), glass.end(), 1) > 0) {
    g.output = CellMask(covered.y_edges, covered.x_edges, glass);
  }
  return g;
}

double SegmentGlass::forward_fraction(const Partition& part) const {
  int64_t area = 0, all = 0;
  for (int64_t t = 0; t < part.tiles(); ++t) {
    const int64_t a = part.tile(t).area();
    all += a;
    if (forward[static_cast<size_t>(t)] != 0) area += a;
  }
  return all == 0 ? 0.0 : static_cast<double>(area) / static_cast<double>(all);
}

SegmentGlass segment_glass(const Graph& graph, const std::vector<Shape>& shapes, const Segment& s,
                           const CellMask& input, bool training, bool image_gradient) {
  std::string obstacle = input.none() ? "" : glass_obstacle(graph, s, training);
  const bool skip_backward = s.input != 0 || !image_gradient;
  SegmentGlass g =
      glass_tiles(graph, shapes, s, obstacle.empty() ? input : CellMask(), training, skip_backward);
  g.obstacle = std::move(obstacle);
  return g;
}

std::vector<SegmentGlass> plan_glass(const Graph& graph, const Plan& plan, const CellMask& image,
                                     bool training, bool image_gradient) {
  std::vector<SegmentGlass> out;
  out.reserve(plan.segments.size());  // each segment reads the previous one's output mask
  for (const Segment& s : plan.segments) {
    const CellMask& uniform = out.empty() ? image : out.back().output;
    out.push_back(segment_glass(graph, plan.shapes, s, uniform, training, image_gradient));
  }
  return out;
}

GlassSummary summarize(const Plan& plan, const CellMask& image,
                       const std::vector<SegmentGlass>& glass) {
  GlassSummary g;
  g.image_fraction = image.fraction();
  double flops = 0, skipped = 0;
  for (size_t i = 0; i < glass.size() && i < plan.segments.size(); ++i) {
    const Segment& s = plan.segments[i];
    g.forward_tiles += s.forward.tiles();
    g.backward_tiles += s.backward.tiles();
    g.glass_forward_tiles += glass[i].forward_count();
    g.glass_backward_tiles += glass[i].backward_count();
    flops += static_cast<double>(s.halo_flops);
    skipped += static_cast<double>(s.halo_flops) * glass[i].forward_fraction(s.forward);
  }
  g.flops_fraction = flops > 0 ? skipped / flops : 0.0;
  return g;
}

}  // namespace tessel::core
