// Plain tiles, and the schemes that run as they do (engine-internal): each forward tile from
// its input window without autograd, each backward tile recomputed from it; a tile that keeps
// its graph (KeptGraph, WholeBarriers' keep_graph, the last segment's last tile) is not
// recomputed. WholeBarriers is one tile whose barriers run whole. RecomputeRounds
// (recompute_rounds.cpp) is this with barriers' passes around the tiles.
#pragma once

#include <map>
#include <vector>

#include "core/exec/glass.h"
#include "core/exec/step.h"

namespace tessel::core {

class TilesRun : public SchemeRun {
 public:
  TilesRun(Step& step, int index) : SchemeRun(step, index), glass_(step, index) {}
  void before_forward() override;
  at::Tensor forward_tile(int64_t t, const Region& tile) override;
  void after_forward() override;
  at::Tensor backward(const at::Tensor& grad_out) override;

 protected:
  // For schemes with barriers: the tiles' barrier activations are taken, the sums come first,
  // and each backward tile adds the corrections.
  virtual bool has_barriers() const { return false; }
  virtual void before_backward(const at::Tensor& /*grad_out*/) {}
  virtual at::Tensor corrections(const Region& /*tile*/, at::Tensor root,
                                 const std::map<NodeId, TileTensor>& /*acts*/) {
    return root;
  }

 private:
  bool keeps(int64_t t) const;
  void schedule_backward(StoredActivation* stored_in, StoredActivation* stored_grad_out);
  at::Tensor backward_tile(int64_t t, const std::vector<Region>& need, const at::Tensor& grad_out,
                           StoredActivation* stored_grad_out);

  KeptTiles kept_;

 protected:
  GlassRun glass_;  // the glass tiles, not run (core/exec/glass.h)
};

}  // namespace tessel::core
