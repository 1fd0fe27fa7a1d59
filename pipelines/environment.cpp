#include "pipelines/environment.h"

#include <spdlog/version.h>

#include "core/device/device.h"
#include "core/device/runtime.h"
#include "core/plan/plan.h"
#include "core/version.h"
#ifndef TESSEL_ENGINE_ONLY
#include "io/versions.h"
#endif

namespace tessel::pipelines {

Environment probe_environment() {
  Environment env;
  auto add = [&](std::string name, std::string value) {
    env.entries.emplace_back(std::move(name), std::move(value));
  };
  add("tessel", kVersion);
  const core::DeviceReport devices = core::device_report();
  std::string torch_line = devices.torch_version;
  if (devices.torch_cuda) {
    torch_line += " (built with CUDA " + core::cuda_version_string(devices.cuda_built);
    if (devices.cudnn_built > 0) {
      torch_line += ", cuDNN " + core::cudnn_version_string(devices.cudnn_built);
      if (devices.cudnn_loaded > 0 && devices.cudnn_loaded != devices.cudnn_built) {
        torch_line += "; cuDNN " + core::cudnn_version_string(devices.cudnn_loaded) + " loaded";
      }
    }
    torch_line += ")";
  } else {
    torch_line += " (CPU-only)";
  }
  add("libtorch", torch_line);
#ifndef TESSEL_ENGINE_ONLY
  add("openslide", io::openslide_version());
  add("libvips", io::vips_version());
  add("hdf5", io::hdf5_version());
#else
  add("slides", "not built (the engine-only build: -DTESSEL_ENGINE_ONLY=ON)");
#endif
#ifdef TESSEL_QT_VERSION
  add("qt", TESSEL_QT_VERSION " (tessel-gui)");
#else
  add("qt", "not built (configure with -DTESSEL_GUI=ON)");
#endif
  add("spdlog", std::to_string(SPDLOG_VER_MAJOR) + "." + std::to_string(SPDLOG_VER_MINOR) + "." +
                    std::to_string(SPDLOG_VER_PATCH));
  add("threads", std::to_string(core::intra_op_threads()) + " intra-op (of " +
                     std::to_string(core::hardware_threads()) + " hardware threads)");
  std::string cuda_line;
  if (devices.driver_cuda > 0) {
    cuda_line = "driver supports CUDA " + core::cuda_version_string(devices.driver_cuda) + "; ";
  }
  if (devices.problem.empty()) {
    cuda_line += std::to_string(devices.gpus.size()) + " GPU(s)";
    for (const core::GpuInfo& g : devices.gpus) {
      cuda_line += "\n" + std::string(8, ' ') + "cuda:" + std::to_string(g.index) + "  " + g.name +
                   " (compute " + std::to_string(g.compute_major) + "." +
                   std::to_string(g.compute_minor) + ", " + core::format_bytes(g.total_bytes) + ")";
    }
  } else {
    cuda_line += "no GPU: " + devices.problem;
  }
  add("cuda", cuda_line);
  return env;
}

std::string to_string(const Environment& env) {
  size_t width = 0;
  for (const auto& [name, value] : env.entries) width = std::max(width, name.size());
  std::string out;
  for (const auto& [name, value] : env.entries) {
    out += name + std::string(width - name.size() + 2, ' ') + value + "\n";
  }
  return out;
}

}  // namespace tessel::pipelines
