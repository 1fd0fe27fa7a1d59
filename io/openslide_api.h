// OpenSlide 4, Tessel's slide library: libopenslide.so.1 from PyPI's openslide-bin wheel (its own
// dependencies built in), loaded at run time with its symbols kept to itself. Debian's libvips
// brings Debian's OpenSlide 3.4 (libopenslide.so.0) into the process through its openslide
// module; both export the same `openslide_*` names, so Tessel never links either by name: every
// call goes through this table, whose pointers come from the wheel's library alone (dlopen with
// RTLD_LOCAL | RTLD_DEEPBIND, so the library's calls to itself stay inside it too). Only io/
// calls OpenSlide, and only through here.
#pragma once

#include <cstdint>
#include <filesystem>

typedef struct _openslide openslide_t;  // NOLINT(modernize-use-using): must match openslide.h

namespace tessel::io {

// The part of OpenSlide's C API (openslide.h, 4.0) that Tessel uses.
struct OpenSlideApi {
  const char* (*get_version)();
  const char* (*detect_vendor)(const char* filename);
  openslide_t* (*open)(const char* filename);
  void (*close)(openslide_t* osr);
  const char* (*get_error)(openslide_t* osr);
  int32_t (*get_level_count)(openslide_t* osr);
  void (*get_level_dimensions)(openslide_t* osr, int32_t level, int64_t* w, int64_t* h);
  double (*get_level_downsample)(openslide_t* osr, int32_t level);
  const char* const* (*get_property_names)(openslide_t* osr);
  const char* (*get_property_value)(openslide_t* osr, const char* name);
  const char* const* (*get_associated_image_names)(openslide_t* osr);
  void (*get_associated_image_dimensions)(openslide_t* osr, const char* name, int64_t* w,
                                          int64_t* h);
  void (*read_associated_image)(openslide_t* osr, const char* name, uint32_t* dest);
  void (*read_region)(openslide_t* osr, uint32_t* dest, int64_t x, int64_t y, int32_t level,
                      int64_t w, int64_t h);

  std::filesystem::path library;  // the file it was loaded from
};

// The library, loaded on first use (thread-safe) and kept for the life of the process. Throws
// tessel::Error naming where it looked when the library is missing or is not an OpenSlide.
const OpenSlideApi& openslide();

// Where openslide() loads from: $TESSEL_OPENSLIDE_LIBRARY when set; else libopenslide.so.1 beside
// the running program (an installed Tessel); else the wheel's library in the environment the build
// was configured with (TESSEL_OPENSLIDE_LIBRARY, recorded by CMake from .venv).
std::filesystem::path openslide_library_path();

}  // namespace tessel::io
