// One row of a shared-rows segment (LR-CNN's 2PS, core/plan/plan.h shared_row) on tensors, without
// joining what a row inherits to what it computes: each node's held rows stay two pieces, so
// no activation is copied whole once more a row (bench/NOTES.md, session 37).
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "core/exec/tile_ops.h"
#include "core/graph/graph.h"
#include "core/plan/geometry.h"
#include "core/plan/plan.h"

namespace tessel::core {

// Nodes (first, output] of `graph` over one shared row at a time: each computes its new rows
// from its producers' held rows and holds them after the rows the previous row kept of it
// (`inherited`, by node; a node's held rows are those two pieces, never joined: a consumer
// reads the rows that follow from earlier rows through a small copy of the seam, and the rest
// where they lie).
class SharedRowRunner {
 public:
  SharedRowRunner(const Graph& graph, const std::vector<Shape>& shapes, NodeId first, NodeId output)
      : graph_(graph), shapes_(shapes), first_(first), output_(output) {}

  // Shared row `row`. `input`: the segment input's held rows, in the tile format the forward
  // computes in. `kept`, when given, receives the rows this row keeps for the next one, by
  // node: copies with autograd off, views (with autograd on) that the caller seeds with the
  // gradient the next row handed back. `handed` (autograd on, by node): the gradient the row
  // below handed back for the rows this one keeps; added to the node's gradient as autograd
  // passes it (a hook) where this row's consumers read those rows, else returned in `kept` for
  // the caller to seed. Returns the output's rows, those of `row.computed`.
  at::Tensor run(const SharedRow& row, TileTensor input, const std::vector<at::Tensor>& inherited,
                 std::vector<at::Tensor>* kept, const std::vector<at::Tensor>* handed = nullptr);

 private:
  const Graph& graph_;
  const std::vector<Shape>& shapes_;
  const NodeId first_, output_;
};

}  // namespace tessel::core
