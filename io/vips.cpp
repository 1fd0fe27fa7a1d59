#include "io/vips.h"

#include <vips/vips.h>

#include <spdlog/spdlog.h>

#include <cctype>
#include <mutex>
#include <set>
#include <stdexcept>

#include "core/error.h"

namespace tessel::io {

std::string take_blob(VipsBlob* blob) {
  if (blob == nullptr) return {};
  size_t size = 0;
  const void* data = vips_blob_get(blob, &size);
  std::string bytes(static_cast<const char*>(data), size);
  vips_area_unref(VIPS_AREA(blob));
  return bytes;
}

namespace {

// libvips warns through GLib ("VIPS-WARNING **: ..."), once per tile of a damaged slide: ~80 raw
// lines before the slide was skipped. Each kind of warning (its text without numbers) goes to
// the log once, as one line; the error that follows says which slide it was.
void log_vips_warning(const gchar* domain, GLogLevelFlags level, const gchar* message, gpointer) {
  static std::mutex mutex;
  static std::set<std::string> seen;
  std::string text = message != nullptr ? message : "";
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  std::string kind;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) kind += c;
  }
  {
    const std::lock_guard lock(mutex);
    if (seen.size() > 100 || !seen.insert(kind).second) return;
  }
  if ((level & G_LOG_LEVEL_CRITICAL) != 0 || (level & G_LOG_LEVEL_ERROR) != 0) {
    spdlog::error("{}: {} (repeats of this message are not shown)", domain, text);
  } else {
    spdlog::warn("{}: {} (repeats of this message are not shown)", domain, text);
  }
}

}  // namespace

void start_vips() {
  static std::once_flag once;
  static bool started = false;
  std::call_once(once, [] {
    // libvips' own worker threads would compete with LibTorch's for the same cores; the tile
    // source runs its own reader threads, so each libvips operation gets one.
    started = VIPS_INIT("tessel") == 0;
    g_log_set_handler("VIPS",
                      static_cast<GLogLevelFlags>(G_LOG_LEVEL_WARNING | G_LOG_LEVEL_CRITICAL |
                                                  G_LOG_LEVEL_MESSAGE),
                      log_vips_warning, nullptr);
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
