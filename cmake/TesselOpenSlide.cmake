# OpenSlide 4, Tessel's slide library: libopenslide.so.1 of PyPI's openslide-bin wheel (in the
# project's .venv, scripts/setup; else in the python3 on PATH). Nothing links it: io/openslide_api
# loads it at run time from the path recorded here (or $TESSEL_OPENSLIDE_LIBRARY, or one beside
# the program), so its openslide_* symbols never meet those of Debian's OpenSlide 3.4, which
# Debian's libvips loads through its openslide module.
if(NOT TESSEL_OPENSLIDE_LIBRARY)
  file(GLOB _tessel_openslide_libraries
       "${PROJECT_SOURCE_DIR}/.venv/lib/python3*/site-packages/openslide_bin/libopenslide.so.1")
  if(_tessel_openslide_libraries)
    list(GET _tessel_openslide_libraries 0 _tessel_openslide_library)
  else()
    find_program(TESSEL_PYTHON NAMES python3 python)
    if(TESSEL_PYTHON)
      execute_process(
        COMMAND ${TESSEL_PYTHON} -c
                "import os, openslide_bin; print(os.path.join(os.path.dirname(openslide_bin.__file__), 'libopenslide.so.1'))"
        OUTPUT_VARIABLE _tessel_openslide_library OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    endif()
  endif()
  if(_tessel_openslide_library AND EXISTS "${_tessel_openslide_library}")
    set(TESSEL_OPENSLIDE_LIBRARY "${_tessel_openslide_library}" CACHE FILEPATH
        "OpenSlide 4's libopenslide.so.1 (openslide-bin wheel), loaded by tessel at run time")
  endif()
endif()
if(NOT TESSEL_OPENSLIDE_LIBRARY OR NOT EXISTS "${TESSEL_OPENSLIDE_LIBRARY}")
  message(FATAL_ERROR
    "OpenSlide 4 (libopenslide.so.1 of the openslide-bin wheel) was not found. Run scripts/setup "
    "(it installs the wheel into .venv), or point TESSEL_OPENSLIDE_LIBRARY at a libopenslide.so.1.")
endif()
message(STATUS "OpenSlide: ${TESSEL_OPENSLIDE_LIBRARY}")
