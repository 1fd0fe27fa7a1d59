// Measured memory: a tracking CPU allocator installed through c10, counting live and peak bytes
// of every tensor LibTorch allocates on the CPU (DESIGN.md "Memory"). Blocks of 1 MiB and more
// are pieces of one arena, split and merged as asked (core/device/memory.cpp): freed pages are kept
// for reuse by requests of any size (a fresh page faults and is zeroed at its first touch),
// never more than makes live + cached exceed the most bytes ever live: the process holds no
// more than it held at its peak. A block counts as live rounded up to the 4 KiB page.
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
  // Freed blocks kept for reuse, and giving them back to the system (when a run ends: the
  // cache would otherwise keep up to the run's peak).
  static int64_t cached_bytes();
  static void release_cache();
  // Bytes of blocks of 1 MiB and more the cache did not serve, since install: on pages never
  // touched (or given back), each faults and is zeroed by the kernel at its first touch. Blocks
  // under 1 MiB (the system allocator's, which reuses its own) are not counted.
  static int64_t fresh_bytes();

  // While one lives, the tensors its thread allocates come from the system and are not counted
  // (nor cached): work beside the step that is not the step's, such as opening the next slide
  // while this one trains (pipelines/train.cpp), whose host bytes the step's peak must not take.
  class Uncounted {
   public:
    Uncounted();
    ~Uncounted();
    Uncounted(const Uncounted&) = delete;
    Uncounted& operator=(const Uncounted&) = delete;

   private:
    bool before_;
  };
};

}  // namespace tessel::core
