// Portability macros shared by host and device code.
#pragma once

#if defined(__CUDACC__) || defined(__HIPCC__)
#define TRIDENT_HOST_DEVICE __host__ __device__
#define TRIDENT_INLINE __host__ __device__ __forceinline__
#else
#define TRIDENT_HOST_DEVICE
#define TRIDENT_INLINE inline
#endif
