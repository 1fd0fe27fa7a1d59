#include "core/plan/box_set.h"

#include <algorithm>
#include <limits>

namespace tessel::core {

Boxes subtract(const Region& a, const Region& b) {
  const Region m = intersect(a, b);
  if (m.empty()) return a.empty() ? Boxes{} : Boxes{a};
  Boxes out = {{{a.y.begin, m.y.begin}, a.x},
               {{m.y.end, a.y.end}, a.x},
               {m.y, {a.x.begin, m.x.begin}},
               {m.y, {m.x.end, a.x.end}}};
  std::erase_if(out, [](const Region& r) { return r.empty(); });
  return out;
}

namespace {

// Whether `a` and `b` (disjoint) together are a rectangle: they share a whole side.
bool joinable(const Region& a, const Region& b) {
  return (a.x == b.x && (a.y.end == b.y.begin || b.y.end == a.y.begin)) ||
         (a.y == b.y && (a.x.end == b.x.begin || b.x.end == a.x.begin));
}

// `boxes` made disjoint: each box less the ones before it (the largest first).
Boxes cut_overlaps(Boxes boxes) {
  std::sort(boxes.begin(), boxes.end(),
            [](const Region& a, const Region& b) { return a.area() > b.area(); });
  Boxes out;
  for (const Region& box : boxes) {
    Boxes pieces = {box};
    for (const Region& kept : out) {
      Boxes next;
      for (const Region& p : pieces) {
        for (const Region& q : subtract(p, kept)) next.push_back(q);
      }
      pieces = std::move(next);
    }
    out.insert(out.end(), pieces.begin(), pieces.end());
  }
  return out;
}

void join_rectangles(Boxes& boxes) {
  for (bool joined = true; joined;) {
    joined = false;
    for (size_t i = 0; i < boxes.size() && !joined; ++i) {
      for (size_t j = i + 1; j < boxes.size() && !joined; ++j) {
        if (!joinable(boxes[i], boxes[j])) continue;
        boxes[i] = core::hull(boxes[i], boxes[j]);
        boxes.erase(boxes.begin() + static_cast<std::ptrdiff_t>(j));
        joined = true;
      }
    }
  }
}

// Boxes i and j replaced by their hull, which absorbs every box it meets (and so on), so the
// boxes stay disjoint.
void merge(Boxes& boxes, size_t i, size_t j) {
  Region h = core::hull(boxes[i], boxes[j]);
  boxes.erase(boxes.begin() + static_cast<std::ptrdiff_t>(std::max(i, j)));
  boxes.erase(boxes.begin() + static_cast<std::ptrdiff_t>(std::min(i, j)));
  for (bool grew = true; grew;) {
    grew = false;
    for (size_t k = 0; k < boxes.size(); ++k) {
      if (intersect(boxes[k], h).empty()) continue;
      h = core::hull(h, boxes[k]);
      boxes.erase(boxes.begin() + static_cast<std::ptrdiff_t>(k));
      grew = true;
      break;
    }
  }
  boxes.push_back(h);
}

// Many boxes (a mask's specks) as the hulls of those whose centres share a block of a 4 × 4
// grid over their hull: the pairwise merging below is cubic in their number.
constexpr size_t kMostPieces = 64;

Boxes by_block(const Boxes& boxes) {
  const Region h = hull(boxes);
  Boxes blocks(16);
  for (const Region& b : boxes) {
    const int64_t cy = (b.y.begin + b.y.end) / 2 - h.y.begin;
    const int64_t cx = (b.x.begin + b.x.end) / 2 - h.x.begin;
    const int64_t i = std::min<int64_t>(3, cy * 4 / std::max<int64_t>(1, h.y.size()));
    const int64_t j = std::min<int64_t>(3, cx * 4 / std::max<int64_t>(1, h.x.size()));
    Region& block = blocks[static_cast<size_t>(i * 4 + j)];
    block = core::hull(block, b);
  }
  std::erase_if(blocks, [](const Region& r) { return r.empty(); });
  return blocks;
}

// The two boxes (of two or more) whose hull adds the fewest positions, and how many it adds.
struct Pair {
  size_t i = 0, j = 1;
  int64_t added = std::numeric_limits<int64_t>::max();
};

Pair cheapest_pair(const Boxes& boxes) {
  Pair best;
  for (size_t i = 0; i < boxes.size(); ++i) {
    for (size_t j = i + 1; j < boxes.size(); ++j) {
      const int64_t added =
          core::hull(boxes[i], boxes[j]).area() - boxes[i].area() - boxes[j].area();
      if (added < best.added) best = {i, j, added};
    }
  }
  return best;
}

// A box is an op call: two boxes whose hull adds at most this many positions are one.
// Measured (bench/NOTES.md, session 48): a 3×3 convolution's forward and backward on this CPU
// costs about 0.2 ms a call besides its positions, 150–400 positions' work at 32–64 channels;
// 1-position strips cost 1.7–3.7× a position of a 64×64 box.
constexpr int64_t kCheapMerge = 256;

}  // namespace

Boxes disjoint_boxes(Boxes boxes, int most) {
  std::erase_if(boxes, [](const Region& r) { return r.empty(); });
  if (boxes.size() <= 1) return boxes;
  if (boxes.size() > kMostPieces) boxes = by_block(boxes);
  boxes = cut_overlaps(std::move(boxes));
  join_rectangles(boxes);
  while (boxes.size() > static_cast<size_t>(std::max(1, most))) {
    const Pair p = cheapest_pair(boxes);
    merge(boxes, p.i, p.j);
  }
  return boxes;
}

Boxes ring(const Region& r, const Boxes& boxes) {
  std::vector<int64_t> ys = {r.y.begin, r.y.end};
  for (const Region& b : boxes) {
    ys.push_back(b.y.begin);
    ys.push_back(b.y.end);
  }
  std::sort(ys.begin(), ys.end());
  ys.erase(std::unique(ys.begin(), ys.end()), ys.end());
  Boxes out;
  for (size_t k = 0; k + 1 < ys.size(); ++k) {
    const Window band{ys[k], ys[k + 1]};
    if (band.begin < r.y.begin || band.end > r.y.end || band.empty()) continue;
    std::vector<Window> covered;
    for (const Region& b : boxes) {
      if (b.y.begin <= band.begin && band.end <= b.y.end) covered.push_back(b.x);
    }
    std::sort(covered.begin(), covered.end(),
              [](const Window& a, const Window& b) { return a.begin < b.begin; });
    int64_t at = r.x.begin;
    for (const Window& c : covered) {
      if (c.begin > at) out.push_back({band, {at, c.begin}});
      at = std::max(at, c.end);
    }
    if (at < r.x.end) out.push_back({band, {at, r.x.end}});
  }
  return out;
}

int64_t area(const Boxes& boxes) {
  int64_t sum = 0;
  for (const Region& b : boxes) sum += b.area();
  return sum;
}

Region hull(const Boxes& boxes) {
  Region h;
  for (const Region& b : boxes) h = core::hull(h, b);
  return h;
}

Boxes join_cheap(Boxes boxes) {
  while (boxes.size() > 1) {
    const auto [bi, bj, least] = cheapest_pair(boxes);
    if (least > kCheapMerge) break;
    Boxes merged = boxes;
    merge(merged, bi, bj);  // counting the boxes the hull absorbs
    if (area(merged) - area(boxes) > kCheapMerge) break;
    boxes = std::move(merged);
  }
  return boxes;
}

}  // namespace tessel::core
