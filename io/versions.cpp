#include "io/versions.h"

#include <H5public.h>
#include <vips/vips.h>

#include "core/error.h"
#include "io/openslide_api.h"

namespace tessel::io {

// The version and where it came from (Tessel's OpenSlide is a file found at run time), or why
// there is none: doctor reports, it does not fail.
std::string openslide_version() {
  try {
    const OpenSlideApi& api = openslide();
    return std::string(api.get_version()) + " (" + api.library.string() + ")";
  } catch (const Error& e) {
    return std::string("not loaded: ") + e.what();
  }
}

std::string vips_version() { return vips_version_string(); }

std::string hdf5_version() {
  unsigned major = 0, minor = 0, release = 0;
  if (H5get_libversion(&major, &minor, &release) < 0) return "unknown";
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release);
}

}  // namespace tessel::io
