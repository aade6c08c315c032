#pragma once
// Host entry points of the CUDA kernels (one per item function of gpu/kernels.hpp), defined in the
// cuda_kernels_<family>.cu files; each launches one thread per item on `stream`.
#include <cstdint>

#include <cuda_runtime_api.h>

#include "gpu/kernels.hpp"

namespace gdnv::gpu {

#define GDNV_GPU_DECLARE_CUDA_LAUNCH(name, Params, item) \
  void launch_##name(const Params& p, std::int64_t items, cudaStream_t stream);
GDNV_GPU_KERNELS(GDNV_GPU_DECLARE_CUDA_LAUNCH)
#undef GDNV_GPU_DECLARE_CUDA_LAUNCH

}  // namespace gdnv::gpu
