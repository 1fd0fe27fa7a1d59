// The core tests run on the device TESSEL_TEST_DEVICE names (scripts/gpu-check sets cuda), the CPU
// otherwise, with the algorithms a tiled-vs-plain comparison needs (core/device/device.h).
#include <gtest/gtest.h>

#include <iostream>

#include "core/device/device.h"

namespace tessel::core {
namespace {

class TestDevice : public ::testing::Environment {
 public:
  void SetUp() override {
    use_exact_algorithms();
    std::cout << "core tests on " << test_device().str() << "\n";
  }
};

const auto* const kRegistered = ::testing::AddGlobalTestEnvironment(new TestDevice);

}  // namespace
}  // namespace tessel::core
