#include "core/runtime.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include "core/device.h"

namespace tessel::core {
namespace {

TEST(Runtime, ConfigureThreadsUsesEveryHardwareThreadByDefault) {
  EXPECT_EQ(configure_threads(0), hardware_threads());
  EXPECT_EQ(at::get_num_threads(), hardware_threads());
}

TEST(Runtime, ConfigureThreadsHonoursAnExplicitCount) {
  EXPECT_EQ(configure_threads(1), 1);
  EXPECT_EQ(intra_op_threads(), 1);
  configure_threads(0);
}

TEST(Runtime, ReportsTheLibTorchItWasBuiltWith) {
  EXPECT_EQ(torch_version().rfind("1.", 0), 0u) << torch_version();
}

TEST(Runtime, CudaReportIsConsistentWithTheBuild) {
  const CudaRuntimeInfo info = cuda_runtime_info();
#ifdef TESSEL_WITH_CUDA
  EXPECT_TRUE(info.compiled);
#else
  EXPECT_FALSE(info.compiled);
  EXPECT_EQ(info.device_count, 0);
  EXPECT_FALSE(info.error.empty());
#endif
}

}  // namespace
}  // namespace tessel::core
