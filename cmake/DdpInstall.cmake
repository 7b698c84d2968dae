# Installs ddp so that a user's project can do
#   find_package(ddp REQUIRED)
#   target_link_libraries(app PRIVATE ddp::ddp)   # the layers comm and parallel, amp, nn, optim, timeline
#   target_link_libraries(app PRIVATE ddp::formats ddp::snapshot ddp::hvd ddp::data ddp::training)
# and launch it with the installed bin/ddprun (ddp::ddprun); bin/ddp-export
# (ddp::ddp-export) turns its snapshots into torch.save or safetensors files.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS ddp ddp_base ddp_comm ddp_parallel ddp_launch ddp_amp ddp_nn ddp_optim ddp_timeline ddp_formats ddp_snapshot ddp_hvd
  ddp_elastic ddp_data ddp_training EXPORT ddpTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# The launcher and the exporter, as ddp::ddprun and ddp::ddp-export for a
# user's CMake ($<TARGET_FILE:ddp::ddprun>); their LibTorch found where the
# build found it (a wheel's lib directory stays in their run path; Debian's
# is on the loader's own path).
set_target_properties(ddprun ddp-export PROPERTIES INSTALL_RPATH_USE_LINK_PATH TRUE)
install(TARGETS ddprun ddp-export EXPORT ddpTargets RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
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
