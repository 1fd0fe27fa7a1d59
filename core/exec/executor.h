// The executor: one training step of a graph under a plan (DESIGN.md "Exact tiled forward and
// backward"). Gradients land in the parameters' .grad (accumulating, like loss.backward()), so
// pipelines zero them and step the optimizer around this call.
#pragma once

#include <ATen/core/Tensor.h>

#include <filesystem>
#include <functional>
#include <optional>

#include "core/device/device.h"
#include "core/device/precision.h"
#include "core/exec/fault.h"
#include "core/graph/graph.h"
#include "core/observer.h"
#include "core/plan/plan.h"
#include "core/store/tile_store.h"
#include "core/tile_source.h"

namespace tessel::core {

class Ranks;  // core/exec/ranks.h

// loss(logits, target) → scalar.
using LossFn = std::function<at::Tensor(const at::Tensor& logits, const at::Tensor& target)>;

struct StepOptions {
  bool input_gradient = false;  // also return d loss / d image (saliency)
  Observer* observer = nullptr;
  // Where checkpoints the plan offloads to disk go (core/store/tile_store.h); empty: the system's
  // temporary directory.
  std::filesystem::path scratch_dir;
  // The disk tier bypasses the page cache (TileStoreOptions::bypass_page_cache; benchmarks).
  bool bypass_page_cache = false;
  // The disk tier's direct I/O (TileStoreOptions::direct_io); none: the device's choice
  // (core/device/device.h direct_disk_io). Benchmarks set false for the page cache's comparison
  // point.
  std::optional<bool> direct_io;
  // float32 (exact: the parameters' dtype), tf32 or bf16 (core/device/precision.h). The forward,
  // the recompute and the loss run under it; the gradients land in the parameters' dtype.
  Precision precision = Precision::kFloat32;
  // The seed of spatial dropout's masks in a training step (core/exec/dropout.h): the same seed
  // gives the same masks, tiled or plain, in the forward and in every recompute.
  uint64_t dropout_seed = 0;
  // The memory formats the tiles' convolutions run in; none: the device's choice for the
  // precision (core/device/device.h tile_formats). Benchmarks compare them; results do not change.
  std::optional<TileFormats> tile_formats;
  Fault inject = Fault::kNone;  // tiled steps only
  // Glass tiles (core/plan/glass.h) are computed once, where the image declares a background
  // (TileSource::background); false runs them like any tile (for comparison).
  bool glass = true;
  // Slide-parallel (core/exec/ranks.h, docs/slide-parallel.md): this rank of a group that shares
  // the step. Each rank runs its share of every segment's tiles (rank_tiles); the checkpoints,
  // the input gradients between segments and the parameters' gradients are summed over the
  // ranks, so every rank ends the step with the gradients of the whole image. Null or one rank:
  // the step alone. Glass is computed as tissue under it (not yet split).
  Ranks* ranks = nullptr;
};

struct StepResult {
  at::Tensor loss;        // scalar, detached
  at::Tensor logits;      // detached
  at::Tensor input_grad;  // 1×C×H×W, when asked for
  MemoryBreakdown predicted;
  // From the step's device's memory meter (core/device/device.h): the most bytes live above what
  // was live at the start (-1 on the CPU without the tracking allocator), and on a GPU the most the
  // caching allocator reserved above its reserve at the start (-1 on the CPU).
  int64_t measured_peak_bytes = -1;
  int64_t measured_peak_reserved_bytes = -1;
  double forward_ms = 0, backward_ms = 0;
  int64_t forward_tiles = 0, backward_tiles = 0;
  int64_t glass_forward_tiles = 0, glass_backward_tiles = 0;  // of those, glass (not run)
  int64_t glass_filled = 0;  // nodes of tiles computed over a box, the rest filled (glass.h)
  // Split over ranks (StepOptions::ranks): the bytes this rank gave to sums over the ranks
  // (checkpoints, input gradients, the parameters' gradients).
  int64_t summed_bytes = 0;
  // Offload: the tile store's bytes moved to and from the host or disk tier, the most held on
  // disk at once and the scratch file's size, the time its I/O thread spent moving them and the
  // time the step waited for them (transfers not hidden behind compute), by reads and writes.
  TileStoreStats offload;
  double offload_forward_wait_ms = 0;  // of offload.wait_ms, the part in the forward
};

// Runs forward, loss and backward of `graph` on the image `source` serves, as `plan` says
// (Strategy::kNone: plain autograd on the whole image). The computation's dtype is the
// parameters'; the image is converted to it.
StepResult train_step(Graph& graph, const Plan& plan, TileSource& source, const at::Tensor& target,
                      const LossFn& loss, const StepOptions& options = {});

// Forward only, without autograd (evaluation, heatmaps): the network's output for the image.
// Of the options, the observer and where offloaded checkpoints go are used.
at::Tensor infer(Graph& graph, const Plan& plan, TileSource& source,
                 const StepOptions& options = {});

}  // namespace tessel::core
