// One training step under LibTorch's profiler (Kineto, as torch.profiler): every operator on the
// CPU and, on a GPU, every kernel and copy. `tessel bench step --profile FILE` writes the last
// timed step's trace (Chrome trace JSON: Perfetto or chrome://tracing open it) and puts the
// longest entries in its JSON line, so that a device run's output already says where the time
// went.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace tessel::pipelines {

struct ProfileEntry {
  std::string name;
  std::string device;  // "cuda" (a kernel or copy on the GPU) or "cpu" (an operator)
  int64_t calls = 0;
  double ms = 0;  // summed; CPU operators include the operators they call
};

class StepProfile {
 public:
  // Starts recording (CPU operators; on a GPU also its kernels). Throws tessel::Error when this
  // LibTorch has no profiler.
  explicit StepProfile(c10::Device device);
  ~StepProfile();
  StepProfile(const StepProfile&) = delete;
  StepProfile& operator=(const StepProfile&) = delete;

  // Stops, writes the trace to `path`, and returns the `top` entries by summed time: the GPU's
  // kernels and copies where there are any, else the CPU's operators.
  std::vector<ProfileEntry> finish(const std::filesystem::path& path, size_t top = 20);

 private:
  bool running_ = false;
};

}  // namespace tessel::pipelines
