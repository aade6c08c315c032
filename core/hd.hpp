#pragma once
// Math shared by host code and CUDA kernels: __host__ __device__ under nvcc, plain inline elsewhere,
// so the CPU build compiles (and tests) exactly the arithmetic the kernels run.
#if defined(__CUDACC__)
#define GDNV_HD __host__ __device__ inline
#else
#define GDNV_HD inline
#endif
