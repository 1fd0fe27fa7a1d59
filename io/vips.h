// libvips, started once per process. Every io/ file that calls libvips (vips-cpp's VImage) calls
// start_vips() first; libvips then lives until the process exits.
#pragma once

#include <string>

struct _VipsBlob;  // libvips' (vips/type.h), for take_blob without including libvips here

namespace tessel::io {

// Starts libvips (VIPS_INIT) on first use; thread-safe, cheap after the first call. Throws
// tessel::Error when libvips cannot start.
void start_vips();

// libvips' pending error text (vips_error_buffer), cleared; for messages that say why.
std::string vips_error_text();

// The bytes of an encoded image libvips returned (tiffsave_buffer, pngsave_buffer), the blob
// released. Images are encoded in memory and written by io/durable.h: a full disk is then an
// error with its reason, where libvips 8.14's tiffsave to a file crashed (SIGSEGV in TIFFClose
// → vips_target_seek) once the disk filled.
std::string take_blob(::_VipsBlob* blob);

}  // namespace tessel::io
