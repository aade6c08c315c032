// CUDA kernels: RMSNorm and the gated output norm, forward and backward. The math is
// gpu/math_norm.hpp, shared with the host emulation.
#include "gpu/cuda_items.cuh"
#include "gpu/math_norm.hpp"

namespace gdnv::gpu {

GDNV_GPU_NORM_KERNELS(GDNV_GPU_ELEMENTWISE_LAUNCH)

}  // namespace gdnv::gpu
