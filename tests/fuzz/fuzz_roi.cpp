// libFuzzer harness of the region-of-interest reader (io/roi.h): GeoJSON text in, polygons and a
// bounding box out, or tessel::Error (the documented rejection). Anything else escaping, a crash
// or a sanitizer report is a finding, and so is a box that breaks what roi.h promises.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "core/error.h"
#include "core/graph/window.h"
#include "io/roi.h"
#include "tests/fuzz/input_file.h"

namespace {

constexpr int64_t kWidth = 100000, kHeight = 80000;  // a typical 40x slide, level-0 pixels

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using tessel::fuzz::expect;
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const tessel::io::RegionOfInterest roi = tessel::io::parse_roi(text, "fuzz", kWidth, kHeight);
    const tessel::core::Region& box = roi.bbox;
    expect(!roi.polygons.empty(), "a region of interest holds a polygon");
    expect(!box.empty(), "the box is never empty");
    expect(box.x.begin >= 0 && box.x.end <= kWidth && box.y.begin >= 0 && box.y.end <= kHeight,
           "the box is clipped to the slide");
    const tessel::core::Region tissue{{kHeight / 4, kHeight / 2}, {kWidth / 4, kWidth / 2}};
    const tessel::core::Region region =
        tessel::io::training_region("fuzz", kWidth, kHeight, tissue, box);
    expect(!region.empty(), "the training region is never empty");
  } catch (const tessel::Error&) {
    // The documented rejection.
  }
  return 0;
}
