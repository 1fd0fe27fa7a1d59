// libvips, started once per process. Every io/ file that calls libvips (vips-cpp's VImage) calls
// start_vips() first; libvips then lives until the process exits.
#pragma once

#include <string>

namespace tessel::io {

// Starts libvips (VIPS_INIT) on first use; thread-safe, cheap after the first call. Throws
// tessel::Error when libvips cannot start.
void start_vips();

// libvips' pending error text (vips_error_buffer), cleared; for messages that say why.
std::string vips_error_text();

}  // namespace tessel::io
