# What `cmake --install BUILD --prefix P` puts under P, all in this file
# (docs/decisions.md, "Installing (issue 17)"):
#
#   bin/attune                   the CLI (RUNPATH $ORIGIN/../lib)
#   lib/libattune.so             every attune library and the C API
#   include/attune/...           the public headers at their source-relative paths
#   lib/cmake/attune/            find_package(attune): attune::attune, attune::attune_c
#   lib/pkgconfig/attune.pc      pkg-config --cflags --libs attune
#
# Components: `runtime` (the CLI and the library, what tools/gpu_bundle.sh
# takes) and `development` (headers, CMake package, pkg-config file). The GPU
# test programs (component gpu_tests, tests/runtime) stay out of a plain
# install. Every installed file is relocatable: the tree works wherever it is
# moved. tests/install checks all of it from an outside project.
include(CMakePackageConfigHelpers)

foreach(dir BINDIR LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${dir}}")
    message(FATAL_ERROR "CMAKE_INSTALL_${dir}: got '${CMAKE_INSTALL_${dir}}'; expected a path relative to the "
                        "prefix (the installed tree is relocatable)")
  endif()
endforeach()
# A folder of its own: the source-relative names ("core/problem.h",
# "generated/kernel_ids.h") are too generic for a shared include directory.
set(ATTUNE_INSTALL_INCLUDEDIR ${CMAKE_INSTALL_INCLUDEDIR}/attune)
set(ATTUNE_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/attune)

# The public headers: runtime/runtime.h, runtime/attune_c.h and every project
# header they include (g++ -std=c++20 -MM -I. -IBUILD runtime/runtime.h),
# installed at the paths they are included by, so they need no change. A
# header missing here fails the install.consumer test.
set(ATTUNE_PUBLIC_HEADERS
    core/append_problem.h
    core/dtype.h
    core/error.h
    core/problem.h
    core/problem_key.h
    emulator/counters.h
    emulator/emulator.h
    emulator/launch.h
    emulator/report.h
    generator/kernel_registry.h
    generator/variants.h
    runtime/attune_c.h
    runtime/dispatch/dispatcher.h
    runtime/plan.h
    runtime/runtime.h
    templates/mask.h
    templates/primitives/config.h)
# ... and those attune-gen writes into the build tree, included as "generated/...".
set(ATTUNE_PUBLIC_GENERATED_HEADERS generated/kernel_ids.h)
foreach(header ${ATTUNE_PUBLIC_HEADERS})
  get_filename_component(dir ${header} DIRECTORY)
  install(FILES ${PROJECT_SOURCE_DIR}/${header} DESTINATION ${ATTUNE_INSTALL_INCLUDEDIR}/${dir} COMPONENT development)
endforeach()
foreach(header ${ATTUNE_PUBLIC_GENERATED_HEADERS})
  get_filename_component(dir ${header} DIRECTORY)
  install(FILES ${CMAKE_BINARY_DIR}/${header} DESTINATION ${ATTUNE_INSTALL_INCLUDEDIR}/${dir} COMPONENT development)
endforeach()

# Two targets over the one libattune.so: attune::attune_c is the library with
# the include directory, all a C program needs; attune::attune adds C++20 for
# the C++ headers, which a C-only project could not satisfy. The same names
# exist in this build as aliases.
set_target_properties(attune_shared PROPERTIES EXPORT_NAME attune_c)
add_library(attune_cpp INTERFACE)
set_target_properties(attune_cpp PROPERTIES EXPORT_NAME attune)
target_link_libraries(attune_cpp INTERFACE attune_shared)
target_compile_features(attune_cpp INTERFACE cxx_std_20)
add_library(attune::attune ALIAS attune_cpp)
add_library(attune::attune_c ALIAS attune_shared)

install(TARGETS attune_shared attune_cpp EXPORT attuneTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime
        INCLUDES DESTINATION ${ATTUNE_INSTALL_INCLUDEDIR})
# The sanitizer build has no CLI.
if(TARGET attune)
  install(TARGETS attune RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
endif()

# The files below are written to a build folder that find_package never
# searches, so a build tree on CMAKE_PREFIX_PATH is not taken for an install.
set(staged ${CMAKE_BINARY_DIR}/install-files)
install(EXPORT attuneTargets NAMESPACE attune:: DESTINATION ${ATTUNE_INSTALL_CMAKEDIR} COMPONENT development)
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/attuneConfig.cmake.in ${staged}/attuneConfig.cmake
                              INSTALL_DESTINATION ${ATTUNE_INSTALL_CMAKEDIR})
# 0.x: a minor release may change the API, so only the same minor version matches.
write_basic_package_version_file(${staged}/attuneConfigVersion.cmake VERSION ${PROJECT_VERSION}
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${staged}/attuneConfig.cmake ${staged}/attuneConfigVersion.cmake
        DESTINATION ${ATTUNE_INSTALL_CMAKEDIR} COMPONENT development)

# pkg-config: paths relative to the .pc file's own folder (${pcfiledir}), so
# the file stays right under whatever --prefix the install is given.
file(RELATIVE_PATH ATTUNE_PC_PREFIX_FROM_PCFILEDIR /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
string(REGEX REPLACE "/$" "" ATTUNE_PC_PREFIX_FROM_PCFILEDIR "${ATTUNE_PC_PREFIX_FROM_PCFILEDIR}")
configure_file(${CMAKE_CURRENT_LIST_DIR}/attune.pc.in ${staged}/attune.pc @ONLY)
install(FILES ${staged}/attune.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT development)
