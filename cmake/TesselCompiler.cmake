# Compiler set-up shared by every Tessel target.

find_program(CCACHE_PROGRAM ccache)
if(CCACHE_PROGRAM)
  # PCH needs these sloppiness settings for ccache to hit; base_dir makes hits survive a fresh
  # clone in another directory (CI).
  set(_ccache ${CMAKE_COMMAND} -E env
      "CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime"
      "CCACHE_BASEDIR=${CMAKE_SOURCE_DIR}" "CCACHE_NOHASHDIR=true" ${CCACHE_PROGRAM})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${_ccache})
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${_ccache})
endif()

# Warnings are errors with the compiler CI uses (Debian's GCC 12). Elsewhere (scripts/gpu-check
# turns it off) a newer compiler's new false positives must not stop a build: GCC 13 at -O3
# flagged libstdc++'s own vector<bool> code inlined into LibTorch's autograd headers.
option(TESSEL_WERROR "Treat the project's warnings as errors" ON)

# tessel_target(NAME): the project's own warnings (errors) and include root.
function(tessel_target name)
  target_compile_options(${name} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${TESSEL_WERROR}>>:-Werror>)
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR})
  target_compile_features(${name} PUBLIC cxx_std_20)
endfunction()

# tessel_torch_pch(NAME): reuse one precompiled header of the LibTorch pieces we use. Only
# targets that include LibTorch call this; the first one builds the PCH, the others reuse it.
function(tessel_torch_pch name)
  if(NOT TARGET tessel_pch)
    add_library(tessel_pch OBJECT ${PROJECT_SOURCE_DIR}/cmake/pch_anchor.cpp)
    target_link_libraries(tessel_pch PUBLIC torch)
    target_compile_features(tessel_pch PUBLIC cxx_std_20)
    target_precompile_headers(tessel_pch PRIVATE ${PROJECT_SOURCE_DIR}/cmake/torch_pch.h)
  endif()
  target_precompile_headers(${name} REUSE_FROM tessel_pch)
endfunction()
