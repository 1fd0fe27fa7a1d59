// A set of positions of one activation as cells of a grid, each wholly in the set or not: the
// constant region of an image (glass a tissue mask fills, the outside of a training ROI) and,
// after each segment, the positions it found uniform (the union of its glass tiles). Asks
// "does this region lie wholly inside?" in constant time (a summed-area table). Immutable: copies
// share their cells (the planner keeps a mask per segment and candidate partition it prices).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/graph/window.h"

namespace tessel::core {

class CellMask {
 public:
  CellMask() = default;  // the empty set over no positions
  // Cells between consecutive `y_edges` and `x_edges` (each from 0, increasing, ending at the
  // activation's size), `in` row-major (1: the cell is in the set). Throws tessel::Error on a
  // grid that does not fit.
  CellMask(std::vector<int64_t> y_edges, std::vector<int64_t> x_edges, std::vector<uint8_t> in);
  // Square cells of `cell` positions (the last row and column clipped) over height × width.
  static CellMask grid(int64_t height, int64_t width, int64_t cell, std::vector<uint8_t> in);

  int64_t height() const { return y_edges().empty() ? 0 : y_edges().back(); }
  int64_t width() const { return x_edges().empty() ? 0 : x_edges().back(); }
  int64_t rows() const { return static_cast<int64_t>(y_edges().size()) - 1; }
  int64_t cols() const { return static_cast<int64_t>(x_edges().size()) - 1; }
  const std::vector<int64_t>& y_edges() const { return cells_->y_edges; }
  const std::vector<int64_t>& x_edges() const { return cells_->x_edges; }
  bool cell_in(int64_t row, int64_t col) const;
  Region cell(int64_t row, int64_t col) const;
  // Whether every position of `r` is in the set: false where `r` reaches outside the activation
  // (the part outside is padding, never uniform); true for an empty `r`.
  bool contains(const Region& r) const;
  // contains({ys[i], xs[j]}) for every i and j, row-major: each window's cells found once, not
  // once a region (a segment's uniform output cells: 128 × 128 regions a call).
  std::vector<uint8_t> contains_each(const std::vector<Window>& ys,
                                     const std::vector<Window>& xs) const;
  // The smallest region holding every position of `r` not in the set (empty where `r` lies
  // wholly inside); `r` itself where it reaches outside the activation.
  Region outside_box(const Region& r) const;
  // The positions of `r` not in the set by piece: each group of connected cells (sharing a
  // side) outside the set, as its smallest box within `r`. {r} where `r` reaches outside the
  // activation; none where it lies wholly inside.
  std::vector<Region> outside_pieces(const Region& r) const;
  // Positions in the set, and their share of the activation (0 for an empty one).
  int64_t area() const { return area_; }
  double fraction() const;
  bool none() const { return area_ == 0; }
  // A 64-bit hash of the grid and its cells (FNV-1a): equal sets on equal grids hash alike. For
  // memoising what the planner derives from a mask, never for deciding what is uniform.
  uint64_t fingerprint() const { return fingerprint_; }

 private:
  int64_t out_cells(int64_t r0, int64_t r1, int64_t c0, int64_t c1) const;  // cells [r0,r1)×[c0,c1)

  struct Cells {
    std::vector<int64_t> y_edges, x_edges;
    std::vector<uint8_t> in;
    std::vector<int64_t> out_sum;  // (rows+1)×(cols+1): cells not in the set above and left
  };
  static std::shared_ptr<const Cells> no_cells();
  std::shared_ptr<const Cells> cells_ = no_cells();
  int64_t area_ = 0;
  uint64_t fingerprint_ = 0;
};

std::string to_string(const CellMask& m);

}  // namespace tessel::core
