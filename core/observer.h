// Events: the one interface through which the engine reports progress and memory (DESIGN.md
// "Events"). The CLI prints a bar from it, the GUI draws tiles and charts, pipelines log JSON.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/graph/window.h"

namespace tessel::core {

struct TileEvent {
  enum Pass { kForward, kBackward };
  int segment = 0;
  int64_t tile = 0;   // row-major index in the segment's partition for this pass
  int64_t tiles = 0;  // tiles in that partition
  int64_t row = 0, col = 0;
  Region out;  // the tile, in the segment's output activation
  Pass pass = kForward;
  bool done = false;  // false: started; true: finished
  // A glass tile (docs/glass.md): computed once for the whole background, not run itself.
  bool glass = false;
};

// The device's allocated bytes (the CPU's: core/device/memory.h) while a step runs. `live` and
// `peak` count everything allocated, the network's weights and the caller's tensors included;
// the plan's prediction and the budget bound what the step adds to `baseline`, the bytes live
// when it began: the step's own use is live - baseline (peak - baseline at most).
struct MemorySample {
  int64_t live = 0;
  int64_t peak = 0;
  int64_t baseline = 0;
  int64_t budget = 0;  // 0: none
  std::map<std::string, int64_t> by_category;
};

class Observer {
 public:
  virtual ~Observer() = default;
  virtual void on_tile(const TileEvent&) {}
  virtual void on_memory(const MemorySample&) {}
};

}  // namespace tessel::core
