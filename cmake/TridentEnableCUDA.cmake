# trident_enable_cuda([<default architectures>]): enables CUDA in the calling directory with the
# dialect Trident's own .cu files use. Trident's build calls it (cmake/Dependencies.cmake), and
# the installed package ships it (TridentConfig.cmake includes it), so a user's kernels are
# compiled like Trident's: an outside project with .cu files calls trident_enable_cuda() after
# find_package(Trident), before adding them (docs/extending.md, examples/custom_op).
#   - CMAKE_CUDA_ARCHITECTURES, when not set by the user, becomes the given list, or without
#     one the architectures the installed Trident was built for (Trident_CUDA_ARCHITECTURES).
#   - CUDA sources are C++20, without extensions. CMake 3.25's tables do not know that nvcc 12+
#     takes -std=c++20, so this teaches them.
#   - --expt-relaxed-constexpr: Trident's headers (TRIDENT_INLINE math, dtype tables) call
#     constexpr host functions from device code; --extended-lambda: the element-wise loops
#     (core/cuda/loops.cuh) take __device__ lambdas.
# A macro, not a function: enable_language and the CMAKE_CUDA_* variables act on the caller's
# directory scope.
macro(trident_enable_cuda)
  if(NOT CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES ${ARGN})
    if(NOT CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES ${Trident_CUDA_ARCHITECTURES})
    endif()
  endif()
  enable_language(CUDA)
  if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  set(CMAKE_CUDA_EXTENSIONS OFF)
  if(NOT CMAKE_CUDA_FLAGS MATCHES "--expt-relaxed-constexpr")
    string(APPEND CMAKE_CUDA_FLAGS " --expt-relaxed-constexpr")
  endif()
  if(NOT CMAKE_CUDA_FLAGS MATCHES "--extended-lambda")
    string(APPEND CMAKE_CUDA_FLAGS " --extended-lambda")
  endif()
endmacro()
