# install(EXPORT) + package config so that find_package(sprig) works.
include_guard(GLOBAL)
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(DIRECTORY "${PROJECT_SOURCE_DIR}/include/sprig" DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")
install(TARGETS sprig EXPORT sprigTargets)
if(TARGET sprig_dist)
  install(TARGETS sprig_dist EXPORT sprigTargets)
  set(SPRIG_HAS_DIST ON)
else()
  set(SPRIG_HAS_DIST OFF)
endif()
install(FILES "${PROJECT_SOURCE_DIR}/LICENSE" DESTINATION "${CMAKE_INSTALL_DOCDIR}")
set(SPRIG_CMAKE_DIR "${CMAKE_INSTALL_DATADIR}/cmake/sprig")
install(EXPORT sprigTargets NAMESPACE sprig:: DESTINATION "${SPRIG_CMAKE_DIR}")

configure_package_config_file("${PROJECT_SOURCE_DIR}/cmake/sprigConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/sprigConfig.cmake" INSTALL_DESTINATION "${SPRIG_CMAKE_DIR}")
# Header-only: the version file must not pin the consumer's pointer size.
write_basic_package_version_file("${PROJECT_BINARY_DIR}/sprigConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion ARCH_INDEPENDENT)
install(FILES "${PROJECT_BINARY_DIR}/sprigConfig.cmake" "${PROJECT_BINARY_DIR}/sprigConfigVersion.cmake"
  "${PROJECT_SOURCE_DIR}/cmake/SprigDispatch.cmake" DESTINATION "${SPRIG_CMAKE_DIR}")
