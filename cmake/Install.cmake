# `cmake --install build [--prefix P]`: Trident as a CMake package that an outside project uses with
#   find_package(Trident 0.1 REQUIRED)
#   target_link_libraries(app PRIVATE Trident::trident)
#
# NOTE [Installed package]: what lands under the prefix --
#   include/trident/   every public header, in the source tree's folder layout (core/, autograd/,
#                      ops/ with ops/cpu/ and ops/math/, nn/, ...; data/ when built), trident.h and
#                      the generated trident_config.h. Headers include each other as "core/tensor.h",
#                      so include/trident is on the include path (as is include/, for
#                      <trident/trident.h>).
#   lib/libtrident.a   the library (static unless BUILD_SHARED_LIBS).
#   lib/cmake/Trident/ TridentConfig.cmake, TridentConfigVersion.cmake (same major.minor: 0.x
#                      releases may break the API), TridentTargets*.cmake, and
#                      TridentEnableCUDA.cmake (trident_enable_cuda(), for a project's own .cu
#                      files: the CUDA dialect and flags Trident's are compiled with).
# The exported target Trident::trident carries the library's public compile options -- among them
# NOTE [CPU ISA]'s -march flag, so user code is compiled for the same ISA as the headers it
# inlines -- and C++20. Its link dependencies are re-found by TridentConfig.cmake on the using
# machine rather than baked in as paths: Threads, OpenMP and nlohmann-json by name, OpenBLAS
# (Trident::openblas) by the same search as cmake/Dependencies.cmake starting where the build
# found it, and MPI (MPI::MPI_CXX), CUDA (Trident::cuda_deps: cudart, cuBLAS(Lt), cuDNN, NCCL) and
# the data libraries (Trident::data_deps: PCRE2, zlib) only when this build had them. That is why
# CMakeLists.txt links trident_openblas & co. through $<BUILD_INTERFACE:...> and names the
# Trident::* targets in $<INSTALL_INTERFACE:...>. scripts/test-example.sh (ctest
# examples.custom_op) installs into a scratch prefix and builds examples/custom_op against it.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(TRIDENT_INSTALL_INCLUDEDIR ${CMAKE_INSTALL_INCLUDEDIR}/trident)
set(TRIDENT_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/Trident)

target_include_directories(trident PUBLIC
  $<INSTALL_INTERFACE:${TRIDENT_INSTALL_INCLUDEDIR}>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
# The headers are C++20; a user's target gets the standard with the library.
target_compile_features(trident PUBLIC cxx_std_20)

set(_trident_header_dirs core autograd ops nn parallel models)
if(TRIDENT_HAVE_DATA)
  list(APPEND _trident_header_dirs data)
endif()
foreach(_dir IN LISTS _trident_header_dirs)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${_dir}/ DESTINATION ${TRIDENT_INSTALL_INCLUDEDIR}/${_dir}
    COMPONENT devel FILES_MATCHING PATTERN "*.h" PATTERN "*.cuh")
endforeach()
install(FILES ${PROJECT_SOURCE_DIR}/trident.h ${PROJECT_BINARY_DIR}/generated/trident_config.h
  DESTINATION ${TRIDENT_INSTALL_INCLUDEDIR} COMPONENT devel)

install(TARGETS trident EXPORT TridentTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT devel
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT devel
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT devel)
install(EXPORT TridentTargets NAMESPACE Trident:: DESTINATION ${TRIDENT_INSTALL_CMAKEDIR} COMPONENT devel)

# Where this build found its dependencies: the config searches there first.
get_filename_component(TRIDENT_OPENBLAS_LIBDIR "${TRIDENT_OPENBLAS_LIB}" DIRECTORY)
if(TRIDENT_HAVE_CUDA)
  get_filename_component(TRIDENT_CUDNN_LIBDIR "${TRIDENT_CUDNN_LIB}" DIRECTORY)
  get_filename_component(TRIDENT_NCCL_LIBDIR "${TRIDENT_NCCL_LIB}" DIRECTORY)
endif()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/TridentConfig.cmake.in
  ${PROJECT_BINARY_DIR}/TridentConfig.cmake
  INSTALL_DESTINATION ${TRIDENT_INSTALL_CMAKEDIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/TridentConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/TridentConfig.cmake ${PROJECT_BINARY_DIR}/TridentConfigVersion.cmake
  ${PROJECT_SOURCE_DIR}/cmake/TridentEnableCUDA.cmake DESTINATION ${TRIDENT_INSTALL_CMAKEDIR} COMPONENT devel)
