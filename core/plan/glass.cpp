#include "core/plan/glass.h"

#include <algorithm>
#include <map>

#include "core/error.h"
#include "core/graph/node_vec.h"
#include "core/plan/box_set.h"
#include "core/plan/geometry.h"
#include "core/plan/tile_cost.h"

namespace tessel::core {

std::string glass_obstacle(const Graph& graph, const Segment& s, bool training) {
  if (s.reduction >= 0 && graph.node(s.reduction).kind == OpKind::kGlobalMaxPool) {
    return "a global max pool closes it (its ties with the uniform value)";
  }
  for (NodeId v = s.input + 1; v <= s.output; ++v) {
    const Node& node = graph.node(v);
    if (training && node.kind == OpKind::kPointwise && node.pointwise == Pointwise::kDropout) {
      return node.name + " draws a dropout mask per position";
    }
  }
  return "";
}

std::string glass_dense(const Graph& graph, const Segment& s, bool training) {
  if (s.is<SharedRows>()) return "shared rows read padding at every node";
  if (s.is<RecomputeRounds>()) return "";  // the rounds take glass into their statistics
  if (s.is<WholeBarriers>()) return "";    // its one tile computes them over its fills
  if (s.is<SubSegments>()) {
    // Their passes take glass into their statistics and sums too (core/exec/glass.h), with
    // their inner checkpoints whole.
    if (s.inner_tier() == Tier::kResident) return "";
    return "its inner checkpoints are offloaded (sub-segments)";
  }
  for (NodeId v = s.input + 1; v <= s.output; ++v) {
    const Node& node = graph.node(v);
    if (node.is_barrier() && (training || node.barrier != BarrierOp::kBatchNorm)) {
      return node.name + " reads a statistic of the whole activation (" + to_string(s.scheme) + ")";
    }
  }
  return "";
}

bool whole_statistics(const Graph& graph, const Segment& s, bool training) {
  return s.is<WholeBarriers>() && !barrier_rounds(graph, s.input, s.output, training).empty();
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

// Far enough outside any activation to stand for the whole padding on one side.
constexpr int64_t kFar = int64_t{1} << 40;

// The positions of `r` (node `node`'s region) whose window reads padding or a position of an
// input's boxes (`box`, by node), as disjoint boxes: one per input box reached and one per side
// whose padding is read, overlaps cut away, at most kMostBoxes (core/plan/box_set.h). A barrier's
// as one box (its tile runs whole: core/exec/barrier.h), unless `barriers_whole`.
Boxes reading_boxes(const Node& node, const std::vector<Shape>& shapes, const Region& r,
                    const std::vector<Boxes>& box, bool barriers_whole) {
  const AxisOp& oy = node.axis_op(0);
  const AxisOp& ox = node.axis_op(1);
  Boxes parts;
  const auto add = [&](const Region& part) {
    const Region p = intersect(part, r);
    if (!p.empty()) parts.push_back(p);
  };
  for (NodeId p : node.inputs) {
    for (const Region& b : box[static_cast<size_t>(p)]) {
      add({reaching(oy, b.y), reaching(ox, b.x)});
    }
    const Shape& in = shapes[static_cast<size_t>(p)];
    add({reaching(oy, {-kFar, 0}), r.x});
    add({reaching(oy, {in.height, kFar}), r.x});
    add({r.y, reaching(ox, {-kFar, 0})});
    add({r.y, reaching(ox, {in.width, kFar})});
  }
  if (node.is_barrier() && !barriers_whole) return parts.empty() ? Boxes{} : Boxes{hull(parts)};
  return disjoint_boxes(std::move(parts), barriers_whole ? kMostWholeBoxes : kMostBoxes);
}

// The positions of `r` outside `m`, as the smallest box of each block of a kWholeGrid ×
// kWholeGrid grid over `r` that holds some: a whole segment's tile is the whole image, where
// tissue fragments joined by a thin strip make one piece whose hull is most of the image.
constexpr int64_t kWholeGrid = 8;

Boxes outside_by_block(const CellMask& m, const Region& r) {
  Boxes out;
  const auto edge = [](const Window& w, int64_t k) { return w.begin + w.size() * k / kWholeGrid; };
  for (int64_t i = 0; i < kWholeGrid; ++i) {
    for (int64_t j = 0; j < kWholeGrid; ++j) {
      const Region block{{edge(r.y, i), edge(r.y, i + 1)}, {edge(r.x, j), edge(r.x, j + 1)}};
      if (block.empty()) continue;
      const Region b = m.outside_box(block);
      if (!b.empty()) out.push_back(b);
    }
  }
  return out;
}

}  // namespace

std::vector<Boxes> computed_boxes(const Graph& graph, const std::vector<Shape>& shapes,
                                  NodeId input, NodeId output, const std::vector<Region>& need,
                                  const TileUniform& uniform) {
  const std::map<NodeId, CellMask>* given = uniform.given;
  std::vector<Boxes> box(need.size());
  const auto outside = [&](const CellMask& m, const Region& r) {
    if (m.none()) return Boxes{r};
    if (uniform.barriers_whole) return disjoint_boxes(outside_by_block(m, r), kMostWholeBoxes);
    return disjoint_boxes(m.outside_pieces(r), kMostBoxes);
  };
  const auto in = static_cast<size_t>(input);
  if (!need[in].empty()) box[in] = outside(uniform.input, need[in]);
  const auto whole = [&](NodeId p) {
    const Boxes& b = box[static_cast<size_t>(p)];
    return b.size() == 1 && b.front() == need[static_cast<size_t>(p)];
  };
  for (NodeId v = input + 1; v <= output; ++v) {
    const Region& r = need[static_cast<size_t>(v)];
    if (r.empty()) continue;
    if (given != nullptr && v < output && given->count(v) > 0) {  // given: its uniform positions
      box[static_cast<size_t>(v)] = outside(given->at(v), r);
      continue;
    }
    // Where every input's box is its whole region, so is this node's: each position reads some
    // of it or padding. Most of a tile that sees tissue, and half the planner's time with a
    // background when computed box by box (resnet50 2048²).
    const Node& node = graph.node(v);
    box[static_cast<size_t>(v)] = std::all_of(node.inputs.begin(), node.inputs.end(), whole)
                                      ? Boxes{r}
                                      : reading_boxes(node, shapes, r, box, uniform.barriers_whole);
  }
  // Each node's boxes derived from its inputs' as they are (a hull joined early would grow
  // through every later node), then those a call apart joined for the run; not the output's,
  // whose boxes say which positions the next segment takes as uniform.
  // Nor those computed whole, whose boxes say only which positions are uniform (a barrier's
  // value is read outside them).
  for (NodeId v = input + 1; v < output; ++v) {
    if (computed_whole(graph.node(v), uniform.barriers_whole)) continue;
    box[static_cast<size_t>(v)] = join_cheap(std::move(box[static_cast<size_t>(v)]));
  }
  return box;
}

bool computed_whole(const Node& node, bool barriers_whole) {
  return barriers_whole && (node.kind == OpKind::kPointwise || node.kind == OpKind::kBinary ||
                            node.kind == OpKind::kConcat || node.is_barrier());
}

bool runs_whole(const Node& node, bool barriers_whole) {
  return computed_whole(node, barriers_whole) || keeps_own_output(node);
}

namespace {

// What consumer `c`, holding `held` and computing `boxes` of it (all it holds where it runs
// whole), reads of its input shaped `in`.
Region consumer_reads(const Node& c, const Region& held, const Boxes& boxes, const Shape& in,
                      bool barriers_whole) {
  if (runs_whole(c, barriers_whole)) return needed_input(c, held, in);
  Region r;
  for (const Region& b : boxes) {
    const Region computed = intersect(b, held);
    if (!computed.empty()) r = hull(r, needed_input(c, computed, in));
  }
  return r;
}

}  // namespace

std::vector<Region> held_regions(const Graph& graph, const std::vector<Shape>& shapes,
                                 NodeSpan nodes, const std::vector<Region>& need,
                                 const std::vector<Boxes>& box, bool barriers_whole) {
  const NodeId input = nodes.input, output = nodes.output;
  std::vector<Region> held(need.size());
  held[static_cast<size_t>(output)] = need[static_cast<size_t>(output)];
  const auto whole_region = [&](NodeId v) {
    if (graph.node(v).is_barrier()) return true;
    for (NodeId c : graph.consumers()[static_cast<size_t>(v)]) {
      if (c <= output && graph.node(c).is_barrier()) return true;
    }
    return false;
  };
  for (NodeId v = output - 1; v > input; --v) {
    const auto i = static_cast<size_t>(v);
    if (whole_region(v)) {
      held[i] = need[i];
      continue;
    }
    Region r;
    for (NodeId c : graph.consumers()[i]) {
      if (c > output) continue;
      const auto ci = static_cast<size_t>(c);
      r = hull(r, consumer_reads(graph.node(c), held[ci], box[ci], shapes[i], barriers_whole));
    }
    held[i] = intersect(r, need[i]);
  }
  return held;
}

std::vector<Boxes> held_boxes(const std::vector<Boxes>& box, const std::vector<Region>& held) {
  std::vector<Boxes> out(box.size());
  for (size_t v = 0; v < box.size(); ++v) {
    for (const Region& b : box[v]) {
      const Region part = intersect(b, held[v]);
      if (!part.empty()) out[v].push_back(part);
    }
  }
  return out;
}

std::vector<BoxCopies> boxed_copies(const Graph& graph, const std::vector<Shape>& shapes,
                                    NodeSpan nodes, const std::vector<Boxes>& computed,
                                    const std::vector<Region>& held, int64_t element_bytes) {
  std::vector<BoxCopies> copies(held.size());
  for (NodeId v = nodes.input + 1; v <= nodes.output; ++v) {
    const Node& n = graph.node(v);
    const auto i = static_cast<size_t>(v);
    const Boxes& boxes = computed[i];
    if (held[i].empty() || boxes.empty() || (boxes.size() == 1 && boxes.front() == held[i]) ||
        runs_whole(n, false)) {
      continue;
    }
    const bool conv = n.kind == OpKind::kConv;
    const bool pool = n.kind == OpKind::kMaxPool || n.kind == OpKind::kAvgPool;
    const NodeId p = n.inputs.front();
    BoxCopies& c = copies[i];
    c.boxed = true;
    for (const Region& b : boxes) {
      const int64_t out = n.channels * b.area() * element_bytes;
      c.parts += out;
      if (out <= c.out) continue;
      c.out = out;
      c.window = graph.node(p).channels *
                 needed_input(n, b, shapes[static_cast<size_t>(p)]).area() * element_bytes;
    }
    // The image's window has no gradient to add.
    if (conv) c.backward_copies = c.out + (p == 0 ? 1 : 2) * c.window;
    if (pool) c.backward_copies = c.out;
  }
  return copies;
}

int64_t regions_flops(const Graph& graph, NodeId input, NodeId output,
                      const std::vector<Region>& regions) {
  int64_t sum = 0;
  for (NodeId v = input + 1; v <= output; ++v) {
    const Region& r = regions[static_cast<size_t>(v)];
    if (!r.empty()) sum += planning::flops(graph.node(v), r);
  }
  return sum;
}

int64_t boxes_flops(const Graph& graph, NodeId input, NodeId output,
                    const std::vector<Boxes>& boxes) {
  int64_t sum = 0;
  for (NodeId v = input + 1; v <= output; ++v) {
    for (const Region& r : boxes[static_cast<size_t>(v)]) {
      if (!r.empty()) sum += planning::flops(graph.node(v), r);
    }
  }
  return sum;
}

namespace {

// A pass's tiles over `input`: glass or not, each tile's computed FLOPs and its output's
// computed box (empty for a glass tile).
struct Classified {
  std::vector<uint8_t> glass;
  std::vector<int64_t> flops;
  std::vector<Boxes> output_box;
  int64_t dense = 0;
};

Classified classify(const Graph& graph, const std::vector<Shape>& shapes, const Segment& s,
                    const Partition& part, const CellMask& input, bool training) {
  const bool whole = whole_statistics(graph, s, training);
  const TileUniform uniform{input, nullptr, s.is<WholeBarriers>()};
  Classified c;
  c.glass.assign(static_cast<size_t>(part.tiles()), 0);
  c.flops.assign(static_cast<size_t>(part.tiles()), 0);
  c.output_box.assign(static_cast<size_t>(part.tiles()), Boxes{});
  for (int64_t t = 0; t < part.tiles(); ++t) {
    const std::vector<Region> need = segment_needs(graph, shapes, s.input, s.output, part.tile(t));
    const auto i = static_cast<size_t>(t);
    c.glass[i] = !whole && input.contains(need[static_cast<size_t>(s.input)]) &&
                 padding_free(graph, shapes, s.input, s.output, need);
    c.dense += regions_flops(graph, s.input, s.output, need);
    if (c.glass[i] == 0) {
      const std::vector<Boxes> box =
          computed_boxes(graph, shapes, s.input, s.output, need, uniform);
      c.flops[i] = boxes_flops(graph, s.input, s.output, box);
      c.output_box[i] = box[static_cast<size_t>(s.output)];
    }
  }
  return c;
}

// Cells of uniform_outputs: at most about this many a side, besides the tiles' edges.
constexpr int64_t kOutputCells = 128;

// `tile_edges` with cuts every size / kOutputCells positions.
std::vector<int64_t> output_edges(std::vector<int64_t> tile_edges, int64_t size) {
  const int64_t step = std::max<int64_t>(1, (size + kOutputCells - 1) / kOutputCells);
  for (int64_t e = step; e < size; e += step) tile_edges.push_back(e);
  std::sort(tile_edges.begin(), tile_edges.end());
  tile_edges.erase(std::unique(tile_edges.begin(), tile_edges.end()), tile_edges.end());
  return tile_edges;
}

// The output positions a pass over `part` classified as `c` leaves uniform: its glass tiles'
// and, in its other tiles, those outside the output's computed box (filled with the output's
// uniform value: a forward writes it there, a backward takes their gradient as a sum). On cells
// of at most kOutputCells a side within each tile; a cell that meets a box is not uniform.
CellMask uniform_outputs(const Shape& out, const Partition& part, const Classified& c) {
  const std::vector<int64_t> ys = output_edges(part.y_edges, out.height);
  const std::vector<int64_t> xs = output_edges(part.x_edges, out.width);
  const auto cols = static_cast<int64_t>(xs.size()) - 1;
  std::vector<uint8_t> in(static_cast<size_t>((static_cast<int64_t>(ys.size()) - 1) * cols), 0);
  const auto index = [](const std::vector<int64_t>& edges, int64_t at) {
    return std::lower_bound(edges.begin(), edges.end(), at) - edges.begin();
  };
  bool any = false;
  for (int64_t t = 0; t < part.tiles(); ++t) {
    const Region tile = part.tile(t);
    const auto i = static_cast<size_t>(t);
    const Boxes& box = c.output_box[i];
    if (c.glass[i] == 0 && box.size() == 1 && box.front() == tile) continue;  // none uniform
    for (int64_t r = index(ys, tile.y.begin); r < index(ys, tile.y.end); ++r) {
      for (int64_t k = index(xs, tile.x.begin); k < index(xs, tile.x.end); ++k) {
        const Region cell{{ys[static_cast<size_t>(r)], ys[static_cast<size_t>(r) + 1]},
                          {xs[static_cast<size_t>(k)], xs[static_cast<size_t>(k) + 1]}};
        const bool uniform =
            c.glass[i] != 0 || std::none_of(box.begin(), box.end(), [&](const Region& b) {
              return !intersect(cell, b).empty();
            });
        in[static_cast<size_t>(r * cols + k)] = uniform ? 1 : 0;
        any = any || uniform;
      }
    }
  }
  return any ? CellMask(ys, xs, std::move(in)) : CellMask();
}

}  // namespace

int64_t SegmentGlass::forward_count() const {
  return std::count(forward.begin(), forward.end(), 1);
}

int64_t SegmentGlass::forward_saved_flops() const {
  int64_t computed = 0;
  for (int64_t f : forward_flops) computed += f;
  return forward_dense_flops - computed;
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
  const Shape& out = shapes[static_cast<size_t>(s.output)];
  Classified f = classify(graph, shapes, s, s.forward, input, training);
  g.forward_flops = f.flops;
  g.forward_dense_flops = f.dense;
  if (training && skip_backward) {
    // Most plans run both passes over one partition: classified once (half the planner's time
    // with a background went here twice).
    Classified b =
        s.backward == s.forward ? f : classify(graph, shapes, s, s.backward, input, training);
    g.backward_flops = b.flops;
    g.backward_dense_flops = b.dense;
    g.input = input;
    g.output = uniform_outputs(out, s.backward, b);
    g.backward = std::move(b.glass);
  } else {
    g.backward.assign(static_cast<size_t>(s.backward.tiles()), 0);
    if (!training) {
      g.input = input;
      g.output = uniform_outputs(out, s.forward, f);
    }
  }
  g.forward = std::move(f.glass);
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

std::vector<uint8_t> SegmentGlass::uniform_blocks(const Partition& part,
                                                  const Partition& blocks) const {
  if (forward_count() == 0) return {};
  std::vector<uint8_t> uniform(static_cast<size_t>(blocks.tiles()), 0);
  for (int64_t b = 0; b < blocks.tiles(); ++b) {
    const Region r = blocks.tile(b);
    const Region corner{{r.y.begin, r.y.begin + 1}, {r.x.begin, r.x.begin + 1}};
    const std::vector<int64_t> tiles = part.meeting(corner);
    if (tiles.size() != 1) throw Error("internal: an offload block outside the forward's tiles");
    const Region t = part.tile(tiles.front());
    if (intersect(r, t).area() != r.area()) {
      throw Error("internal: an offload block across two of the forward's tiles");
    }
    uniform[static_cast<size_t>(b)] = forward[static_cast<size_t>(tiles.front())];
  }
  return uniform;
}

bool sparse_checkpoint(const Plan& plan, size_t i, const std::vector<SegmentGlass>& glass) {
  if (i + 1 >= plan.segments.size() || i >= glass.size()) return false;
  const Segment& s = plan.segments[i];
  if (s.tier != Tier::kResident || s.reduction >= 0 || glass[i].forward_count() == 0) return false;
  if (s.keeps_graph() && s.forward.tiles() == 1) return false;  // the tile is the output
  return !plan.segments[i + 1].keeps_graph();
}

namespace {

// For output bands between `edges` along `axis` (0: rows, 1: columns) of segment `s`: the input
// positions each band's windows read along that axis, and whether any of them reads padding.
// Every node's region a cell's windows reach is a product of its row band's and its column
// band's (each op's window is one per axis), so a cell's is the two looked up. One pass over
// the nodes for all bands: segment_needs band by band made the planner 5× slower.
struct AxisReach {
  Window input;
  bool padding_free = true;
};

std::vector<AxisReach> axis_reaches(const Graph& graph, const std::vector<Shape>& shapes,
                                    const Segment& s, const std::vector<int64_t>& edges, int axis) {
  const size_t bands = edges.size() - 1;
  const auto size_of = [&](NodeId v) {
    const Shape& sh = shapes[static_cast<size_t>(v)];
    return axis == 0 ? sh.height : sh.width;
  };
  NodeVec<std::vector<Window>> need(s.output + 1);
  for (size_t i = 0; i < bands; ++i) need[s.output].push_back({edges[i], edges[i + 1]});
  std::vector<uint8_t> free(bands, 1);
  for (NodeId v = s.output - 1; v >= s.input; --v) {
    need[v].assign(bands, Window{});
    const Window bounds{0, size_of(v)};
    for (NodeId c : graph.consumers()[static_cast<size_t>(v)]) {
      if (c > s.output) continue;
      const AxisOp& op = graph.node(c).axis_op(axis);
      for (size_t i = 0; i < bands; ++i) {
        if (need[c][i].empty()) continue;
        const Window w = input_window(op, need[c][i]);
        if (w.begin < bounds.begin || w.end > bounds.end) free[i] = 0;
        need[v][i] = hull(need[v][i], intersect(w, bounds));
      }
    }
  }
  std::vector<AxisReach> out(bands);
  for (size_t i = 0; i < bands; ++i) out[i] = AxisReach{need[s.input][i], free[i] != 0};
  return out;
}

}  // namespace

CellMask uniform_through(const Graph& graph, const std::vector<Shape>& shapes, const Segment& s,
                         const CellMask& input) {
  if (input.none()) return {};
  const Shape& out = shapes[static_cast<size_t>(s.output)];
  const std::vector<int64_t> ys = output_edges({0, out.height}, out.height);
  const std::vector<int64_t> xs = output_edges({0, out.width}, out.width);
  const std::vector<AxisReach> rows = axis_reaches(graph, shapes, s, ys, 0);
  const std::vector<AxisReach> cols = axis_reaches(graph, shapes, s, xs, 1);
  std::vector<Window> ry, cx;
  for (const AxisReach& r : rows) ry.push_back(r.input);
  for (const AxisReach& c : cols) cx.push_back(c.input);
  std::vector<uint8_t> in = input.contains_each(ry, cx);
  bool any = false;
  for (size_t r = 0; r < rows.size(); ++r) {
    for (size_t k = 0; k < cols.size(); ++k) {
      uint8_t& uniform = in[r * cols.size() + k];
      uniform = uniform != 0 && rows[r].padding_free && cols[k].padding_free ? 1 : 0;
      any = any || uniform != 0;
    }
  }
  return any ? CellMask(ys, xs, std::move(in)) : CellMask();
}

Region first_position(const CellMask& m) {
  for (int64_t r = 0; r < m.rows(); ++r) {
    for (int64_t k = 0; k < m.cols(); ++k) {
      if (!m.cell_in(r, k)) continue;
      const Region c = m.cell(r, k);
      return {{c.y.begin, c.y.begin + 1}, {c.x.begin, c.x.begin + 1}};
    }
  }
  return {};
}

SegmentGlass segment_glass(const Graph& graph, const std::vector<Shape>& shapes, const Segment& s,
                           const CellMask& input, bool training, bool image_gradient) {
  std::string obstacle = input.none() ? "" : glass_obstacle(graph, s, training);
  const bool skip_backward = s.input != 0 || !image_gradient;
  std::string dense = input.none() || !obstacle.empty() ? "" : glass_dense(graph, s, training);
  if (!dense.empty()) {
    // Computed as tissue, its glass handed on: every position of the output whose window sees
    // only the input's uniform positions holds one value (its gradient is taken as a sum by
    // the next segment, which hands it back: core/exec/glass.h).
    SegmentGlass g = glass_tiles(graph, shapes, s, CellMask(), training, skip_backward);
    if (!training || skip_backward) g.output = uniform_through(graph, shapes, s, input);
    g.dense = std::move(dense);
    return g;
  }
  SegmentGlass g =
      glass_tiles(graph, shapes, s, obstacle.empty() ? input : CellMask(), training, skip_backward);
  if (s.is<SubSegments>() && obstacle.empty() && (!training || skip_backward)) {
    // Its tiles fill from their leaves' uniform positions, so they compute somewhat more than
    // the segment's own boxes say; every position whose window sees only uniform input holds
    // the uniform value all the same, and is handed on (only the gradient's sum there matters).
    g.output = uniform_through(graph, shapes, s, input);
  }
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
  double flops = 0, skipped = 0, filled = 0;
  for (size_t i = 0; i < glass.size() && i < plan.segments.size(); ++i) {
    const Segment& s = plan.segments[i];
    const SegmentGlass& sg = glass[i];
    g.forward_tiles += s.forward.tiles();
    g.backward_tiles += s.backward.tiles();
    g.glass_forward_tiles += sg.forward_count();
    g.glass_backward_tiles += sg.backward_count();
    const auto dense =
        static_cast<double>(sg.forward_dense_flops > 0 ? sg.forward_dense_flops : s.halo_flops);
    const double in_glass_tiles = dense * sg.forward_fraction(s.forward);
    const double in_fills =
        std::max(0.0, static_cast<double>(sg.forward_saved_flops()) - in_glass_tiles);
    g.segments.push_back({dense, in_glass_tiles, in_fills});
    if (g.stopped_at < 0 && !sg.dense.empty()) g.dense.emplace_back(i, sg.dense);
    if (g.stopped_at < 0 && !sg.obstacle.empty()) {
      g.stopped_at = static_cast<int64_t>(i);
      g.stopped_why = sg.obstacle;
    }
    flops += dense;
    skipped += in_glass_tiles;
    filled += in_fills;
  }
  g.filled_fraction = flops > 0 ? filled / flops : 0.0;
  g.flops_fraction = flops > 0 ? skipped / flops : 0.0;
  return g;
}

}  // namespace tessel::core
