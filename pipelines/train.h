// Slide-level training (`tessel train`): a network trained on whole slides from a manifest,
// each slide streamed tile by tile through the engine, validated every epoch, checkpointed to
// HDF5 (last and best), resumable exactly. The run folder holds config.yaml, train.log,
// metrics.csv, events.jsonl, checkpoints/ and summary.json.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/exec/fault.h"
#include "core/observer.h"
#include "pipelines/metrics.h"
#include "pipelines/train_config.h"

namespace tessel::pipelines {

class Communicator;  // pipelines/distributed.h

// One slide's pass through the engine: started (done = false), then finished.
struct SlideProgress {
  std::string phase;  // "train" or "val"
  int64_t epoch = 0;  // 1-based
  int64_t epochs = 0;
  int64_t index = 0;              // 0-based, in this phase of this epoch
  int64_t count = 0;              // slides in this phase of this epoch
  std::string slide;              // file name
  int64_t height = 0, width = 0;  // pixels the engine sees
  bool done = false;
  double loss = 0;          // done: this slide's loss
  double seconds = 0;       // done: wall time of the slide
  double wait_seconds = 0;  // done: time the engine waited for pixels (-1: unknown)
  // done: opening the slide (its tissue mask included) and planning, wherever it ran (on the
  // read-ahead thread while the previous slide trained: TrainConfig::read_ahead); of `seconds`,
  // the wait for that opening and the step itself (its waits for pixels included): a cohort's
  // time against its reads and its steps.
  double open_seconds = 0, open_wait_seconds = 0, step_seconds = 0;
  int64_t tiles = 0;  // forward + backward tiles of the step
  // The step's measured peak counts what it adds to the bytes live when it began; the plan's
  // predicted peak and the budget also hold `fixed_bytes`, the plan's parameters and optimizer
  // state, live before the step (the gradients are made in it): compare measured with
  // predicted - fixed.
  int64_t measured_peak_bytes = -1;
  int64_t predicted_peak_bytes = 0;
  int64_t fixed_bytes = 0;
  int64_t budget_bytes = 0;
};

struct EpochReport {
  int64_t epoch = 0;  // 1-based
  int64_t epochs = 0;
  double lr = 0;
  double train_loss = 0;
  ClassificationMetrics train;
  ClassificationMetrics val;  // count 0 without a validation split
  bool best = false;          // the best validation metric so far: best.h5 was written
  double seconds = 0;
};

// The engine's tile and memory events plus the run's own.
class TrainObserver : public core::Observer {
 public:
  virtual void on_slide(const SlideProgress&) {}
  virtual void on_epoch(const EpochReport&) {}
};

struct TrainSummary {
  std::filesystem::path run_dir;
  int64_t epochs_done = 0;
  int64_t steps = 0;  // optimizer steps
  int64_t best_epoch = 0;
  double best_metric = 0;
  ClassificationMetrics last_val;
  bool interrupted = false;    // stopped on request; last.h5 holds the position
  bool stopped_early = false;  // patience ran out
  int64_t skipped_slides = 0;  // slides skipped anywhere (manifest, training, validation)
  double seconds = 0;
  std::string error;  // why the run ended early (written to summary.json; train() rethrows it)
};

struct TrainRequest {
  TrainConfig config;
  // Continue from config.output/checkpoints/last.h5 (weights, optimizer, position), exactly as an
  // uninterrupted run would have gone on.
  bool resume = false;
  // When set, training stops after the current slide and writes last.h5 (Ctrl-C, pre-emption).
  const std::atomic<bool>* stop = nullptr;
  // When set, training stops as the engine's next tile finishes instead (the GUI's Stop): the slide
  // in progress is dropped with its part of the gradient, and last.h5 holds the position before
  // it (or, in validation, before the epoch's validation), so a resumed run trains it again
  // exactly. One process only: with a communicator it is not read.
  const std::atomic<bool>* stop_now = nullptr;
  TrainObserver* observer = nullptr;
  // Data-parallel training (pipelines/distributed.h, docs/distributed.md): every rank runs this
  // with the same config. Rank r trains positions r, r + N, ... of each batch, so batch b holds the
  // slides it holds in one process; gradients and per-slide results are summed over the ranks
  // before each step, and the steps equal one process's. Rank 0 alone writes the run's files.
  // With config.parallel slide or hybrid, groups of ranks share each slide's step instead
  // (docs/slide-parallel.md), and the groups take the batch's slides as ranks do.
  Communicator* communicator = nullptr;
  // Where the disk tier's scratch file goes when a plan offloads checkpoints (`--scratch`);
  // empty: the run folder, so a crashed run's leftover is removed by the next run there.
  std::filesystem::path scratch_dir{};
  // Tests only: a deliberate fault in every tiled step (core::Fault), to show that a test's
  // tolerance rejects a one-tile error.
  core::Fault inject = core::Fault::kNone;
};

// Throws tessel::Error for a manifest that cannot be used, a run folder or scratch directory that
// cannot be written, or a plan that does not fit the budget; slides that cannot be read are skipped
// and counted.
TrainSummary train(const TrainRequest& request);

}  // namespace tessel::pipelines
