// Tessel's OpenSlide 4 (the openslide-bin wheel, io/openslide_api.h) in one process with Debian's
// OpenSlide 3.4, which this test links by name as any program would and which libvips loads for
// its openslideload. Both export openslide_*: each caller must reach its own library.
#include "io/openslide_api.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <link.h>
#include <openslide.h>
#include <vips/vips.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/slide.h"
#include "io/vips.h"
#include "tests/io/shared_slides.h"

namespace {

using tessel::io::OpenSlideApi;
using tessel::test::shared_slide;

// The file names of every shared object mapped into this process.
std::vector<std::string> loaded_libraries() {
  std::vector<std::string> names;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        static_cast<std::vector<std::string>*>(out)->emplace_back(info->dlpi_name);
        return 0;
      },
      &names);
  return names;
}

bool loaded(const std::string& file_name) {
  for (const std::string& name : loaded_libraries()) {
    if (std::filesystem::path(name).filename() == file_name) return true;
  }
  return false;
}

// The shared object that holds a function.
std::string library_of(const void* function) {
  Dl_info info{};
  if (dladdr(function, &info) == 0 || info.dli_fname == nullptr) return "(unknown)";
  return std::filesystem::path(info.dli_fname).filename().string();
}

TEST(OpenSlideApi, IsOpenSlide4FromTheOpenslideBinWheel) {
  const OpenSlideApi& api = tessel::io::openslide();
  EXPECT_EQ(std::string(api.get_version()).substr(0, 2), "4.") << api.get_version();
  EXPECT_EQ(api.library.filename(), "libopenslide.so.1");
  EXPECT_EQ(library_of(reinterpret_cast<const void*>(api.open)), "libopenslide.so.1");
}

TEST(OpenSlideApi, LivesBesideDebiansOpenSlideAndEachCallerReachesItsOwn) {
  tessel::io::start_vips();
  const std::string path = shared_slide("cmu-1-small-region.svs");
  // libvips' openslideload, through Debian's OpenSlide (its vips-openslide module).
  VipsImage* through_vips = nullptr;
  ASSERT_EQ(vips_openslideload(path.c_str(), &through_vips, nullptr), 0)
      << tessel::io::vips_error_text();
  const OpenSlideApi& api = tessel::io::openslide();
  EXPECT_TRUE(loaded("libopenslide.so.0"));
  EXPECT_TRUE(loaded("libopenslide.so.1"));
  // A call by name reaches Debian's; the table reaches the wheel's.
  EXPECT_EQ(std::string(openslide_get_version()), "3.4.1");
  EXPECT_EQ(library_of(reinterpret_cast<const void*>(&openslide_get_version)), "libopenslide.so.0");
  EXPECT_EQ(std::string(api.get_version()).substr(0, 2), "4.");
  // The wheel's library calls its own openslide_get_error and level functions inside
  // openslide_open and read_region: were they bound to Debian's (loaded first, global), its
  // handles would be misread. Both read the same pixels.
  const tessel::io::Slide slide(path);
  ASSERT_EQ(slide.level_count(), 1);
  EXPECT_EQ(slide.level(0).width, through_vips->Xsize);
  EXPECT_EQ(slide.level(0).height, through_vips->Ysize);
  const tessel::io::RgbImage region = slide.read_region(0, 1000, 1200, 1, 1);
  double* rgba = nullptr;
  int bands = 0;
  ASSERT_EQ(vips_getpoint(through_vips, &rgba, &bands, 1000, 1200, nullptr), 0);
  ASSERT_EQ(bands, 4);
  EXPECT_EQ(region.pixels,
            (std::vector<uint8_t>{static_cast<uint8_t>(rgba[0]), static_cast<uint8_t>(rgba[1]),
                                  static_cast<uint8_t>(rgba[2])}));
  g_free(rgba);
  g_object_unref(through_vips);
}

TEST(OpenSlideApi, TheLibraryPathCanBeGivenInTheEnvironment) {
  ASSERT_EQ(setenv("TESSEL_OPENSLIDE_LIBRARY", "/no/such/libopenslide.so.1", 1), 0);
  EXPECT_EQ(tessel::io::openslide_library_path(), "/no/such/libopenslide.so.1");
  ASSERT_EQ(unsetenv("TESSEL_OPENSLIDE_LIBRARY"), 0);
  EXPECT_EQ(tessel::io::openslide_library_path().filename(), "libopenslide.so.1");
}

}  // namespace
