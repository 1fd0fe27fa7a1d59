#include "pipelines/environment.h"

#include <spdlog/version.h>

#include "core/device.h"
#include "core/runtime.h"
#include "core/version.h"
#include "io/versions.h"

namespace tessel::pipelines {

Environment probe_environment() {
  Environment env;
  auto add = [&](std::string name, std::string value) {
    env.entries.emplace_back(std::move(name), std::move(value));
  };
  add("tessel", kVersion);
  add("libtorch", core::torch_version());
  add("openslide", io::openslide_version());
  add("libvips", io::vips_version());
  add("hdf5", io::hdf5_version());
#ifdef TESSEL_QT_VERSION
  add("qt", TESSEL_QT_VERSION " (tessel-gui)");
#else
  add("qt", "not built (configure with -DTESSEL_GUI=ON)");
#endif
  add("spdlog", std::to_string(SPDLOG_VER_MAJOR) + "." + std::to_string(SPDLOG_VER_MINOR) + "." +
                    std::to_string(SPDLOG_VER_PATCH));
  add("threads", std::to_string(core::intra_op_threads()) + " intra-op (of " +
                     std::to_string(core::hardware_threads()) + " hardware threads)");
  const core::CudaRuntimeInfo cuda = core::cuda_runtime_info();
  std::string cuda_line = core::cuda_available() ? "available" : "not available";
  if (cuda.compiled) {
    cuda_line += "; CUDA runtime sees " + std::to_string(cuda.device_count) + " device(s)";
  }
  if (!cuda.error.empty()) cuda_line += " (" + cuda.error + ")";
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
