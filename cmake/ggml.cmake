# The ggml integration (integrations/ggml), the GGML backend of gdn-ops and their tests are
# built when ggml is found: find_package(ggml), looking first in GDN_GGML_DIR (a prefix holding
# lib/cmake/ggml, e.g. what scripts/setup-ggml.sh prints). GDN_WITH_GGML says whether they are.
set(GDN_GGML AUTO CACHE STRING "Build the ggml integration: AUTO (when ggml is found), ON, OFF")
set_property(CACHE GDN_GGML PROPERTY STRINGS AUTO ON OFF)
set(GDN_GGML_DIR "" CACHE PATH "Prefix of a ggml install (holding lib/cmake/ggml); scripts/setup-ggml.sh prints one")

set(GDN_WITH_GGML OFF)
if(NOT GDN_GGML STREQUAL "OFF")
  set(_gdn_ggml_hints "")
  if(GDN_GGML_DIR)
    list(APPEND _gdn_ggml_hints ${GDN_GGML_DIR} ${GDN_GGML_DIR}/lib/cmake/ggml)
  endif()
  find_package(ggml CONFIG QUIET HINTS ${_gdn_ggml_hints})
  if(ggml_FOUND AND TARGET ggml::ggml)
    set(GDN_WITH_GGML ON)
    message(STATUS "gdn: ggml ${GGML_VERSION} found (${ggml_DIR}): building integrations/ggml, the GGML backend of gdn-ops and their tests")
  elseif(GDN_GGML STREQUAL "ON")
    message(FATAL_ERROR "gdn: GDN_GGML=ON but no ggml was found (GDN_GGML_DIR = \"${GDN_GGML_DIR}\"); "
                        "scripts/setup-ggml.sh installs a pinned one and prints the folder to pass as -DGDN_GGML_DIR")
  else()
    message(STATUS "gdn: ggml not found: skipping integrations/ggml, the GGML backend of gdn-ops and their tests "
                   "(scripts/setup-ggml.sh installs a pinned ggml; pass -DGDN_GGML_DIR=<the folder it prints>)")
  endif()
endif()
