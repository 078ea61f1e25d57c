# GDN_CXX_RUNTIME: what the C++ compiler links implicitly and the C compiler does not (with GCC:
# stdc++ and m). A C program that links libgdn.a needs them; gdn_static and gdn.pc pass them on.
set(GDN_CXX_RUNTIME "")
foreach(_gdn_lib IN LISTS CMAKE_CXX_IMPLICIT_LINK_LIBRARIES)
  if(NOT _gdn_lib IN_LIST CMAKE_C_IMPLICIT_LINK_LIBRARIES AND NOT _gdn_lib IN_LIST GDN_CXX_RUNTIME)
    list(APPEND GDN_CXX_RUNTIME ${_gdn_lib})
  endif()
endforeach()
