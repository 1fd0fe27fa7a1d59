#include "io/versions.h"

#include <H5public.h>
#include <openslide.h>
#include <vips/vips.h>

namespace tessel::io {

std::string openslide_version() { return openslide_get_version(); }

std::string vips_version() { return vips_version_string(); }

std::string hdf5_version() {
  unsigned major = 0, minor = 0, release = 0;
  if (H5get_libversion(&major, &minor, &release) < 0) return "unknown";
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release);
}

}  // namespace tessel::io
