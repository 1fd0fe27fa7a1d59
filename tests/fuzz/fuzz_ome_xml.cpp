// libFuzzer harness of the OME-XML reader (io/ome_xml.h): an OME-TIFF's ImageDescription in, the
// first image's size and physical pixel size out, nothing (not OME-XML), or tessel::Error (the
// documented rejection). Anything else escaping, a crash or a sanitizer report is a finding, and
// so is a result that breaks what ome_xml.h promises.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "io/ome_xml.h"
#include "tests/fuzz/input_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using tessel::fuzz::expect;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto pixels = tessel::io::read_ome_pixels(text);
    if (!pixels) return 0;
    expect(pixels->size_x >= 1 && pixels->size_y >= 1, "an accepted image has pixels");
    for (const auto& mpp : {pixels->mpp_x, pixels->mpp_y}) {
      expect(!mpp || (std::isfinite(*mpp) && *mpp > 0), "a physical size is positive and finite");
    }
  } catch (const tessel::Error&) {
    // The documented rejection.
  }
  return 0;
}
