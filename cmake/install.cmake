# Installs libgdn with a CMake package (find_package(gdn) gives gdn::gdn and gdn::gdn_static)
# and a pkg-config file (gdn.pc).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS gdn gdn_static EXPORT gdnTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/gdn DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT gdnTargets NAMESPACE gdn:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/gdn)

configure_package_config_file(cmake/gdnConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/gdnConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/gdn)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/gdnConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/gdnConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/gdnConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/gdn)

set(GDN_PC_EXTRA_LIBS "-lpthread")
if(GDN_WITH_CUDA)
  set(GDN_PC_EXTRA_LIBS "${GDN_PC_EXTRA_LIBS} -lcudart")
endif()
configure_file(cmake/gdn.pc.in ${CMAKE_CURRENT_BINARY_DIR}/gdn.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/gdn.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
