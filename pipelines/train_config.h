// The training run's configuration (`tessel train --config run.yaml`): every key, its default,
// and its validation, in one place. A config file is YAML or JSON; any key can be overridden from
// the command line as `key=value` (`lr=3e-4`, `classes=[normal, tumour]`). The resolved
// config is saved in the run folder and in every checkpoint. docs/train-config.md lists the keys.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace tessel::pipelines {

struct TrainConfig {
  // Data
  std::filesystem::path manifest;    // CSV: slide, label[, split, patient, ...]
  std::vector<std::string> classes;  // explicit class order; empty: from the labels
  double val_fraction = 0.2;         // splits drawn by patient when the CSV has no split column
  double test_fraction = 0.0;
  // Resolution: exactly one of mpp, magnification, level (default: level 0).
  std::optional<double> mpp;
  std::optional<double> magnification;
  std::optional<int> level;
  std::optional<double> base_mpp;  // mpp of level 0 for slides that do not record it
  bool tissue_bbox = false;        // train on the tissue's bounding box only
  bool tissue_fill = false;        // pixels off the tissue mask become glass-white
  // Where the image has a constant background (tissue_fill's glass), it is computed once, not
  // tile by tile (core/plan/glass.h); false computes it like tissue (for comparison).
  bool glass = true;
  // Model
  std::string model = "vgg-mini";
  // The head's pooling: avg or max (a global pool), or attention (attention-MIL over every
  // position of the last feature map, core/exec/attention.h, with the three keys after it).
  std::string pool = "avg";
  int64_t attention_hidden = 128;        // the attention network's width
  bool attention_gated = true;           // CLAM's gated attention: tanh(V h) ⊙ sigmoid(U h)
  std::string attention_branches = "1";  // 1, or "classes": one attention map per class (CLAM-MB)
  double attention_dropout = 0.0;        // in the attention network (CLAM uses 0.25)
  // The zoo's batch norms: frozen (running statistics), batch (training mode, exact over the
  // whole slide) or group (docs/barriers.md). Networks from NET.h5 keep their own.
  std::string norm = "frozen";
  double dropout = 0.0;
  std::filesystem::path init_weights;  // an HDF5 checkpoint to start from (matched by name)
  // Optimisation
  int64_t epochs = 10;
  int64_t batch = 1;               // slides per optimizer step (gradient accumulation)
  std::string optimizer = "adam";  // sgd, adam, adamw
  double lr = 1e-3;
  double momentum = 0.9;  // sgd
  double weight_decay = 0.0;
  std::string schedule = "constant";  // constant, step, cosine
  double warmup_epochs = 0;           // linear warm-up from lr/10, in epochs
  int64_t step_epochs = 10;           // step schedule: multiply by gamma every step_epochs
  double gamma = 0.1;
  std::string balance = "none";  // none, weighted (loss weights), sampling (balanced draws)
  // Loss weights per class: "none"; "auto" (N / (K·n_k) over the train split, as balance:
  // weighted); or "list": class_weights, one positive number per class in the classes' order.
  std::string class_weights_mode = "none";
  std::vector<double> class_weights;
  // Augmentation: exact under tiling (applied through the tile source's coordinates).
  bool flips = false;
  bool rotations = false;     // multiples of 90°
  double color_jitter = 0.0;  // per-slide brightness/contrast change per channel, ± this
  // Selection and stopping
  std::string metric = "balanced_accuracy";  // accuracy, balanced_accuracy, auc, loss
  int64_t patience = 0;                      // epochs without improvement before stopping; 0: off
  // Engine
  std::string budget = "4GiB";
  std::string strategy = "auto";
  // cpu, cuda, cuda:N, or auto: the first GPU when one is usable (core/device/device.h).
  std::string device = "auto";
  std::string precision = "float32";  // float32, tf32 or bf16 (core/device/precision.h)
  // Slides opened ahead (each's tissue mask, plan, and the pixels its first tiles read), each on
  // a thread, while the current one trains or is validated: "auto" (1 on a CPU, whose cores the
  // step uses; on a GPU one per 4 CPU threads, 1 to 4), or a number, 0 (each slide opened when its
  // turn comes) to 16.
  std::string read_ahead = "auto";
  // With --distributed: what the ranks share (docs/distributed.md, docs/slide-parallel.md).
  // "data": each rank trains its own slides; "slide": every rank runs a share of each slide's
  // step (one slide at a time, its tiles split over the ranks); "hybrid": groups of
  // `slide_ranks` ranks each share a slide, and the groups take different slides.
  std::string parallel = "data";
  int64_t slide_ranks = 0;  // hybrid: ranks per slide (2 or more, dividing the rank count)
  int64_t seed = 1;
  std::filesystem::path output = "runs/run";

  // The config as YAML, every key with its resolved value.
  std::string to_yaml() const;
};

// Reads `path` (YAML or JSON; empty: defaults only), then applies `overrides` ("key=value").
// Throws tessel::Error naming the file and key for an unknown key, a value of the wrong type or
// out of range, and options that contradict each other.
TrainConfig load_train_config(const std::filesystem::path& path,
                              const std::vector<std::string>& overrides = {});
// The same from YAML text (a checkpoint's saved config).
TrainConfig parse_train_config(const std::string& yaml, const std::string& origin,
                               const std::vector<std::string>& overrides = {});

}  // namespace tessel::pipelines
