# The ggml integration (integrations/ggml), the GGML backend of gdn-ops and their tests are
# built when ggml is found: find_package(ggml), looking first in GDN_GGML_DIR (a prefix holding
# lib/cmake/ggml, e.g. what scripts/setup-ggml.sh prints). GDN_WITH_GGML says whether they are.
set(GDN_GGML AUTO CACHE STRING "Build the ggml integration: AUTO (when ggml is found), ON, OFF")
set_property(CACHE GDN_GGML PROPERTY STRINGS AUTO ON OFF)
set(GDN_GGML_DIR "" CACHE PATH "Prefix of a ggml install (holding lib/cmake/ggml); scripts/setup-ggml.sh prints one")

set(GDN_WITH_GGML OFF)
set(GDN_GGML_WHY "GDN_GGML=OFF")  # why it is not built, for the summary
if(NOT GDN_GGML STREQUAL "OFF")
  set(_gdn_ggml_hints "")
  if(GDN_GGML_DIR)
    list(APPEND _gdn_ggml_hints ${GDN_GGML_DIR} ${GDN_GGML_DIR}/lib/cmake/ggml)
  endif()
  find_package(ggml CONFIG QUIET HINTS ${_gdn_ggml_hints})
  if(ggml_FOUND AND TARGET ggml::ggml)
    set(GDN_WITH_GGML ON)
    # ggml's libraries have no SONAME: linked by path, as its imported targets are, a library
    # records the build machine's absolute path as its dependency. gdn_ggml_libraries links them
    # by name (-L<dir> -lggml -lggml-base): the dependency is then the file name, found beside
    # the library ($ORIGIN), on the loader's path, or (in this build tree) through the RUNPATH.
    add_library(gdn_ggml_libraries INTERFACE)
    target_include_directories(gdn_ggml_libraries INTERFACE ${GGML_INCLUDE_DIR})
    target_link_directories(gdn_ggml_libraries INTERFACE ${GGML_LIB_DIR})
    target_link_libraries(gdn_ggml_libraries INTERFACE ggml ggml-base)
    list(APPEND CMAKE_BUILD_RPATH ${GGML_LIB_DIR})
    message(STATUS "gdn: ggml ${GGML_VERSION} found (${ggml_DIR}): building integrations/ggml, the GGML backend of gdn-ops and their tests")
  elseif(GDN_GGML STREQUAL "ON")
    message(FATAL_ERROR "gdn: GDN_GGML=ON but no ggml was found (GDN_GGML_DIR = \"${GDN_GGML_DIR}\"); "
                        "scripts/setup-ggml.sh installs a pinned one and prints the folder to pass as -DGDN_GGML_DIR")
  else()
    set(GDN_GGML_WHY "no ggml found: pass -DGDN_GGML_DIR=<prefix>")
    message(STATUS "gdn: ggml not found: skipping integrations/ggml, the GGML backend of gdn-ops and their tests "
                   "(scripts/setup-ggml.sh installs a pinned ggml; pass -DGDN_GGML_DIR=<the folder it prints>)")
  endif()
endif()
