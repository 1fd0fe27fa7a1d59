#include "core/graph/cells.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace tessel::core {

namespace {

void check_edges(const std::vector<int64_t>& edges, const char* axis) {
  if (edges.size() < 2 || edges.front() != 0) {
    throw Error(std::string("cell mask: the ") + axis + " edges must start at 0 and hold a cell");
  }
  for (size_t i = 1; i < edges.size(); ++i) {
    if (edges[i] <= edges[i - 1]) {
      throw Error(std::string("cell mask: the ") + axis + " edges must increase");
    }
  }
}

// The cells [first, last) of `edges` that window `w` (inside [0, edges.back())) overlaps.
std::pair<int64_t, int64_t> cells_over(const std::vector<int64_t>& edges, Window w) {
  const auto first = std::upper_bound(edges.begin(), edges.end(), w.begin) - edges.begin() - 1;
  const auto last = std::lower_bound(edges.begin(), edges.end(), w.end) - edges.begin();
  return {first, last};
}

}  // namespace

std::shared_ptr<const CellMask::Cells> CellMask::no_cells() {
  static const auto none = std::make_shared<const Cells>();
  return none;
}

CellMask::CellMask(std::vector<int64_t> y_edges, std::vector<int64_t> x_edges,
                   std::vector<uint8_t> in) {
  Cells c{std::move(y_edges), std::move(x_edges), std::move(in), {}};
  check_edges(c.y_edges, "row");
  check_edges(c.x_edges, "column");
  const auto rows = static_cast<int64_t>(c.y_edges.size()) - 1;
  const auto cols = static_cast<int64_t>(c.x_edges.size()) - 1;
  if (static_cast<int64_t>(c.in.size()) != rows * cols) {
    throw Error("cell mask: " + std::to_string(c.in.size()) + " flags for " +
                std::to_string(rows * cols) + " cells");
  }
  const auto stride = static_cast<size_t>(cols + 1);
  c.out_sum.assign(static_cast<size_t>(rows + 1) * stride, 0);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t row_out = 0;
    for (int64_t k = 0; k < cols; ++k) {
      const bool in = c.in[static_cast<size_t>(r * cols + k)] != 0;
      row_out += in ? 0 : 1;
      c.out_sum[static_cast<size_t>(r + 1) * stride + static_cast<size_t>(k + 1)] =
          c.out_sum[static_cast<size_t>(r) * stride + static_cast<size_t>(k + 1)] + row_out;
      if (in) {
        area_ += (c.y_edges[static_cast<size_t>(r) + 1] - c.y_edges[static_cast<size_t>(r)]) *
                 (c.x_edges[static_cast<size_t>(k) + 1] - c.x_edges[static_cast<size_t>(k)]);
      }
    }
  }
  uint64_t h = 0xcbf29ce484222325ULL;
  const auto mix = [&h](uint64_t v) { h = (h ^ v) * 0x100000001b3ULL; };
  for (int64_t e : c.y_edges) mix(static_cast<uint64_t>(e));
  mix(~uint64_t{0});
  for (int64_t e : c.x_edges) mix(static_cast<uint64_t>(e));
  for (uint8_t f : c.in) mix(f);
  fingerprint_ = h;
  cells_ = std::make_shared<const Cells>(std::move(c));
}

CellMask CellMask::grid(int64_t height, int64_t width, int64_t cell, std::vector<uint8_t> in) {
  if (cell < 1) throw Error("cell mask: cells must be at least one position wide");
  const auto edges = [cell](int64_t size) {
    std::vector<int64_t> e;
    for (int64_t v = 0; v < size; v += cell) e.push_back(v);
    e.push_back(size);
    return e;
  };
  return {edges(height), edges(width), std::move(in)};
}

bool CellMask::cell_in(int64_t row, int64_t col) const {
  return cells_->in[static_cast<size_t>(row * cols() + col)] != 0;
}

Region CellMask::cell(int64_t row, int64_t col) const {
  const auto r = static_cast<size_t>(row);
  const auto c = static_cast<size_t>(col);
  const Cells& m = *cells_;
  return {{m.y_edges[r], m.y_edges[r + 1]}, {m.x_edges[c], m.x_edges[c + 1]}};
}

int64_t CellMask::out_cells(int64_t r0, int64_t r1, int64_t c0, int64_t c1) const {
  const auto stride = static_cast<size_t>(cols() + 1);
  const auto at = [&](int64_t r, int64_t c) {
    return cells_->out_sum[static_cast<size_t>(r) * stride + static_cast<size_t>(c)];
  };
  return at(r1, c1) - at(r0, c1) - at(r1, c0) + at(r0, c0);
}

bool CellMask::contains(const Region& r) const {
  if (r.empty()) return true;
  if (r.y.begin < 0 || r.x.begin < 0 || r.y.end > height() || r.x.end > width()) return false;
  const auto [r0, r1] = cells_over(y_edges(), r.y);
  const auto [c0, c1] = cells_over(x_edges(), r.x);
  return out_cells(r0, r1, c0, c1) == 0;
}

std::vector<uint8_t> CellMask::contains_each(const std::vector<Window>& ys,
                                             const std::vector<Window>& xs) const {
  // Each window's cells, or none (-1) where it reaches outside the activation; an empty window
  // is inside (as contains says).
  const auto spans = [](const std::vector<Window>& ws, const std::vector<int64_t>& edges) {
    std::vector<std::pair<int64_t, int64_t>> out;
    for (const Window& w : ws) {
      if (w.empty()) {
        out.emplace_back(0, 0);
      } else if (edges.empty() || w.begin < 0 || w.end > edges.back()) {
        out.emplace_back(-1, -1);
      } else {
        out.push_back(cells_over(edges, w));
      }
    }
    return out;
  };
  const auto rows = spans(ys, y_edges()), cols = spans(xs, x_edges());
  std::vector<uint8_t> in(ys.size() * xs.size(), 0);
  for (size_t i = 0; i < rows.size(); ++i) {
    for (size_t j = 0; j < cols.size(); ++j) {
      const auto [r0, r1] = rows[i];
      const auto [c0, c1] = cols[j];
      const bool inside =
          ys[i].empty() || xs[j].empty() || (r0 >= 0 && c0 >= 0 && out_cells(r0, r1, c0, c1) == 0);
      in[i * cols.size() + j] = inside ? 1 : 0;
    }
  }
  return in;
}

Region CellMask::outside_box(const Region& r) const {
  if (r.empty()) return {};
  if (r.y.begin < 0 || r.x.begin < 0 || r.y.end > height() || r.x.end > width()) return r;
  // Plain variables, not structured bindings: the lambdas below capture them.
  const std::pair<int64_t, int64_t> rows = cells_over(y_edges(), r.y);
  const std::pair<int64_t, int64_t> cols = cells_over(x_edges(), r.x);
  const int64_t r0 = rows.first, r1 = rows.second, c0 = cols.first, c1 = cols.second;
  if (out_cells(r0, r1, c0, c1) == 0) return {};
  // The first and last rows (columns) of cells holding one outside the set: binary searches on
  // the counts of the cells before and after.
  const auto first = [](int64_t lo, int64_t hi, const auto& out_before) {
    while (hi - lo > 1) {
      const int64_t mid = lo + (hi - lo) / 2;
      (out_before(mid) > 0 ? hi : lo) = mid;
    }
    return lo;  // out_before(lo + 1) > 0, out_before(lo) == 0
  };
  const int64_t top = first(r0, r1, [&](int64_t i) { return out_cells(r0, i, c0, c1); });
  const int64_t left = first(c0, c1, [&](int64_t j) { return out_cells(r0, r1, c0, j); });
  // The last: the first from the other side, on counts after.
  const int64_t bottom =
      r1 - 1 - first(0, r1 - r0, [&](int64_t k) { return out_cells(r1 - k, r1, c0, c1); });
  const int64_t right =
      c1 - 1 - first(0, c1 - c0, [&](int64_t k) { return out_cells(r0, r1, c1 - k, c1); });
  const Region box{
      {y_edges()[static_cast<size_t>(top)], y_edges()[static_cast<size_t>(bottom) + 1]},
      {x_edges()[static_cast<size_t>(left)], x_edges()[static_cast<size_t>(right) + 1]}};
  return intersect(box, r);
}

std::vector<Region> CellMask::outside_pieces(const Region& r) const {
  if (r.empty()) return {};
  if (r.y.begin < 0 || r.x.begin < 0 || r.y.end > height() || r.x.end > width()) return {r};
  const auto [r0, r1] = cells_over(y_edges(), r.y);
  const auto [c0, c1] = cells_over(x_edges(), r.x);
  const int64_t out = out_cells(r0, r1, c0, c1);
  if (out == 0) return {};
  const int64_t w = c1 - c0;
  if (out == (r1 - r0) * w) return {r};  // all outside: one piece (most of a tissue tile)
  std::vector<uint8_t> seen(static_cast<size_t>((r1 - r0) * w), 0);
  std::vector<Region> pieces;
  std::vector<std::pair<int64_t, int64_t>> stack;
  for (int64_t i = r0; i < r1; ++i) {
    for (int64_t j = c0; j < c1; ++j) {
      if (cell_in(i, j) || seen[static_cast<size_t>((i - r0) * w + j - c0)] != 0) continue;
      Region box;
      stack.assign(1, {i, j});
      seen[static_cast<size_t>((i - r0) * w + j - c0)] = 1;
      while (!stack.empty()) {
        const auto [a, b] = stack.back();
        stack.pop_back();
        box = hull(box, cell(a, b));
        for (const auto& [da, db] : {std::pair{-1, 0}, {1, 0}, {0, -1}, {0, 1}}) {
          const int64_t na = a + da, nb = b + db;
          if (na < r0 || na >= r1 || nb < c0 || nb >= c1 || cell_in(na, nb)) continue;
          uint8_t& s = seen[static_cast<size_t>((na - r0) * w + nb - c0)];
          if (s == 0) {
            s = 1;
            stack.emplace_back(na, nb);
          }
        }
      }
      pieces.push_back(intersect(box, r));
    }
  }
  return pieces;
}

double CellMask::fraction() const {
  const int64_t all = height() * width();
  return all == 0 ? 0.0 : static_cast<double>(area()) / static_cast<double>(all);
}

std::string to_string(const CellMask& m) {
  return std::to_string(m.rows()) + "×" + std::to_string(m.cols()) + " cells over " +
         std::to_string(m.height()) + "×" + std::to_string(m.width()) + ", " +
         std::to_string(std::lround(m.fraction() * 100.0)) + "% in";
}

}  // namespace tessel::core
