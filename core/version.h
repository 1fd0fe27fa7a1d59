// Tessel's own version, as stamped by CMake (project(tessel VERSION ...)).
#pragma once

namespace tessel {

inline constexpr const char* kVersion = TESSEL_VERSION;

}  // namespace tessel
