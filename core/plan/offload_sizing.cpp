#include "core/plan/offload_sizing.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>

#include "core/plan/cost_model.h"
#include "core/plan/geometry.h"
#include "core/plan/glass.h"

namespace tessel::core::planning {

int64_t default_block_bytes(int64_t window) {
  constexpr int64_t kFloor = int64_t{1} << 20;
  return std::max<int64_t>(1, std::min(window / 4, std::max(window / 16, kFloor)));
}

Partition Offloading::blocks(const Analysis& a, NodeId v, const Partition& forward) const {
  const int64_t per_pixel = std::max<int64_t>(1, a.graph.node(v).channels * a.eb);
  int64_t widest = 1;
  for (int64_t c = 0; c < forward.cols(); ++c) {
    widest = std::max(widest, forward.x_edges[static_cast<size_t>(c) + 1] -
                                  forward.x_edges[static_cast<size_t>(c)]);
  }
  const int64_t width = std::clamp<int64_t>(block_bytes / per_pixel, 1, widest);
  const int64_t height = std::max<int64_t>(1, block_bytes / (per_pixel * width));
  Partition p;
  p.y_edges = subdivide(forward.y_edges, height);
  p.x_edges = subdivide(forward.x_edges, width);
  return p;
}

int64_t Offloading::open_bytes(const Analysis& a, const Segment& s, const Partition& part,
                               bool every) {
  const auto v = static_cast<size_t>(s.input);
  const Shape& in = a.shapes[static_cast<size_t>(s.input)];
  const int64_t rows = part.rows(), cols = part.cols();
  std::vector<int64_t> rs, cs;
  if (every) {
    for (int64_t r = 0; r < rows; ++r) rs.push_back(r);
    for (int64_t c = 0; c < cols; ++c) cs.push_back(c);
  } else {
    for (int64_t d = -1; d <= 1; ++d) {
      if (rows / 2 + d >= 0 && rows / 2 + d < rows) rs.push_back(rows / 2 + d);
      if (cols / 2 + d >= 0 && cols / 2 + d < cols) cs.push_back(cols / 2 + d);
    }
  }
  std::vector<Window> ny, nx;
  for (int64_t r : rs) {
    ny.push_back(segment_needs(a.graph, a.shapes, s.input, s.output, part.tile(r * cols))[v].y);
  }
  for (int64_t c : cs) {
    nx.push_back(segment_needs(a.graph, a.shapes, s.input, s.output, part.tile(c))[v].x);
  }
  return strip_bytes(ny, nx, in.width) * in.channels * a.eb;
}

int64_t Offloading::strip_bytes(const std::vector<Window>& ny, const std::vector<Window>& nx,
                                int64_t width) {
  int64_t overlap_x = 0;  // the widest strip two neighbouring columns share
  for (size_t j = 0; j + 1 < nx.size(); ++j) {
    overlap_x = std::max(overlap_x, intersect(nx[j], nx[j + 1]).size());
  }
  int64_t worst = 0;
  for (size_t i = 0; i < ny.size(); ++i) {
    const Window up = i > 0 ? intersect(ny[i], ny[i - 1]) : Window{};
    const Window down = i + 1 < ny.size() ? intersect(ny[i], ny[i + 1]) : Window{};
    const int64_t shared = up.size() + down.size() - intersect(up, down).size();
    worst = std::max(worst, shared * width + (ny[i].size() - shared) * overlap_x);
  }
  return worst;
}

int64_t Offloading::grad_strip_bytes(const Analysis& a, const Segment& s, const Partition& part,
                                     bool input, bool inner) {
  const std::vector<NodeId> inner_nodes = kept_inner(a.graph, s);
  std::vector<NodeId> leaves{s.input};
  leaves.insert(leaves.end(), inner_nodes.begin(), inner_nodes.end());
  std::vector<NodeId> counted;
  if (input) counted.push_back(s.input);
  if (inner) counted.insert(counted.end(), inner_nodes.begin(), inner_nodes.end());
  const Shape& out = a.shapes[static_cast<size_t>(s.output)];
  std::vector<NodeId> readers{s.output};
  readers.insert(readers.end(), inner_nodes.begin(), inner_nodes.end());
  const int64_t rows = part.rows(), cols = part.cols();
  int64_t worst = 0;
  for (NodeId reader : readers) {
    auto needs = [&](const Region& tile) {
      const Region r = reader == s.output
                           ? tile
                           : barrier_share(tile, out, a.shapes[static_cast<size_t>(reader)]);
      if (r.empty()) return std::vector<Region>{};
      return sub_segment_needs(a.graph, a.shapes, {s.input, leaves, reader}, r,
                               {s.dropped_inner(), tile, out});
    };
    std::vector<std::vector<Region>> by_row, by_col;
    for (int64_t d = -1; d <= 1; ++d) {
      if (rows / 2 + d >= 0 && rows / 2 + d < rows) {
        by_row.push_back(needs(part.tile((rows / 2 + d) * cols)));
      }
      if (cols / 2 + d >= 0 && cols / 2 + d < cols)
        by_col.push_back(needs(part.tile(cols / 2 + d)));
    }
    int64_t sum = 0;
    for (NodeId v : counted) {
      if (v >= reader) break;
      const auto at = [v](const std::vector<Region>& n) {
        return n.empty() ? Region{} : n[static_cast<size_t>(v)];
      };
      std::vector<Window> ny, nx;
      for (const auto& n : by_row) ny.push_back(at(n).y);
      for (const auto& n : by_col) nx.push_back(at(n).x);
      const Shape& vs = a.shapes[static_cast<size_t>(v)];
      sum += strip_bytes(ny, nx, vs.width) * vs.channels * a.eb;
    }
    worst = std::max(worst, sum);
  }
  return worst;
}

Partition Offloading::grad_blocks(const Analysis& a, const Segment& s, const Partition& part,
                                  const Partition& reader) const {
  const auto v = static_cast<size_t>(s.input);
  const Shape& in = a.shapes[v];
  std::vector<int64_t> ey = reader.y_edges, ex = reader.x_edges;
  for (int64_t r = 0; r < part.rows(); ++r) {
    const Window w =
        segment_needs(a.graph, a.shapes, s.input, s.output, part.tile(r * part.cols()))[v].y;
    ey.insert(ey.end(), {std::clamp<int64_t>(w.begin, 0, in.height),
                         std::clamp<int64_t>(w.end, 0, in.height)});
  }
  for (int64_t c = 0; c < part.cols(); ++c) {
    const Window w = segment_needs(a.graph, a.shapes, s.input, s.output, part.tile(c))[v].x;
    ex.insert(ex.end(),
              {std::clamp<int64_t>(w.begin, 0, in.width), std::clamp<int64_t>(w.end, 0, in.width)});
  }
  return cells(a, s.input, std::move(ey), std::move(ex));
}

Partition Offloading::inner_blocks(const Analysis& a, const Segment& s, NodeId v) const {
  const Partition shares = share_partition(s.forward, a.shapes[static_cast<size_t>(s.output)],
                                           a.shapes[static_cast<size_t>(v)]);
  std::vector<int64_t> ey = shares.y_edges, ex = shares.x_edges;
  for (const auto& adds : a.additions(s, v)) {
    for (const Region& r : adds) {
      ey.insert(ey.end(), {r.y.begin, r.y.end});
      ex.insert(ex.end(), {r.x.begin, r.x.end});
    }
  }
  return cells(a, v, std::move(ey), std::move(ex));
}

Partition Offloading::inner_grad_blocks(const Analysis& a, const Segment& s, NodeId v,
                                        const std::vector<std::vector<Region>>& passes,
                                        const Partition* reader) const {
  const Shape& vs = a.shapes[static_cast<size_t>(v)];
  const Partition shares =
      reader != nullptr ? *reader
                        : share_partition(s.backward, a.shapes[static_cast<size_t>(s.output)], vs);
  std::vector<int64_t> ey = shares.y_edges, ex = shares.x_edges;
  for (const auto& adds : passes) {
    for (const Region& r : adds) {
      ey.insert(ey.end(), {r.y.begin, r.y.end});
      ex.insert(ex.end(), {r.x.begin, r.x.end});
    }
  }
  return cells(a, v, std::move(ey), std::move(ex));
}

std::vector<int64_t> Offloading::open_bytes(const Partition& blocks,
                                            const std::vector<std::vector<Region>>& passes,
                                            int64_t per_pixel) {
  auto each = [&](const Region& r, const auto& f) {
    for (int64_t b : blocks.meeting(r)) f(b);
  };
  std::vector<int64_t> left(static_cast<size_t>(blocks.tiles()), 0);
  std::vector<char> open(left.size(), 0);
  int64_t now = 0;
  std::vector<int64_t> peaks;
  for (const auto& adds : passes) {
    int64_t peak = 0;
    for (const Region& r : adds) each(r, [&](int64_t b) { ++left[static_cast<size_t>(b)]; });
    for (const Region& r : adds) {
      each(r, [&](int64_t b) {
        const auto i = static_cast<size_t>(b);
        if (!open[i]) {
          open[i] = 1;
          now += blocks.tile(b).area() * per_pixel;
        }
        peak = std::max(peak, now);
        if (--left[i] == 0) {
          open[i] = 0;
          now -= blocks.tile(b).area() * per_pixel;
        }
      });
    }
    peaks.push_back(peak);
  }
  return peaks;
}

Partition Offloading::cells(const Analysis& a, NodeId v, std::vector<int64_t> ey,
                            std::vector<int64_t> ex) const {
  const Shape& vs = a.shapes[static_cast<size_t>(v)];
  for (auto [e, end] : {std::pair{&ey, vs.height}, std::pair{&ex, vs.width}}) {
    for (int64_t& x : *e) x = std::clamp<int64_t>(x, 0, end);
    e->insert(e->end(), {0, end});
    std::sort(e->begin(), e->end());
    e->erase(std::unique(e->begin(), e->end()), e->end());
  }
  const int64_t per_pixel = std::max<int64_t>(1, vs.channels * a.eb);
  int64_t widest = 1;
  for (size_t j = 0; j + 1 < ex.size(); ++j) widest = std::max(widest, ex[j + 1] - ex[j]);
  const int64_t width = std::clamp<int64_t>(block_bytes / per_pixel, 1, widest);
  const int64_t height = std::max<int64_t>(1, block_bytes / (per_pixel * width));
  Partition p;
  p.y_edges = subdivide(ey, height);
  p.x_edges = subdivide(ex, width);
  return p;
}

std::vector<int64_t> Offloading::subdivide(const std::vector<int64_t>& edges, int64_t side) {
  std::vector<int64_t> out{edges.front()};
  for (size_t i = 0; i + 1 < edges.size(); ++i) {
    const int64_t len = edges[i + 1] - edges[i];
    const int64_t parts = std::max<int64_t>(1, (len + side - 1) / side);
    for (int64_t k = 1; k <= parts; ++k) out.push_back(edges[i] + len * k / parts);
  }
  return out;
}

int64_t read_bytes(const std::vector<Region>& regions, const Partition& blocks, int64_t per_pixel,
                   int64_t window, int64_t resident, const std::vector<uint8_t>& uniform) {
  std::vector<int64_t> order;  // block indices in read order
  for (const Region& r : regions) {
    const auto meets = blocks.meeting(r);
    order.insert(order.end(), meets.begin(), meets.end());
  }
  auto bytes = [&](int64_t b) {
    const Region r = blocks.tile(b);
    const bool held = !uniform.empty() && uniform[static_cast<size_t>(b)] != 0;
    return b < resident || held ? 0 : r.area() * per_pixel;
  };
  int64_t n = 0;
  // Per block: whether it is in memory, and the last read position that counted it as seen
  // (arrays, not hash sets: resnet50 at 8192² spent 40% of its planning in their allocations
  // and hashing).
  std::vector<char> in_memory(static_cast<size_t>(blocks.tiles()), 0);
  std::vector<size_t> seen(static_cast<size_t>(blocks.tiles()), std::numeric_limits<size_t>::max());
  for (size_t p = 0; p < order.size(); ++p) {
    const int64_t b = order[p];
    if (!in_memory[static_cast<size_t>(b)]) n += bytes(b);
    // Kept when it is read again before the distinct blocks in between fill the window.
    bool keep = false;
    int64_t ahead = 0;
    for (size_t q = p + 1; q < order.size() && ahead < window; ++q) {
      if (order[q] == b) {
        keep = true;
        break;
      }
      size_t& mark = seen[static_cast<size_t>(order[q])];
      if (mark != p) {
        mark = p;
        ahead += bytes(order[q]);
      }
    }
    in_memory[static_cast<size_t>(b)] = keep;
  }
  return n;
}

std::vector<Region> tile_reads(const Analysis& a, const Segment& s, const Partition& part, NodeId v,
                               bool reverse, const std::vector<uint8_t>& glass) {
  std::vector<Region> regions;
  for (int64_t k = 0; k < part.tiles(); ++k) {
    const int64_t t = reverse ? part.tiles() - 1 - k : k;
    if (!glass.empty() && glass[static_cast<size_t>(t)] != 0) continue;
    regions.push_back(
        segment_needs(a.graph, a.shapes, s.input, s.output, part.tile(t))[static_cast<size_t>(v)]);
  }
  return regions;
}

void keep_partly_resident(const Analysis& a, Plan& plan, std::vector<MemoryBreakdown>& passes,
                          std::vector<StoreShare>& shares, int64_t budget) {
  const size_t n = plan.segments.size();
  for (size_t i = n; i-- > 0;) {
    Segment& s = plan.segments[i];
    if (s.tier == Tier::kResident || s.reduction >= 0 || i + 1 >= n) continue;
    std::vector<size_t> lifetime;
    for (size_t j = i; j < n; ++j) lifetime.push_back(2 * j);
    for (size_t j = i + 1; j < n; ++j) lifetime.push_back(2 * j + 1);
    // What `kept` resident bytes add to pass `p`.
    auto added = [&](size_t p, int64_t kept) {
      const StoreShare& share = shares[p];
      if (std::find(share.around.begin(), share.around.end(), i) == share.around.end()) return kept;
      return kept - (share.held() - share.held(kept));
    };
    auto fits = [&](int64_t kept) {
      for (size_t p : lifetime) {
        if (passes[p].total() + added(p, kept) > budget) return false;
      }
      return true;
    };
    const int64_t per_pixel = a.graph.node(s.output).channels * a.eb;
    int64_t kept = 0, blocks = 0;
    for (; blocks < s.blocks.tiles(); ++blocks) {
      const int64_t b = s.blocks.tile(blocks).area() * per_pixel;
      if (!fits(kept + b)) break;
      kept += b;
    }
    if (blocks == 0) continue;
    s.resident_blocks = blocks;
    s.resident_bytes = kept;
    for (size_t p : lifetime) {
      passes[p].checkpoints += added(p, kept);
      auto& around = shares[p].around;
      if (std::find(around.begin(), around.end(), i) != around.end()) shares[p].resident += kept;
    }
  }
}

int64_t reopened_bytes(const Partition& blocks, const std::vector<std::vector<Region>>& passes,
                       int64_t per_pixel) {
  std::vector<char> stored(static_cast<size_t>(blocks.tiles()), 0);
  int64_t n = 0;
  for (const auto& adds : passes) {
    std::set<int64_t> touched;
    for (const Region& r : adds) {
      for (int64_t b : blocks.meeting(r)) touched.insert(b);
    }
    for (int64_t b : touched) {
      if (stored[static_cast<size_t>(b)]) n += 2 * blocks.tile(b).area() * per_pixel;
      stored[static_cast<size_t>(b)] = 1;
    }
  }
  return n;
}

std::vector<Region> forward_reads(const Analysis& a, const Segment& s, NodeId v) {
  const std::vector<NodeId> inner = kept_inner(a.graph, s);
  std::vector<NodeId> leaves{s.input};
  leaves.insert(leaves.end(), inner.begin(), inner.end());
  const Shape& out = a.shapes[static_cast<size_t>(s.output)];
  std::vector<Region> reads;
  bool on_input = false;
  for (NodeId b = s.input + 1; b <= s.output && v == s.input; ++b) {
    on_input = on_input || (a.graph.node(b).is_barrier() && a.graph.node(b).inputs[0] == v);
  }
  for (int64_t t = 0; t < s.forward.tiles() && on_input; ++t) {
    reads.push_back(barrier_share(s.forward.tile(t), out, a.shapes[static_cast<size_t>(v)]));
  }
  // The sub-segments after v: the kept inner checkpoints' and the dropped ones' statistic
  // passes, in order, then the output's.
  std::vector<NodeId> targets;
  for (NodeId u : inner) {
    if (u > v) targets.push_back(u);
  }
  for (NodeId u : s.dropped_inner()) {
    if (u > v && barrier_input(a.graph, s, u)) targets.push_back(u);  // statistic passes
  }
  std::sort(targets.begin(), targets.end());
  targets.push_back(s.output);
  for (NodeId target : targets) {
    for (int64_t t = 0; t < s.forward.tiles(); ++t) {
      const Region tile = s.forward.tile(t);
      const Region r = target == s.output
                           ? tile
                           : barrier_share(tile, out, a.shapes[static_cast<size_t>(target)]);
      if (r.empty()) continue;
      reads.push_back(sub_segment_needs(a.graph, a.shapes, {s.input, leaves, target}, r,
                                        {s.dropped_inner(), tile, out})[static_cast<size_t>(v)]);
    }
  }
  return reads;
}

int64_t inner_moved_bytes(const Analysis& a, const Segment& s, int64_t window) {
  const std::vector<NodeId> inner = kept_inner(a.graph, s);
  const Shape& out = a.shapes[static_cast<size_t>(s.output)];
  // A sub-segment that recomputes dropped inner checkpoints runs a round of sums for each of
  // their barriers first: it reads its leaves and its own gradient once more per round.
  const std::map<NodeId, int> rounds = sums_rounds(a, s);
  auto rounds_of = [&](NodeId target) {
    const auto it = rounds.find(target);
    return it == rounds.end() ? 0 : it->second;
  };
  int64_t n = 0;
  for (size_t k = 0; k < inner.size(); ++k) {
    const NodeId v = inner[k];
    const Shape& vs = a.shapes[static_cast<size_t>(v)];
    const int64_t per_pixel = vs.channels * a.eb;
    std::vector<Region> reads = forward_reads(a, s, v), own;
    const std::vector<Region> later = reads_with_rounds(a.additions_by_pass(s, v), rounds);
    reads.insert(reads.end(), later.begin(), later.end());
    for (int round = 0; round <= rounds_of(v); ++round) {
      for (int64_t t = s.backward.tiles() - 1; t >= 0; --t) {
        const Region r = barrier_share(s.backward.tile(t), out, vs);
        if (!r.empty()) own.push_back(r);
      }
    }
    const SubSegments& sub = *s.as<SubSegments>();
    n += 2 * a.bytes(v) + read_bytes(reads, sub.blocks.at(k), per_pixel, window) +
         read_bytes(own, sub.grad_blocks.at(k), per_pixel, window) +
         reopened_bytes(sub.grad_blocks.at(k), a.additions(s, v), per_pixel);
  }
  return n;
}

int64_t uniform_bytes(const Analysis& a, const Segment& s, const std::vector<uint8_t>& uniform) {
  const int64_t per_pixel = a.graph.node(s.output).channels * a.eb;
  int64_t n = 0;
  for (size_t b = 0; b < uniform.size(); ++b) {
    const auto i = static_cast<int64_t>(b);
    if (uniform[b] != 0 && i >= s.resident_blocks) n += s.blocks.tile(i).area() * per_pixel;
  }
  return n;
}

void count_moved_bytes(const Analysis& a, Plan& plan) {
  // Each segment's glass tiles in a training step over the request's background (none without).
  std::vector<SegmentGlass> glass(plan.segments.size());
  if (a.options.background) {
    plan.shapes = a.shapes;  // as the finished plan's (make_plan)
    glass = plan_glass(a.graph, plan, *a.options.background, /*training=*/true,
                       a.options.input_gradient);
  }
  for (Segment& s : plan.segments) {
    s.inner_moved_bytes =
        s.inner_tier() == Tier::kResident ? 0 : inner_moved_bytes(a, s, plan.window_bytes);
    // Shared rows' kept rows in the store: written once, read back once.
    if (s.is<SharedRows>() && s.shared_tier() != Tier::kResident)
      s.inner_moved_bytes += 2 * s.shared_bytes();
  }
  for (size_t i = 0; i + 1 < plan.segments.size(); ++i) {
    Segment& s = plan.segments[i];
    if (s.tier == Tier::kResident) continue;
    const Segment& next = plan.segments[i + 1];
    const int64_t w = plan.window_bytes;
    const int64_t per_pixel = a.graph.node(s.output).channels * a.eb;
    const SegmentGlass& next_glass = glass[i + 1];
    const std::vector<uint8_t> uniform = glass[i].uniform_blocks(s.forward, s.blocks);
    s.moved_bytes = 2 * a.bytes(s.output) - s.resident_bytes - uniform_bytes(a, s, uniform) +
                    read_bytes(tile_reads(a, s, s.backward, s.output, true), next.input_grad_blocks,
                               per_pixel, w);
    if (next.is<SubSegments>() && !next.is<WholeBarriers>()) {
      // Each sub-segment reading it reads it again (once more in each round of sums it runs);
      // its gradient adds up pass by pass.
      const std::vector<Region> backward_reads =
          reads_with_rounds(a.additions_by_pass(next, next.input), sums_rounds(a, next));
      s.moved_bytes +=
          read_bytes(forward_reads(a, next, next.input), s.blocks, per_pixel, w, s.resident_blocks,
                     uniform) +
          read_bytes(backward_reads, s.blocks, per_pixel, w, s.resident_blocks, uniform);
      s.moved_bytes +=
          reopened_bytes(next.input_grad_blocks, a.additions(next, next.input), per_pixel);
    } else {
      const std::vector<Region> forward =
          tile_reads(a, next, next.forward, s.output, false, next_glass.forward);
      const std::vector<Region> backward =
          tile_reads(a, next, next.backward, s.output, true, next_glass.backward);
      s.moved_bytes += read_bytes(forward, s.blocks, per_pixel, w, s.resident_blocks, uniform) +
                       read_bytes(backward, s.blocks, per_pixel, w, s.resident_blocks, uniform);
    }
  }
}

}  // namespace tessel::core::planning
