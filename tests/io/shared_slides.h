// The real slide files of ../shared/slides (TESSEL_SHARED_SLIDES, set in tests/io/CMakeLists.txt).
#pragma once

#include <filesystem>
#include <string>

namespace tessel::test {

inline std::string shared_slide(const std::string& name) {
  return (std::filesystem::path(TESSEL_SHARED_SLIDES) / name).string();
}

}  // namespace tessel::test
