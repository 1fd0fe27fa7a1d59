# The engine-only build's third-party code (-DTESSEL_ENGINE_ONLY=ON): spdlog with fmt, CLI11 and
# nlohmann/json as header-only libraries, and GoogleTest from its sources, all from one folder
# that scripts/pack-engine-deps writes from the Debian packages (about 6 MiB of the 64 MiB a
# GPU machine may be sent). Always from that folder, so the build is the same on every machine:
# what a cluster admin builds on a bare GPU node with a compiler, CMake and a LibTorch.
set(TESSEL_ENGINE_DEPS "${PROJECT_SOURCE_DIR}/.engine-deps" CACHE PATH
    "The folder scripts/pack-engine-deps wrote")
if(NOT EXISTS "${TESSEL_ENGINE_DEPS}/include/spdlog/spdlog.h")
  message(FATAL_ERROR
    "The engine-only build takes spdlog, fmt, CLI11, nlohmann/json and GoogleTest from "
    "${TESSEL_ENGINE_DEPS}, which has none. Run scripts/pack-engine-deps where the Debian "
    "packages are (scripts/setup installs them) and bring that folder along, or set "
    "TESSEL_ENGINE_DEPS.")
endif()

# Before LibTorch's headers (-idirafter): the wheel's own fmt is another version.
add_library(tessel_engine_deps INTERFACE)
target_include_directories(tessel_engine_deps SYSTEM INTERFACE "${TESSEL_ENGINE_DEPS}/include")
target_compile_definitions(tessel_engine_deps INTERFACE FMT_HEADER_ONLY=1 SPDLOG_FMT_EXTERNAL=1)
foreach(_name spdlog::spdlog nlohmann_json::nlohmann_json CLI11::CLI11)
  add_library(${_name} ALIAS tessel_engine_deps)
endforeach()

if(TESSEL_TESTS)
  set(BUILD_GMOCK OFF CACHE BOOL "" FORCE)
  set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
  add_subdirectory("${TESSEL_ENGINE_DEPS}/googletest" "${CMAKE_BINARY_DIR}/googletest"
                   EXCLUDE_FROM_ALL SYSTEM)
  if(NOT TARGET GTest::gtest)  # googletest 1.11 and later define them
    add_library(GTest::gtest ALIAS gtest)
    add_library(GTest::gtest_main ALIAS gtest_main)
  endif()
endif()
