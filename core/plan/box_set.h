// Sets of disjoint boxes: what a tile computes of a node where glass lies between pieces of
// tissue, or between tissue and the image's border (core/plan/glass.h). Pure arithmetic on
// regions.
#pragma once

#include <cstdint>
#include <vector>

#include "core/graph/window.h"

namespace tessel::core {

using Boxes = std::vector<Region>;

// The positions of `a` outside `b`, as at most four disjoint boxes.
Boxes subtract(const Region& a, const Region& b);

// Disjoint boxes covering every position of `boxes` (which may overlap), at most `most` of
// them: (more than 64 first joined by where they lie), overlaps cut away, boxes that make a
// rectangle together joined, then, while there are too many, the pair whose hull adds the fewest
// positions merged (and what the hull meets absorbed). Empty boxes dropped.
Boxes disjoint_boxes(Boxes boxes, int most);

// `boxes` (disjoint) with pairs merged while a merge adds at most 256 positions (absorbed boxes
// counted): each box is an op call, which costs more (box_set.cpp).
Boxes join_cheap(Boxes boxes);

// The positions of `r` outside `boxes` (disjoint, inside `r`), as disjoint boxes: bands between
// the boxes' rows, the gaps between boxes in each.
Boxes ring(const Region& r, const Boxes& boxes);

int64_t area(const Boxes& boxes);
// The smallest region holding every box.
Region hull(const Boxes& boxes);

}  // namespace tessel::core
