# Installs ddp so that a user's project can do
#   find_package(ddp REQUIRED)
#   target_link_libraries(app PRIVATE ddp::ddp)   # the layers comm and parallel, amp, nn, optim, timeline
#   target_link_libraries(app PRIVATE ddp::formats ddp::snapshot ddp::hvd ddp::data ddp::training)
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS ddp ddp_base ddp_comm ddp_parallel ddp_launch ddp_amp ddp_nn ddp_optim ddp_timeline ddp_formats ddp_snapshot ddp_hvd
  ddp_elastic ddp_data ddp_training EXPORT ddpTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# Internal headers stay out (Note [The launcher's internal headers] in
# ddp/launch.hpp).
install(DIRECTORY include/ddp include/moved/ddp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  REGEX "ddp/launch/child_process\\.hpp$" EXCLUDE)
install(EXPORT ddpTargets NAMESPACE ddp::
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ddp)

configure_package_config_file(cmake/ddpConfig.cmake.in
  ${PROJECT_BINARY_DIR}/ddpConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ddp)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/ddpConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/ddpConfig.cmake
              ${PROJECT_BINARY_DIR}/ddpConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ddp)
