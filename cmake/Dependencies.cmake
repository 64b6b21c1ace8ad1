# Finds what Trident builds against. Nothing is downloaded: scripts/setup.sh installs the
# Debian packages; CUDA, cuDNN and NCCL are found where they are installed.

find_package(Threads REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS CXX)

# --- OpenBLAS (CPU GEMM) ----------------------------------------------------------------
# Debian installs the pthread flavour under an alternatives directory; OPENBLAS_ROOT points
# at any other install (for example a static copy carried to a machine without Debian's).
find_path(TRIDENT_OPENBLAS_INCLUDE cblas.h
  HINTS ${OPENBLAS_ROOT} ENV OPENBLAS_ROOT
  PATH_SUFFIXES include include/openblas x86_64-linux-gnu/openblas-pthread include/x86_64-linux-gnu/openblas-pthread
  PATHS /usr/include /usr/local/include
  NO_DEFAULT_PATH)
find_library(TRIDENT_OPENBLAS_LIB NAMES openblas
  HINTS ${OPENBLAS_ROOT} ENV OPENBLAS_ROOT
  PATH_SUFFIXES lib lib64 x86_64-linux-gnu/openblas-pthread
  PATHS /usr/lib /usr/local/lib)
if(NOT TRIDENT_OPENBLAS_INCLUDE OR NOT TRIDENT_OPENBLAS_LIB)
  message(FATAL_ERROR "OpenBLAS not found (cblas.h: ${TRIDENT_OPENBLAS_INCLUDE}, library: ${TRIDENT_OPENBLAS_LIB}). "
                      "Run scripts/setup.sh, or set OPENBLAS_ROOT.")
endif()
add_library(trident_openblas INTERFACE)
target_include_directories(trident_openblas SYSTEM INTERFACE ${TRIDENT_OPENBLAS_INCLUDE})
target_link_libraries(trident_openblas INTERFACE ${TRIDENT_OPENBLAS_LIB})
# A static OpenBLAS (scripts/prepare-carry.sh carries one to the GPU check) needs the Fortran
# runtime that the shared library would bring along; the carry puts it beside the library.
if(TRIDENT_OPENBLAS_LIB MATCHES "\\.a$")
  get_filename_component(_ob_dir "${TRIDENT_OPENBLAS_LIB}" DIRECTORY)
  find_library(TRIDENT_GFORTRAN_LIB NAMES libgfortran.a gfortran HINTS ${_ob_dir})
  find_library(TRIDENT_QUADMATH_LIB NAMES libquadmath.a quadmath HINTS ${_ob_dir})
  foreach(_l TRIDENT_GFORTRAN_LIB TRIDENT_QUADMATH_LIB)
    if(${_l})
      target_link_libraries(trident_openblas INTERFACE ${${_l}})
    endif()
  endforeach()
  target_link_libraries(trident_openblas INTERFACE m)
endif()
message(STATUS "OpenBLAS: ${TRIDENT_OPENBLAS_LIB}")

# --- CUDA, cuBLAS(Lt), cuDNN, NCCL ------------------------------------------------------
set(TRIDENT_HAVE_CUDA OFF)
if(NOT TRIDENT_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER)
    if(CUDAToolkit_ROOT AND EXISTS "${CUDAToolkit_ROOT}/bin/nvcc")
      set(CMAKE_CUDA_COMPILER "${CUDAToolkit_ROOT}/bin/nvcc")
    elseif(EXISTS /usr/local/cuda/bin/nvcc)
      set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
    endif()
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  set(_why "")
  if(CMAKE_CUDA_COMPILER)
    get_filename_component(_cuda_bin "${CMAKE_CUDA_COMPILER}" DIRECTORY)
    get_filename_component(_cuda_root "${_cuda_bin}" DIRECTORY)
    if(NOT CUDAToolkit_ROOT)
      set(CUDAToolkit_ROOT "${_cuda_root}")
    endif()
    find_package(CUDAToolkit QUIET)
    find_path(TRIDENT_CUDNN_INCLUDE cudnn.h
      HINTS ${CUDNN_ROOT} ENV CUDNN_ROOT ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
    find_library(TRIDENT_CUDNN_LIB cudnn
      HINTS ${CUDNN_ROOT} ENV CUDNN_ROOT ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib lib64)
    find_path(TRIDENT_NCCL_INCLUDE nccl.h
      HINTS ${NCCL_ROOT} ENV NCCL_ROOT ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
    find_library(TRIDENT_NCCL_LIB nccl
      HINTS ${NCCL_ROOT} ENV NCCL_ROOT ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib lib64)
    if(NOT CUDAToolkit_FOUND OR NOT TARGET CUDA::cublasLt)
      set(_why "cuBLAS not found")
    elseif(NOT TRIDENT_CUDNN_INCLUDE OR NOT TRIDENT_CUDNN_LIB)
      set(_why "cuDNN not found (set CUDNN_ROOT)")
    elseif(NOT TRIDENT_NCCL_INCLUDE OR NOT TRIDENT_NCCL_LIB)
      set(_why "NCCL not found (set NCCL_ROOT)")
    endif()
  else()
    set(_why "nvcc not found (set CUDAToolkit_ROOT)")
  endif()
  if(_why STREQUAL "")
    set(TRIDENT_HAVE_CUDA ON)
  elseif(TRIDENT_CUDA STREQUAL "ON")
    message(FATAL_ERROR "TRIDENT_CUDA=ON but ${_why}")
  else()
    message(STATUS "CUDA backend off: ${_why}")
  endif()
endif()

if(TRIDENT_HAVE_CUDA)
  include(${CMAKE_CURRENT_LIST_DIR}/TridentEnableCUDA.cmake)
  trident_enable_cuda(${TRIDENT_CUDA_ARCHITECTURES})
  add_library(trident_cuda_deps INTERFACE)
  target_include_directories(trident_cuda_deps SYSTEM INTERFACE ${TRIDENT_CUDNN_INCLUDE} ${TRIDENT_NCCL_INCLUDE})
  target_link_libraries(trident_cuda_deps INTERFACE CUDA::cudart CUDA::cublas CUDA::cublasLt
    ${TRIDENT_CUDNN_LIB} ${TRIDENT_NCCL_LIB})
  message(STATUS "CUDA ${CUDAToolkit_VERSION}: cuDNN ${TRIDENT_CUDNN_LIB}, NCCL ${TRIDENT_NCCL_LIB}, architectures ${CMAKE_CUDA_ARCHITECTURES}")
endif()

# --- MPI ------------------------------------------------------------------------------
set(TRIDENT_HAVE_MPI OFF)
if(NOT TRIDENT_MPI STREQUAL "OFF")
  if(TRIDENT_MPI STREQUAL "ON")
    find_package(MPI REQUIRED COMPONENTS CXX)
  else()
    find_package(MPI QUIET COMPONENTS CXX)
  endif()
  if(MPI_CXX_FOUND)
    set(TRIDENT_HAVE_MPI ON)
    find_program(TRIDENT_MPIEXEC NAMES mpirun mpiexec HINTS ${MPI_HOME} ENV MPI_HOME)
  else()
    message(STATUS "MPI backend off: MPI not found")
  endif()
endif()

# --- nlohmann-json (header-only): nn/ state files and checkpoints, data/ ----------------------
# Required: the safetensors headers and checkpoint manifests are JSON. Debian's
# nlohmann-json3-dev provides the CMake package; elsewhere (a GPU-check machine with only a
# compiler and CUDA) NLOHMANN_JSON_ROOT, or a copy under .carry/ in the checkout, names a folder
# holding nlohmann/json.hpp (the headers travel: nothing is compiled).
find_package(nlohmann_json 3.9 QUIET)
if(NOT nlohmann_json_FOUND)
  find_path(TRIDENT_NLOHMANN_JSON_INCLUDE nlohmann/json.hpp
    HINTS ${NLOHMANN_JSON_ROOT} ENV NLOHMANN_JSON_ROOT ${CMAKE_SOURCE_DIR}/.carry
    PATH_SUFFIXES include single_include)
  if(NOT TRIDENT_NLOHMANN_JSON_INCLUDE)
    message(FATAL_ERROR "nlohmann-json not found: run scripts/setup.sh (nlohmann-json3-dev), or set "
                        "NLOHMANN_JSON_ROOT to a folder holding nlohmann/json.hpp")
  endif()
  add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED)
  target_include_directories(nlohmann_json::nlohmann_json SYSTEM INTERFACE ${TRIDENT_NLOHMANN_JSON_INCLUDE})
  message(STATUS "nlohmann-json: ${TRIDENT_NLOHMANN_JSON_INCLUDE}")
endif()

# --- data/: PCRE2 (GPT-2 pre-tokenization), zlib (gzip IDX), stb_image, and Python 3, whose
# unicodedata the build turns into BERT's Unicode tables (data/CMakeLists.txt) -----------------
# The data layer is optional so that a build on a machine with only a compiler and CUDA (the
# GPU check) still configures; scripts/setup.sh installs all of it on Debian.
set(TRIDENT_DATA "AUTO" CACHE STRING "Build data/ (tokenizers, shards, image pipeline): AUTO, ON or OFF")
set_property(CACHE TRIDENT_DATA PROPERTY STRINGS AUTO ON OFF)
set(TRIDENT_HAVE_DATA OFF)
# NOTE [Carried data libraries]: on a machine without Debian's packages (the GPU check),
# PCRE2_ROOT, ZLIB_ROOT and STB_ROOT name folders (include/, lib/) holding static copies that
# scripts/prepare-carry.sh carries and scripts/gpu-check.sh unpacks; the static libraries are
# linked into the programs, so nothing is needed at run time.
if(NOT TRIDENT_DATA STREQUAL "OFF")
  set(TRIDENT_PCRE2_FOUND OFF)
  if(PCRE2_ROOT OR DEFINED ENV{PCRE2_ROOT})
    find_path(TRIDENT_PCRE2_INCLUDE pcre2.h HINTS ${PCRE2_ROOT} ENV PCRE2_ROOT PATH_SUFFIXES include NO_DEFAULT_PATH)
    find_library(TRIDENT_PCRE2_LIB NAMES libpcre2-8.a pcre2-8 HINTS ${PCRE2_ROOT} ENV PCRE2_ROOT PATH_SUFFIXES lib
      NO_DEFAULT_PATH)
    if(TRIDENT_PCRE2_INCLUDE AND TRIDENT_PCRE2_LIB)
      add_library(trident_pcre2 INTERFACE)
      target_include_directories(trident_pcre2 SYSTEM INTERFACE ${TRIDENT_PCRE2_INCLUDE})
      target_link_libraries(trident_pcre2 INTERFACE ${TRIDENT_PCRE2_LIB})
      set(TRIDENT_PCRE2_FOUND ON)
      message(STATUS "PCRE2: ${TRIDENT_PCRE2_LIB}")
    endif()
  else()
    find_package(PkgConfig QUIET)
    if(PkgConfig_FOUND)
      pkg_check_modules(TRIDENT_PCRE2 QUIET IMPORTED_TARGET libpcre2-8)
    endif()
    if(TRIDENT_PCRE2_FOUND)
      add_library(trident_pcre2 INTERFACE)
      target_link_libraries(trident_pcre2 INTERFACE PkgConfig::TRIDENT_PCRE2)
    endif()
  endif()
  if(ZLIB_ROOT OR DEFINED ENV{ZLIB_ROOT})
    set(ZLIB_USE_STATIC_LIBS ON)  # the carried libz.a (CMake >= 3.24)
  endif()
  find_package(ZLIB QUIET)
  find_path(TRIDENT_STB_INCLUDE stb_image.h PATH_SUFFIXES stb include/stb HINTS ${STB_ROOT} ENV STB_ROOT)
  # Debian's interpreter first: the build only needs its standard library, never a virtualenv's.
  find_program(TRIDENT_PYTHON3 NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH)
  find_program(TRIDENT_PYTHON3 NAMES python3)
  set(_missing "")
  if(NOT TRIDENT_PCRE2_FOUND)
    list(APPEND _missing "PCRE2 (libpcre2-dev)")
  endif()
  if(NOT ZLIB_FOUND)
    list(APPEND _missing "zlib (zlib1g-dev)")
  endif()
  if(NOT TRIDENT_STB_INCLUDE)
    list(APPEND _missing "stb_image (libstb-dev)")
  endif()
  if(NOT TRIDENT_PYTHON3)
    list(APPEND _missing "Python 3 (python3)")
  endif()
  if(_missing STREQUAL "")
    set(TRIDENT_HAVE_DATA ON)
    add_library(trident_data_deps INTERFACE)
    target_include_directories(trident_data_deps SYSTEM INTERFACE ${TRIDENT_STB_INCLUDE})
    target_link_libraries(trident_data_deps INTERFACE trident_pcre2 ZLIB::ZLIB)
  elseif(TRIDENT_DATA STREQUAL "ON")
    message(FATAL_ERROR "TRIDENT_DATA=ON but missing: ${_missing}. Run scripts/setup.sh.")
  else()
    message(STATUS "data/ off: missing ${_missing}")
  endif()
endif()

# --- CLI11 (header-only): the programs' command lines (apps/) ----------------------------------
# Debian's libcli11-dev puts CLI/CLI.hpp in /usr/include; elsewhere CLI11_ROOT, or the copy
# scripts/prepare-carry.sh puts in .carry/include (NOTE [Carried data libraries]).
find_path(TRIDENT_CLI11_INCLUDE CLI/CLI.hpp HINTS ${CLI11_ROOT} ENV CLI11_ROOT ${CMAKE_SOURCE_DIR}/.carry/include
  PATH_SUFFIXES include)
add_library(trident_cli11 INTERFACE)
if(TRIDENT_CLI11_INCLUDE)
  target_include_directories(trident_cli11 SYSTEM INTERFACE ${TRIDENT_CLI11_INCLUDE})
else()
  message(STATUS "CLI11 not found (libcli11-dev, or CLI11_ROOT): the programs in apps/ will not compile")
endif()
