// `tessel plan` and `tessel gradcheck` as pipeline calls: plan a model on an image size under a
// budget, and check the first law (tiled gradients = plain gradients) on random data.
#pragma once

#include <cstdint>
#include <string>

#include "core/gradcheck.h"
#include "core/plan.h"
#include "core/planner.h"

namespace tessel::pipelines {

struct PlanRequest {
  std::string model = "vgg16";  // a models/zoo.h name
  int64_t height = 0, width = 0;
  int64_t budget_bytes = 0;
  core::Strategy strategy = core::Strategy::kAuto;
  int64_t classes = 2;
};

struct PlanReport {
  core::Plan plan;
  std::string table;  // readable
  std::string json;   // machine-readable
};

PlanReport plan_model(const PlanRequest& request);

struct GradcheckRequest {
  std::string model = "random";  // a models/zoo.h name, or "random"
  int64_t height = 0, width = 0;
  core::Strategy strategy = core::Strategy::kGrid;
  int64_t tile = 0;  // output pixels per tile of each segment; 0: 3 tiles per axis
  uint64_t seed = 1;
  bool float64 = true;
  // kHost or kDisk: every checkpoint candidate becomes a checkpoint and moves to that tier, in
  // small blocks behind a small window, so the tile store's whole path is exercised.
  core::PlanOptions::Offload offload = core::PlanOptions::Offload::kNever;
  std::string scratch_dir;      // empty: the system's temporary directory
  std::string device = "auto";  // core::resolve_device: cpu, cuda, cuda:N, auto
};

struct GradcheckReport {
  core::Comparison comparison;
  // 1e-10 in float64; in float32 max(1e-4, 2 × rounding_floor), the plain float32 step's own
  // worst relative error against plain float64 (core::rounding_of_plain).
  double tolerance = 0;
  double rounding_floor = -1;  // float32 only
  std::string plan_table;
  std::string device;  // where both steps ran: "cpu", "cuda:0"
  bool passed() const { return comparison.worst() <= tolerance; }
};

GradcheckReport gradcheck(const GradcheckRequest& request);

}  // namespace tessel::pipelines
