#include "pipelines/step_profile.h"

#include <c10/util/Exception.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <algorithm>
#include <map>
#include <set>

#include "core/error.h"

namespace tessel::pipelines {

namespace {
namespace kp = torch::autograd::profiler;
namespace impl = torch::profiler::impl;
}  // namespace

StepProfile::StepProfile(c10::Device device) {
  std::set<impl::ActivityType> activities{impl::ActivityType::CPU};
  if (device.is_cuda()) activities.insert(impl::ActivityType::CUDA);
  const impl::ProfilerConfig config(impl::ProfilerState::KINETO);
  try {
    kp::prepareProfiler(config, activities);
    kp::enableProfiler(config, activities);
  } catch (const c10::Error& e) {
    throw Error(std::string("cannot profile the step: LibTorch's profiler did not start (") +
                e.what_without_backtrace() + ")");
  }
  running_ = true;
}

StepProfile::~StepProfile() {
  if (!running_) return;
  try {
    kp::disableProfiler();
  } catch (...) {  // a destructor on an error path: the trace is lost, nothing else
  }
}

std::vector<ProfileEntry> StepProfile::finish(const std::filesystem::path& path, size_t top) {
  running_ = false;
  const std::unique_ptr<kp::ProfilerResult> result = kp::disableProfiler();
  if (!result) throw Error("the profiler returned no result");
  if (!path.empty()) result->save(path.string());
  std::map<std::pair<std::string, bool>, ProfileEntry> by_name;  // (name, on the GPU)
  bool gpu = false;
  for (const kp::KinetoEvent& e : result->events()) {
    const bool on_gpu = e.deviceType() == c10::DeviceType::CUDA;
    gpu = gpu || on_gpu;
    ProfileEntry& entry = by_name[{e.name(), on_gpu}];
    entry.name = e.name();
    entry.device = on_gpu ? "cuda" : "cpu";
    entry.calls += 1;
    entry.ms += static_cast<double>(e.durationNs()) / 1e6;
  }
  std::vector<ProfileEntry> entries;
  for (auto& [key, entry] : by_name) {
    if (key.second == gpu) entries.push_back(std::move(entry));
  }
  std::sort(entries.begin(), entries.end(),
            [](const ProfileEntry& a, const ProfileEntry& b) { return a.ms > b.ms; });
  if (entries.size() > top) entries.resize(top);
  return entries;
}

}  // namespace tessel::pipelines
