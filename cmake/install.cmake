# Installs libgdn with a CMake package and a pkg-config file, both relocatable (the prefix may
# move after installation):
#   find_package(gdn)   gdn::gdn (shared), gdn::gdn_static, gdn::gdn_ggml (with the ggml integration)
#   pkg-config gdn      -lgdn; --static adds what a static link needs (C++ runtime, threads, CUDA)
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(GDN_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/gdn)
install(TARGETS gdn EXPORT gdnTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS gdn_static EXPORT gdnStaticTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/gdn DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT gdnTargets NAMESPACE gdn:: DESTINATION ${GDN_CMAKE_DIR})
install(EXPORT gdnStaticTargets NAMESPACE gdn:: DESTINATION ${GDN_CMAKE_DIR})

configure_package_config_file(cmake/gdnConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/gdnConfig.cmake
  INSTALL_DESTINATION ${GDN_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/gdnConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/gdnConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/gdnConfigVersion.cmake
  DESTINATION ${GDN_CMAKE_DIR})

# A tree built for one target (scripts/run.sh builds gdn-ops) still installs: whatever uses the
# static library also links the shared ones (their objects are compiled already).
add_dependencies(gdn_static gdn)
if(TARGET gdn_ggml_static)
  add_dependencies(gdn_ggml_static gdn_ggml)
endif()

# gdn.pc: the prefix found from the file's own place (${pcfiledir}), so the tree may move.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(GDN_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH _gdn_pc_up "/root/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/root")
  string(REGEX REPLACE "/$" "" _gdn_pc_up "${_gdn_pc_up}")
  set(GDN_PC_PREFIX "\${pcfiledir}/${_gdn_pc_up}")
endif()
foreach(_dir LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${_dir}}")
    set(GDN_PC_${_dir} "${CMAKE_INSTALL_${_dir}}")
  else()
    set(GDN_PC_${_dir} "\${prefix}/${CMAKE_INSTALL_${_dir}}")
  endif()
endforeach()
# What a static link adds: the C++ runtime (the C compiler driver does not add it), threads,
# and for a CUDA build the static CUDA runtime with what it needs.
set(GDN_PC_LIBS_PRIVATE "")
foreach(_lib IN LISTS GDN_CXX_RUNTIME)
  string(APPEND GDN_PC_LIBS_PRIVATE " -l${_lib}")
endforeach()
if(NOT "m" IN_LIST GDN_CXX_RUNTIME)
  string(APPEND GDN_PC_LIBS_PRIVATE " -lm")
endif()
string(APPEND GDN_PC_LIBS_PRIVATE " -pthread")
if(GDN_WITH_CUDA)
  string(APPEND GDN_PC_LIBS_PRIVATE " -L${CUDAToolkit_LIBRARY_DIR} -lcudart_static -ldl -lrt")
endif()
string(STRIP "${GDN_PC_LIBS_PRIVATE}" GDN_PC_LIBS_PRIVATE)
configure_file(cmake/gdn.pc.in ${CMAKE_CURRENT_BINARY_DIR}/gdn.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/gdn.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
