// Before Start: what the training panel's config will cost. The plan's predicted peak memory
// (core/plan/planner.h, planned as the training pipeline plans each slide) and an estimate of one
// epoch's time: the plans' FLOPs per step over the epoch's slides, divided by this machine's
// measured FLOP rate. Free of Qt: the panel runs it on a worker thread and shows the result.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "pipelines/train_config.h"

namespace tessel::core {
struct Plan;
}  // namespace tessel::core

namespace tessel::gui {

struct RunEstimate {
  int64_t peak_bytes = 0;  // the largest predicted peak over the train slides' plans
  int64_t budget_bytes = 0;
  int64_t peak_height = 0, peak_width = 0;  // the slide (at the run's resolution) it plans
  int64_t train_slides = 0, val_slides = 0;
  double train_flops = 0;  // one epoch's training steps
  double val_flops = 0;    // one epoch's validation (forward only)
  // Slides that could not be opened at the run's resolution (the run skips them): "name: why".
  std::vector<std::string> skipped;

  double epoch_flops() const { return train_flops + val_flops; }
  double epoch_seconds(double flops_per_second) const {
    return flops_per_second > 0 ? epoch_flops() / flops_per_second : 0;
  }
};

// FLOPs of one training step under `plan`, as the planner's cost model prices a step
// (core/plan/segment_build.cpp): each segment's forward tiles with their halos, then its backward:
// a recompute of the forward (none when the segment keeps its graph) and the gradients, twice the
// forward; and the planner's price of a tile beyond its FLOPs for every forward and backward tile.
// Plain autograd (Strategy::kNone): forward and backward of the whole image. The plan does not
// record the backward partition's halos or a barrier's extra passes: the forward's stand in.
double step_flops(const core::Plan& plan);
// One forward (validation) under `plan`.
double forward_flops(const core::Plan& plan);

// Plans a config's run: its manifest's train and val slides (split as the run splits them),
// opened at the run's resolution, each distinct size planned under the budget with the run's plan
// options (strategy, optimizer state). Keeps the slides' sizes and the networks it built, so a
// form change re-plans without reopening every slide. Used by one thread at a time.
class RunEstimator {
 public:
  RunEstimator();
  ~RunEstimator();

  // Throws tessel::Error with the reason when no estimate can be made: the manifest is
  // unusable, the model unknown, no train slide opens, a slide is too small for the network, or
  // no plan fits the budget (the planner's message, which names the budget that would, after
  // the slide and its size). `cancelled`, when set, is polled between slides: true ends the
  // estimate early with an empty result.
  RunEstimate estimate(const pipelines::TrainConfig& config,
                       const std::atomic<bool>* cancelled = nullptr);

 private:
  struct Caches;
  std::unique_ptr<Caches> caches_;
};

// This machine's FLOP rate for `config`'s network on its device: one training step of the network
// (its head, its norm) by plain autograd on a 384² image, timed after a warmup, best of two,
// divided by the step's FLOPs as step_flops counts them. So the rate carries what FLOPs do not
// count (batch norms, ReLUs and adds cost about as much as the convs in a ResNet on a CPU):
// about a second on 2 cores for resnet50. Throws tessel::Error for a device that cannot be used.
double measure_flops_per_second(const pipelines::TrainConfig& config);

}  // namespace tessel::gui
