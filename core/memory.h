// Measured memory: a tracking CPU allocator installed through c10, counting live and peak bytes
// of every tensor LibTorch allocates on the CPU (DESIGN.md "Memory").
#pragma once

#include <cstdint>

namespace tessel::core {

class MemoryTracker {
 public:
  // Installs the tracking allocator as LibTorch's CPU allocator (once per process; idempotent).
  // Tensors allocated before this are not counted.
  static void install();
  static bool installed();
  static int64_t live_bytes();
  static int64_t peak_bytes();
  // Starts a new peak measurement from the current live bytes.
  static void reset_peak();
};

}  // namespace tessel::core
