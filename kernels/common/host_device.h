// TT_HD marks functions compiled for both the host and the GPU, so the CPU and CUDA
// backends share one definition of the math they must agree on bit for bit.
#pragma once
#if defined(__CUDACC__)
#define TT_HD __host__ __device__ __forceinline__
#else
#define TT_HD inline
#endif
