// Versions of the slide and file libraries io/ links, for `tessel doctor` and bug reports.
#pragma once

#include <string>

namespace tessel::io {

std::string openslide_version();
std::string vips_version();
std::string hdf5_version();

}  // namespace tessel::io
