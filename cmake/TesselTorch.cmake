# LibTorch 2, found without flags: Torch_DIR or CMAKE_PREFIX_PATH when given; else the torch wheel
# in the project's .venv (scripts/setup); else the torch of the python3 on PATH (the GPU machines,
# a user's own environment). The CPU and CUDA builds are one build: a CUDA LibTorch brings its
# CUDA libraries, and everything runs on a machine without a GPU.
set(TESSEL_MIN_TORCH_VERSION 2.4)

if(NOT Torch_DIR)
  file(GLOB _tessel_torch_dirs LIST_DIRECTORIES true
       "${PROJECT_SOURCE_DIR}/.venv/lib/python3*/site-packages/torch/share/cmake/Torch")
  if(_tessel_torch_dirs)
    list(GET _tessel_torch_dirs 0 _tessel_torch_dir)
    message(STATUS "LibTorch: the project's .venv")
  else()
    find_program(TESSEL_PYTHON NAMES python3 python)
    if(TESSEL_PYTHON)
      execute_process(
        COMMAND ${TESSEL_PYTHON} -c
                "import os, torch.utils; print(os.path.join(torch.utils.cmake_prefix_path, 'Torch'))"
        OUTPUT_VARIABLE _tessel_torch_dir OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
      if(_tessel_torch_dir)
        message(STATUS "LibTorch: the torch of ${TESSEL_PYTHON}")
      endif()
    endif()
  endif()
  if(_tessel_torch_dir AND EXISTS "${_tessel_torch_dir}/TorchConfig.cmake")
    set(Torch_DIR "${_tessel_torch_dir}" CACHE PATH "LibTorch's CMake package (TorchConfig.cmake)")
  endif()
endif()

# A CUDA LibTorch's CMake package needs the CUDA toolkit (it fails with a bare message without
# one): say what is missing first.
if(Torch_DIR AND EXISTS "${Torch_DIR}/../Caffe2/Caffe2Config.cmake")
  file(STRINGS "${Torch_DIR}/../Caffe2/Caffe2Config.cmake" _tessel_cuda_torch
       REGEX "^if\\(ON AND NOT CAFFE2_USE_CUDA\\)")
  if(_tessel_cuda_torch)
    if(NOT CUDAToolkit_ROOT AND NOT DEFINED ENV{CUDAToolkit_ROOT} AND EXISTS /usr/local/cuda)
      set(CUDAToolkit_ROOT /usr/local/cuda)
    endif()
    find_package(CUDAToolkit QUIET)
    if(NOT CUDAToolkit_FOUND)
      message(FATAL_ERROR
        "The LibTorch at ${Torch_DIR} is a CUDA build, and its CMake package needs the CUDA "
        "toolkit (nvcc and headers), which was not found. Install CUDA 13 at /usr/local/cuda, or "
        "set CUDAToolkit_ROOT.")
    endif()
  endif()
endif()

# Tessel compiles no CUDA code of its own, so the architectures are only for LibTorch's CMake
# package, which would otherwise try to build and run a GPU probe at configure time.
if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  set(TORCH_CUDA_ARCH_LIST "9.0")
endif()
find_package(Torch QUIET)
if(NOT Torch_FOUND)
  message(FATAL_ERROR
    "LibTorch was not found. Run scripts/setup (it installs the pinned torch wheel into .venv), "
    "or point Torch_DIR at a LibTorch ${TESSEL_MIN_TORCH_VERSION} or newer "
    "(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' + /Torch).")
endif()
if(Torch_VERSION VERSION_LESS TESSEL_MIN_TORCH_VERSION)
  message(FATAL_ERROR
    "The LibTorch at ${Torch_DIR} is version ${Torch_VERSION}; Tessel needs "
    "${TESSEL_MIN_TORCH_VERSION} or newer. Run scripts/setup (it installs the pinned torch wheel "
    "into .venv), or point Torch_DIR at a newer LibTorch.")
endif()
if(TARGET torch_cuda)
  set(TESSEL_TORCH_CUDA ON)
else()
  set(TESSEL_TORCH_CUDA OFF)
endif()
message(STATUS "LibTorch ${Torch_VERSION} at ${Torch_DIR} (CUDA: ${TESSEL_TORCH_CUDA})")

# LibTorch's headers come last in the search path (-idirafter): the wheel carries its own fmt (12),
# which must not shadow the fmt (9) that spdlog was built with. Searched after the system's, they
# are still system headers, so -Werror applies to our code only.
set(_tessel_torch_include_dirs "")
foreach(_target torch torch_library torch_cpu torch_cuda torch_cpu_library torch_cuda_library c10
                c10_cuda)
  if(TARGET ${_target})
    get_target_property(_dirs ${_target} INTERFACE_INCLUDE_DIRECTORIES)
    if(_dirs)
      list(APPEND _tessel_torch_include_dirs ${_dirs})
      set_target_properties(${_target} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "")
    endif()
  endif()
endforeach()
list(APPEND _tessel_torch_include_dirs ${TORCH_INCLUDE_DIRS})
list(FILTER _tessel_torch_include_dirs EXCLUDE REGEX "^\\$<|^/usr/local/cuda|^$")
list(REMOVE_DUPLICATES _tessel_torch_include_dirs)
foreach(_dir ${_tessel_torch_include_dirs})
  target_compile_options(torch INTERFACE "SHELL:-idirafter ${_dir}")
endforeach()

# The torch wheel's libtorch.so exports a copy of std::filesystem (linked statically from its
# build's older libstdc++). Where it wins the symbol lookup over the system's libstdc++, it
# crashes (std::filesystem::remove_all jumped to address 0 in every test that removed a folder).
# Every program lists the system's libstdc++ first among its libraries, so its copy wins. That
# needs a shared libstdc++: a compiler that links it statically (the GPU machines' /opt/gcc)
# would bind those calls to libtorch's copy, silently.
execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libstdc++.so
                OUTPUT_VARIABLE _tessel_libstdcxx OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT IS_ABSOLUTE "${_tessel_libstdcxx}")
  message(FATAL_ERROR
    "${CMAKE_CXX_COMPILER} has no shared libstdc++ (libstdc++.so), and the torch wheel's "
    "libtorch.so exports a broken copy of std::filesystem that programs linked with a static "
    "libstdc++ call instead of their own. Use a compiler with a shared libstdc++, for example "
    "CXX=/usr/bin/g++ (configure a fresh build folder).")
endif()
string(APPEND CMAKE_EXE_LINKER_FLAGS " -Wl,--push-state,--no-as-needed,-lstdc++,--pop-state")
