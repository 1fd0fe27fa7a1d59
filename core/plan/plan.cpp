#include "core/plan/plan.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <functional>
#include <sstream>

#include "core/error.h"
#include "core/plan/geometry.h"

namespace tessel::core {

std::string to_string(Strategy s) {
  switch (s) {
    case Strategy::kNone:
      return "none";
    case Strategy::kGrid:
      return "grid";
    case Strategy::kRows:
      return "rows";
    case Strategy::kRowsShared:
      return "rows-shared";
    case Strategy::kAuto:
      return "auto";
  }
  return "?";
}

std::string to_string(Tier t) {
  switch (t) {
    case Tier::kResident:
      return "resident";
    case Tier::kHost:
      return "host";
    case Tier::kDisk:
      return "disk";
  }
  return "?";
}

std::vector<int64_t> Partition::meeting(const Region& r) const {
  std::vector<int64_t> out;
  if (r.empty()) return out;
  auto span = [](const std::vector<int64_t>& edges, const Window& w) {
    const auto lo = std::upper_bound(edges.begin(), edges.end(), w.begin) - edges.begin() - 1;
    const auto hi = std::lower_bound(edges.begin(), edges.end(), w.end) - edges.begin();
    return std::pair<int64_t, int64_t>{std::max<int64_t>(lo, 0), hi};
  };
  const auto [y0, y1] = span(y_edges, r.y);
  const auto [x0, x1] = span(x_edges, r.x);
  for (int64_t y = y0; y < y1; ++y) {
    for (int64_t x = x0; x < x1; ++x) out.push_back(y * cols() + x);
  }
  return out;
}

std::string to_string(const Scheme& scheme) {
  struct Name {
    const char* operator()(const PlainTiles&) const { return "plain tiles"; }
    const char* operator()(const KeptGraph&) const { return "kept graph"; }
    const char* operator()(const SharedRows&) const { return "shared rows"; }
    const char* operator()(const WholeBarriers&) const { return "whole barriers"; }
    const char* operator()(const SubSegments&) const { return "sub-segments"; }
    const char* operator()(const RecomputeRounds&) const { return "recompute rounds"; }
  };
  return std::visit(Name{}, scheme);
}

bool Segment::keeps_graph() const {
  if (const auto* rows = as<SharedRows>()) return rows->keep_graph;
  if (const auto* whole = as<WholeBarriers>()) return whole->keep_graph;
  return is<KeptGraph>();
}

bool Segment::keeps_inner() const {
  const auto* sub = as<SubSegments>();
  return sub != nullptr && sub->keep_inner;
}

Tier Segment::inner_tier() const {
  const auto* sub = as<SubSegments>();
  return sub != nullptr ? sub->tier : Tier::kResident;
}

const std::vector<NodeId>& Segment::dropped_inner() const {
  static const std::vector<NodeId> kNone;
  const auto* sub = as<SubSegments>();
  return sub != nullptr ? sub->dropped : kNone;
}

Tier Segment::shared_tier() const {
  const auto* rows = as<SharedRows>();
  return rows != nullptr ? rows->kept_tier : Tier::kResident;
}

int64_t Segment::shared_bytes() const {
  const auto* rows = as<SharedRows>();
  return rows != nullptr ? rows->kept_bytes : 0;
}

void check_scheme(const Graph& graph, const Segment& s) {
  const auto fail = [&](const std::string& why) {
    throw Error("internal: segment " + graph.node(s.input + 1).name + " … " +
                graph.node(s.output).name + " (" + to_string(s.scheme) + "): " + why);
  };
  const bool same_tiles =
      s.forward.y_edges == s.backward.y_edges && s.forward.x_edges == s.backward.x_edges;
  const bool barriers = !barrier_rounds(graph, s.input, s.output).empty();
  if (s.is<WholeBarriers>() && (s.forward.tiles() != 1 || s.backward.tiles() != 1)) {
    fail("whole barriers run as one tile");
  }
  if (s.keeps_graph() && !same_tiles) fail("a kept graph runs the same tiles both ways");
  if (s.is<KeptGraph>() && barriers) fail("tiles with barriers run in several passes");
  if (s.is<PlainTiles>() && barriers) fail("barriers need a scheme that takes their statistics");
  if (s.is<SharedRows>() && (!same_tiles || barriers)) {
    fail("shared rows run the same rows both ways, without barriers");
  }
  if (s.is<SharedRows>() && s.keeps_graph() && s.shared_tier() != Tier::kResident) {
    fail("shared rows that keep their graphs keep their rows in them");
  }
  if (const auto* sub = s.as<SubSegments>(); sub != nullptr) {
    if (!barriers) fail("sub-segments without a barrier");
    const size_t kept = kept_inner(graph, s).size();
    if (sub->tier != Tier::kResident &&
        (sub->blocks.size() != kept || sub->grad_blocks.size() != kept)) {
      fail("offloaded inner checkpoints without their blocks");
    }
  }
  if (s.is<RecomputeRounds>() && !barriers) fail("recompute rounds without a barrier");
}

int64_t Plan::moved_bytes() const {
  int64_t n = 0;
  for (const Segment& s : segments) n += s.moved_bytes + s.inner_moved_bytes;
  return n;
}

bool Plan::offloads() const {
  for (const Segment& s : segments) {
    if (s.tier != Tier::kResident || s.inner_tier() != Tier::kResident) return true;
    if (s.is<SharedRows>() && s.shared_tier() != Tier::kResident && s.shared_bytes() > 0)
      return true;
  }
  return false;
}

Strategy parse_strategy(const std::string& s) {
  for (Strategy v : {Strategy::kNone, Strategy::kGrid, Strategy::kRows, Strategy::kRowsShared,
                     Strategy::kAuto}) {
    if (s == to_string(v)) return v;
  }
  if (s == "rows2ps" || s == "2ps") return Strategy::kRowsShared;  // the paper's name
  throw Error("unknown strategy '" + s + "': use none, grid, rows, rows-shared or auto");
}

Region Partition::tile(int64_t index) const {
  const int64_t r = index / cols(), c = index % cols();
  return {{y_edges[static_cast<size_t>(r)], y_edges[static_cast<size_t>(r) + 1]},
          {x_edges[static_cast<size_t>(c)], x_edges[static_cast<size_t>(c) + 1]}};
}

Partition Partition::whole(int64_t height, int64_t width) { return even(height, width, 1, 1); }

namespace {
std::vector<int64_t> even_edges(int64_t size, int64_t parts) {
  parts = std::clamp<int64_t>(parts, 1, std::max<int64_t>(1, size));
  std::vector<int64_t> edges;
  for (int64_t i = 0; i <= parts; ++i) edges.push_back(size * i / parts);
  return edges;
}
}  // namespace

Partition Partition::even(int64_t height, int64_t width, int64_t rows, int64_t cols) {
  Partition p;
  p.y_edges = even_edges(height, rows);
  p.x_edges = even_edges(width, cols);
  return p;
}

Window receptive_field(const Graph& graph, NodeId node, int axis, Window out) {
  std::vector<Window> need(static_cast<size_t>(node) + 1, Window{0, 0});
  need[static_cast<size_t>(node)] = out;
  for (NodeId v = node; v > graph.input(); --v) {
    const Window w = need[static_cast<size_t>(v)];
    if (w.empty()) continue;
    const Node& n = graph.node(v);
    if (!n.spatial()) {
      throw Error("receptive_field: " + n.name + " is not a spatial op (past the global pool)");
    }
    const Window in = input_window(n.axis_op(axis), w);
    for (NodeId i : n.inputs) need[static_cast<size_t>(i)] = hull(need[static_cast<size_t>(i)], in);
  }
  return need[static_cast<size_t>(graph.input())];
}

std::string format_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (std::abs(v) >= 1024.0 && u < 5) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

int64_t parse_bytes(const std::string& text) {
  size_t pos = 0;
  double value = 0;
  try {
    value = std::stod(text, &pos);
  } catch (const std::exception&) {
    throw Error("'" + text + "' is not a size: write e.g. 2GiB, 512MiB or 3000000");
  }
  std::string unit = text.substr(pos);
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double scale = 0;
  if (unit.empty() || unit == "b")
    scale = 1;
  else if (unit == "k" || unit == "kib" || unit == "kb")
    scale = 1024.0;
  else if (unit == "m" || unit == "mib" || unit == "mb")
    scale = 1024.0 * 1024;
  else if (unit == "g" || unit == "gib" || unit == "gb")
    scale = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tib" || unit == "tb")
    scale = 1024.0 * 1024 * 1024 * 1024;
  if (scale == 0 || !(value >= 0)) {
    throw Error("'" + text + "' is not a size: write e.g. 2GiB, 512MiB or 3000000");
  }
  // 2^62 bytes (4 EiB) is more than any machine has; beyond it the cast to int64 would be
  // undefined (99999999TiB once read as a negative budget).
  if (!(value * scale < 0x1p62)) {
    throw Error("'" + text + "' is too large a size (more than 4 EiB)");
  }
  return static_cast<int64_t>(value * scale);
}

namespace {
// "37%", or "<1%" for a share that rounds to nothing.
std::string percent(int64_t part, int64_t whole) {
  const int64_t p = (part * 100 + whole / 2) / std::max<int64_t>(1, whole);
  return p == 0 && part > 0 ? "<1%" : std::to_string(p) + "%";
}
}  // namespace

// How a segment's barriers run (core/exec/barrier.h): as plain LibTorch runs them in a one-tile
// segment ("whole"), as sub-segments ("inner", "inner kept" when
// the inner checkpoints stay to the backward) or recomputed in rounds ("2 rounds").
std::string barrier_mode(const Graph& graph, const Segment& s) {
  const size_t rounds = barrier_rounds(graph, s.input, s.output).size();
  if (rounds == 0) return "";
  if (s.is<WholeBarriers>()) return "whole";
  if (s.is<SubSegments>()) {
    const size_t n = s.dropped_inner().size();
    const std::string recomputed = n == 0 ? "" : ", " + std::to_string(n) + " recomputed";
    if (s.inner_tier() != Tier::kResident) return "inner " + to_string(s.inner_tier()) + recomputed;
    return (s.keeps_inner() ? "inner kept" : "inner") + recomputed;
  }
  return std::to_string(rounds) + (rounds == 1 ? " round" : " rounds");
}

namespace {
std::string barrier_note(const Graph& graph, const Segment& s) {
  const std::string mode = barrier_mode(graph, s);
  return mode.empty() ? "" : ", " + mode;
}
}  // namespace

namespace {

// The leaves (the segment's input and inner checkpoints, `is_leaf`) that the sub-segment
// computing `target` reads: its inputs, followed back until they reach one.
std::vector<NodeId> leaves_read(const Graph& graph, NodeId target, const std::vector<char>& is_leaf,
                                NodeId input) {
  std::vector<NodeId> found, stack(graph.node(target).inputs);
  std::vector<char> seen(static_cast<size_t>(target) + 1, 0);
  while (!stack.empty()) {
    const NodeId v = stack.back();
    stack.pop_back();
    if (v < input || seen[static_cast<size_t>(v)]) continue;
    seen[static_cast<size_t>(v)] = 1;
    if (is_leaf[static_cast<size_t>(v)]) {
      found.push_back(v);
      continue;
    }
    for (NodeId p : graph.node(v).inputs) stack.push_back(p);
  }
  return found;
}

}  // namespace

int64_t stored_bytes(const Graph& graph, const Plan& plan, Tier tier) {
  auto bytes = [&](NodeId v) {
    const Shape& s = plan.shapes[static_cast<size_t>(v)];
    return s.channels * s.height * s.width * plan.element_bytes;
  };
  auto stored_inner = [&](const Segment& s) {
    return s.is<SubSegments>() && s.inner_tier() == tier ? kept_inner(graph, s)
                                                         : std::vector<NodeId>{};
  };
  // Held at the end of the forward: the offloaded checkpoints and inner checkpoints.
  int64_t held = 0;
  for (size_t i = 0; i + 1 < plan.segments.size(); ++i) {
    const Segment& s = plan.segments[i];
    if (s.tier == tier) held += bytes(s.output) - s.resident_bytes;
  }
  for (const Segment& s : plan.segments) {
    for (NodeId v : stored_inner(s)) held += bytes(v);
    if (s.is<SharedRows>() && s.shared_tier() == tier) held += s.shared_bytes();
  }
  // Each segment's backward: its sub-segments run latest first; while the one computing `v`
  // runs, the inner checkpoints up to `v` still hold their values, and those that `v` or a
  // later sub-segment reads hold gradients (each goes when its own sub-segment has run); the
  // input's and output's gradients are held throughout.
  int64_t most = held;
  for (size_t i = 0; i < plan.segments.size(); ++i) {
    const Segment& s = plan.segments[i];
    const bool out_stored = s.tier == tier && s.reduction < 0 && i + 1 < plan.segments.size();
    const bool in_stored = i > 0 && plan.segments[i - 1].tier == tier;
    const int64_t io = (out_stored ? bytes(s.output) : 0) + (in_stored ? bytes(s.input) : 0);
    const std::vector<NodeId> inner = stored_inner(s);
    int64_t values = 0;
    for (NodeId v : inner) values += bytes(v);
    std::vector<char> is_leaf(static_cast<size_t>(s.output) + 1, 0), has_grad(is_leaf);
    is_leaf[static_cast<size_t>(s.input)] = 1;
    for (NodeId v : inner) is_leaf[static_cast<size_t>(v)] = 1;
    int64_t left = values, grads = 0;  // values still held, gradients held
    auto run = [&](NodeId target) {
      for (NodeId u : leaves_read(graph, target, is_leaf, s.input)) {
        if (u == s.input || has_grad[static_cast<size_t>(u)]) continue;
        has_grad[static_cast<size_t>(u)] = 1;
        grads += bytes(u);
      }
      most = std::max(most, held - values + left + grads + io);
    };
    run(s.output);
    for (auto it = inner.rbegin(); it != inner.rend(); ++it) {
      run(*it);
      left -= bytes(*it);
      if (has_grad[static_cast<size_t>(*it)]) grads -= bytes(*it);
    }
  }
  return most;
}

namespace {

// Segment i's row of to_string's table.
std::vector<std::string> segment_row(const Plan& plan, const Graph& graph, size_t i) {
  const Segment& s = plan.segments[i];
  const Shape& out = plan.shapes[static_cast<size_t>(s.output)];
  const int64_t out_bytes = out.channels * out.height * out.width * plan.element_bytes;
  return {
      std::to_string(i),
      graph.node(s.input + 1).name + " … " + graph.node(s.output).name,
      std::to_string(s.output - s.input),
      to_string(out),
      std::to_string(s.forward.rows()) + "×" + std::to_string(s.forward.cols()) +
          (!s.is<SharedRows>() ? ""
           : s.shared_tier() == Tier::kResident
               ? " shared (" + format_bytes(s.shared_bytes()) + " kept)"
               : " shared (" + format_bytes(s.shared_bytes()) + " kept, " +
                     to_string(s.shared_tier()) + ")"),
      (s.keeps_graph()
           ? "graph kept"
           : std::to_string(s.backward.rows()) + "×" + std::to_string(s.backward.cols())) +
          barrier_note(graph, s),
      s.reduction >= 0 ? "none (" + describe(graph.node(s.reduction)) + " streamed)"
                       : format_bytes(out_bytes),
      s.reduction >= 0 ? "-"
      : s.resident_bytes > 0
          ? to_string(s.tier) + " (" + percent(s.resident_bytes, out_bytes) + " resident)"
          : to_string(s.tier),
      s.tier == Tier::kResident && s.inner_tier() == Tier::kResident &&
              (!s.is<SharedRows>() || s.shared_tier() == Tier::kResident)
          ? "-"
          : format_bytes(s.moved_bytes + s.inner_moved_bytes),
  };
}

// `rows` as a table with columns as wide as their widest cell (widths in characters, not
// bytes: the cells hold "×" and "…").
void write_table(std::ostream& os, const std::vector<std::vector<std::string>>& rows) {
  auto width = [](const std::string& text) {
    int64_t n = 0;
    for (unsigned char c : text) n += (c & 0xC0) != 0x80;  // UTF-8 code points
    return n;
  };
  std::vector<int64_t> widths(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], width(row[c]));
  }
  for (const auto& row : rows) {
    os << " ";
    for (size_t c = 0; c < row.size(); ++c) {
      os << "  " << row[c];
      if (c + 1 < row.size())
        os << std::string(static_cast<size_t>(widths[c] - width(row[c])), ' ');
    }
    os << "\n";
  }
}

// The store's window, write-behind and bytes moved, where the plan offloads.
void write_offload(std::ostream& os, const Plan& plan, const Graph& graph) {
  os << "offload: checkpoints beyond the budget move out and back, "
     << format_bytes(plan.window_bytes) << " window ahead of use, ";
  int64_t least = plan.write_behind_bytes, most = plan.write_behind_bytes;
  for (const Segment& s : plan.segments) {
    for (const int64_t b : {s.forward_write_behind, s.backward_write_behind}) {
      if (b <= 0) continue;
      least = std::min(least, b);
      most = std::max(most, b);
    }
  }
  os << format_bytes(least);
  if (most > least) os << "–" << format_bytes(most);
  os << " written behind, " << format_bytes(plan.moved_bytes()) << " moved per step";
  const int64_t on_disk = stored_bytes(graph, plan, Tier::kDisk);
  if (on_disk > 0) os << ", at most " << format_bytes(on_disk) << " on disk";
  os << "\n";
}

// DELTA's offload-or-recompute decisions, at the prices the planner used.
void write_decisions(std::ostream& os, const Plan& plan, const Graph& graph) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "offload or recompute (DELTA), %s prices: %.3g ns per byte moved, %.3g GFLOP/s "
                "recompute\n",
                plan.prices.given      ? "given"
                : plan.prices.measured ? "measured"
                                       : "guessed",
                plan.prices.seconds_per_byte_moved * 1e9,
                plan.prices.seconds_per_flop > 0 ? 1e-9 / plan.prices.seconds_per_flop : 0.0);
  os << buf;
  for (const OffloadDecision& d : plan.decisions) {
    std::string recompute = "no plan without it fits";
    if (d.recompute_flops >= 0) {
      std::snprintf(buf, sizeof buf, "recompute %.3g FLOPs: %.3g s",
                    static_cast<double>(d.recompute_flops), d.recompute_s);
      recompute = buf;
    }
    std::snprintf(buf, sizeof buf, "move %s: %.3g s", format_bytes(d.moved_bytes).c_str(),
                  d.offload_s);
    os << "  " << graph.node(d.checkpoint).name << ": "
       << (d.offload ? "offloaded (" + std::string(buf) + "; " + recompute + ")"
                     : "dropped, recomputed (" + recompute + "; " + std::string(buf) + ")")
       << "\n";
  }
}

}  // namespace

namespace {

// The background's share, the glass tiles and the FLOPs they hold, and the margin at the edges.
void write_glass(std::ostream& os, const GlassSummary& g) {
  char buf[400];
  std::snprintf(buf, sizeof buf,
                "background %.1f%% of the image: glass tiles (computed once, not run) %lld of %lld "
                "forward and %lld of %lld backward, %.1f%% of the forward's FLOPs; glass filled "
                "in tiles that also see tissue %.1f%%; glass still computed (the margin at the "
                "tissue's edges): %.1f%% of the image\n",
                100.0 * g.image_fraction, static_cast<long long>(g.glass_forward_tiles),
                static_cast<long long>(g.forward_tiles),
                static_cast<long long>(g.glass_backward_tiles),
                static_cast<long long>(g.backward_tiles), 100.0 * g.flops_fraction,
                100.0 * g.filled_fraction, 100.0 * g.margin());
  os << buf;
  if (!g.dense.empty()) {
    // One line however many: resnet50 with train-mode batch norm has 15 such segments.
    os << "glass computed as tissue, and handed on to the segments after, in segment"
       << (g.dense.size() > 1 ? "s " : " ");
    for (size_t i = 0; i < g.dense.size(); ++i) os << (i > 0 ? ", " : "") << g.dense[i].first;
    os << " (segment " << g.dense.front().first << ": " << g.dense.front().second
       << (g.dense.size() > 1 ? "; --json lists each" : "") << ")\n";
  }
  if (g.stopped_at >= 0) {
    os << "glass stops at segment " << g.stopped_at << ": " << g.stopped_why
       << "; it computes its glass as tissue and hands no glass to the segments after it\n";
  }
  if (g.uniform_checkpoint_bytes > 0) {
    os << "glass in checkpoints (one vector a block: not held, stored or moved): "
       << format_bytes(g.uniform_checkpoint_bytes) << " of " << format_bytes(g.checkpoint_bytes)
       << "\n";
  }
}

}  // namespace

std::string to_string(const Plan& plan, const Graph& graph) {
  std::ostringstream os;
  os << "plan: strategy " << to_string(plan.strategy) << ", input " << to_string(plan.input);
  if (plan.budget_bytes > 0) os << ", budget " << format_bytes(plan.budget_bytes);
  os << "\n";
  if (plan.segments.empty()) {
    os << "  one plain pass over the whole image (no tiling)\n";
  } else {
    std::vector<std::vector<std::string>> rows = {{"seg", "layers", "ops", "output", "fwd tiles",
                                                   "bwd tiles", "checkpoint", "tier",
                                                   "moved/step"}};
    for (size_t i = 0; i < plan.segments.size(); ++i) rows.push_back(segment_row(plan, graph, i));
    write_table(os, rows);
  }
  const MemoryBreakdown& m = plan.predicted;
  os << "predicted peak " << format_bytes(m.total()) << ": parameters "
     << format_bytes(m.parameters) << ", gradients " << format_bytes(m.gradients) << ", optimizer "
     << format_bytes(m.optimizer) << ", checkpoints " << format_bytes(m.checkpoints)
     << ", tile working set " << format_bytes(m.working_set) << ", head " << format_bytes(m.tail)
     << "\n";
  if (plan.offloads()) write_offload(os, plan, graph);
  if (!plan.decisions.empty()) write_decisions(os, plan, graph);
  if (plan.plain_flops > 0 && plan.tiled_flops > 0) {
    char buf[128];
    std::snprintf(buf, sizeof buf, "forward FLOPs %.3g (halo recompute ×%.2f)\n",
                  static_cast<double>(plan.tiled_flops),
                  static_cast<double>(plan.tiled_flops) / static_cast<double>(plan.plain_flops));
    os << buf;
  }
  if (plan.glass.any_background()) write_glass(os, plan.glass);
  if (plan.cost.total() > 0) {
    // The search's price of the step, what auto compared, and what it is made of.
    const PlanCost& c = plan.cost;
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "priced %.3g FLOPs a step (%.3g s at the prices): compute %.3g, tiles %.3g, "
                  "copies %.3g, moved bytes %.3g\n",
                  c.total(), c.total() * plan.prices.seconds_per_flop, c.compute, c.tiles, c.copies,
                  c.moved);
    os << buf;
  }
  return os.str();
}

std::vector<std::string> schemes_of(const Graph& graph, const Plan& plan) {
  std::vector<std::string> out;
  const auto add = [&out](const std::string& name) {
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  };
  const auto where = [](Tier t) { return t == Tier::kHost ? "in host memory" : "on disk"; };
  for (const Segment& s : plan.segments) {
    const bool barriers = !barrier_rounds(graph, s.input, s.output).empty();
    if (s.is<SharedRows>()) {
      add(s.shared_tier() == Tier::kResident
              ? "shared rows (2PS)"
              : std::string("shared rows (2PS), kept rows ") + where(s.shared_tier()));
    } else if (s.is<WholeBarriers>()) {
      add("whole barriers");
    } else if (barriers && s.is<SubSegments>()) {
      add("sub-segments over inner checkpoints (" + to_string(s.inner_tier()) +
          (s.keeps_inner() || s.inner_tier() != Tier::kResident ? ", kept" : ", rebuilt") + ")");
      if (!s.dropped_inner().empty()) add("inner checkpoints recomputed");
    } else if (barriers) {
      add("recompute rounds");
    } else if (!s.keeps_graph()) {
      add("plain tiles");
    }
    if (s.keeps_graph()) add("kept graph");
    if (s.reduction >= 0) add("streaming reduction");
    if (s.tier != Tier::kResident) add(std::string("checkpoints ") + where(s.tier));
    if (s.resident_blocks > 0) add("partly resident checkpoints");
  }
  return out;
}

}  // namespace tessel::core
