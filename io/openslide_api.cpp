#include "io/openslide_api.h"

#include <dlfcn.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <string>
#include <system_error>

#include "core/error.h"

#ifndef TESSEL_OPENSLIDE_LIBRARY
#define TESSEL_OPENSLIDE_LIBRARY ""
#endif

// AddressSanitizer refuses RTLD_DEEPBIND (it would bypass its interceptors). The sanitizer builds
// (make test-asan, the fuzz harnesses) hold only the readers, never libvips, so no other OpenSlide
// shares the process there and RTLD_LOCAL alone keeps the wheel's symbols apart.
#if defined(__SANITIZE_ADDRESS__)
#define TESSEL_NO_DEEPBIND 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TESSEL_NO_DEEPBIND 1
#endif
#endif

namespace tessel::io {
namespace {

constexpr const char* kHowToInstall =
    "Tessel reads slides with OpenSlide 4 from the openslide-bin wheel: run scripts/setup (it "
    "installs it into .venv), or set TESSEL_OPENSLIDE_LIBRARY to a libopenslide.so.1";

int open_flags() {
#ifdef TESSEL_NO_DEEPBIND
  return RTLD_NOW | RTLD_LOCAL;
#else
  return RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND;
#endif
}

template <typename F>
void bind(void* library, const std::filesystem::path& path, const char* name, F*& function) {
  dlerror();
  void* symbol = dlsym(library, name);
  if (symbol == nullptr) {
    throw Error("OpenSlide library " + path.string() + " has no " + name +
                " (not an OpenSlide 4 library?). " + kHowToInstall);
  }
  function = reinterpret_cast<F*>(symbol);  // NOLINT: dlsym's void* to the function it names
}

OpenSlideApi load() {
  OpenSlideApi api{};
  api.library = openslide_library_path();
  std::error_code ec;
  if (api.library.empty() || !std::filesystem::is_regular_file(api.library, ec)) {
    throw Error("OpenSlide library not found" +
                (api.library.empty() ? std::string() : " at " + api.library.string()) + ". " +
                kHowToInstall);
  }
  // Never closed: slides may be open until the process exits.
  void* library = dlopen(api.library.c_str(), open_flags());
  if (library == nullptr) {
    const char* why = dlerror();
    throw Error("cannot load OpenSlide library " + api.library.string() + ": " +
                (why != nullptr ? why : "unknown reason") + ". " + kHowToInstall);
  }
  bind(library, api.library, "openslide_get_version", api.get_version);
  bind(library, api.library, "openslide_detect_vendor", api.detect_vendor);
  bind(library, api.library, "openslide_open", api.open);
  bind(library, api.library, "openslide_close", api.close);
  bind(library, api.library, "openslide_get_error", api.get_error);
  bind(library, api.library, "openslide_get_level_count", api.get_level_count);
  bind(library, api.library, "openslide_get_level_dimensions", api.get_level_dimensions);
  bind(library, api.library, "openslide_get_level_downsample", api.get_level_downsample);
  bind(library, api.library, "openslide_get_property_names", api.get_property_names);
  bind(library, api.library, "openslide_get_property_value", api.get_property_value);
  bind(library, api.library, "openslide_get_associated_image_names",
       api.get_associated_image_names);
  bind(library, api.library, "openslide_get_associated_image_dimensions",
       api.get_associated_image_dimensions);
  bind(library, api.library, "openslide_read_associated_image", api.read_associated_image);
  bind(library, api.library, "openslide_read_region", api.read_region);
  spdlog::debug("OpenSlide {} from {}", api.get_version(), api.library.string());
  return api;
}

}  // namespace

std::filesystem::path openslide_library_path() {
  if (const char* path = std::getenv("TESSEL_OPENSLIDE_LIBRARY"); path != nullptr && *path) {
    return path;
  }
  std::error_code ec;
  const auto program = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto beside = program.parent_path() / "libopenslide.so.1";
    if (std::filesystem::is_regular_file(beside, ec)) return beside;
  }
  return TESSEL_OPENSLIDE_LIBRARY;
}

const OpenSlideApi& openslide() {
  static const OpenSlideApi api = load();  // a throw leaves it unset: the next call tries again
  return api;
}

}  // namespace tessel::io
