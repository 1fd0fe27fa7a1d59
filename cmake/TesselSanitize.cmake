# Sanitizer builds. TESSEL_SANITIZE=address,undefined instruments every target of the build
# (make test-asan); TESSEL_FUZZ adds libFuzzer's coverage instrumentation, for the harnesses in
# tests/fuzz (make fuzz-smoke, scripts/fuzz). LibTorch, HDF5, OpenSlide and yaml-cpp stay as
# Debian and the wheel built them: not instrumented, but their memory is ASan's.
if(TESSEL_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR
      "TESSEL_FUZZ needs clang (libFuzzer); ${CMAKE_CXX_COMPILER} is ${CMAKE_CXX_COMPILER_ID}. "
      "Configure a fresh build folder with CC=clang CXX=clang++ (scripts/setup installs them).")
  endif()
  if(NOT TESSEL_SANITIZE)
    set(TESSEL_SANITIZE address,undefined)
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()
if(TESSEL_SANITIZE)
  # A UBSan report stops the program (a finding, a failed test) instead of scrolling past.
  add_compile_options(-fsanitize=${TESSEL_SANITIZE} -fno-sanitize-recover=all
    -fno-omit-frame-pointer)
  add_link_options(-fsanitize=${TESSEL_SANITIZE})
endif()
