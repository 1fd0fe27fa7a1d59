#include "io/vips.h"

#include <vips/vips.h>

#include <mutex>
#include <stdexcept>

#include "core/error.h"

namespace tessel::io {

void start_vips() {
  static std::once_flag once;
  static bool started = false;
  std::call_once(once, [] {
    // libvips' own worker threads would compete with LibTorch's for the same cores; the tile
    // source runs its own reader threads, so each libvips operation gets one.
    started = VIPS_INIT("tessel") == 0;
    if (started) vips_concurrency_set(1);
  });
  if (!started) throw Error("libvips could not start: " + vips_error_text());
}

std::string vips_error_text() {
  std::string text = vips_error_buffer();
  vips_error_clear();
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

}  // namespace tessel::io
