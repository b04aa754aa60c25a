#pragma once
// Host/device annotations that also compile under a plain C++ compiler, so the CPU implementations
// can share the per-element math with the CUDA kernels.
#if defined(__CUDACC__)
#define DETOPS_HD __host__ __device__ __forceinline__
#else
#define DETOPS_HD inline
#endif
