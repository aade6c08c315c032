// CUDA kernels: causal conv1d + SiLU with varlen and the CP halo, forward and backward. The math is
// gpu/math_conv.hpp, shared with the host emulation.
#include "gpu/cuda_items.cuh"
#include "gpu/math_conv.hpp"

namespace gdnv::gpu {

GDNV_GPU_CONV_KERNELS(GDNV_GPU_ELEMENTWISE_LAUNCH)

}  // namespace gdnv::gpu
