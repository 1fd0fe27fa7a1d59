// This machine's prices for DELTA's offload-or-recompute decision (core/plan/planner.h): the time
// to move a byte to the offload tier and back, and the time of a recompute FLOP.
#pragma once

#include <c10/core/Device.h>

#include <filesystem>

#include "core/plan/plan.h"

namespace tessel::core {

// Measured once per process, device, tier and scratch directory (later calls return the first
// result; another directory may be another disk): a scratch block of a few MiB on `device`
// written to and read back from the tile store (the disk tier bypassing the page cache, the worst
// case a budget-bound machine sees; from a GPU, over PCIe or NVLink to pinned host memory), and a
// conv timed on the device (a GPU's is larger, so that it is not launch-bound). About 0.1 s.
// The scratch directory's free space is read at every call (OffloadPrices::disk_free_bytes).
// Throws tessel::Error when the scratch directory is unusable.
OffloadPrices measure_offload_prices(Tier tier, const std::filesystem::path& scratch_dir = {},
                                     c10::Device device = c10::Device(c10::kCPU));

// What the scratch directory (empty: the system's temporary one) has free now, for the disk tier
// (OffloadPrices::disk_free_bytes); -1 for other tiers or when unknown. Given prices need it too.
int64_t scratch_free_bytes(Tier tier, const std::filesystem::path& scratch_dir = {});

}  // namespace tessel::core
