// CUDA kernels: row and column gather/scatter by device index, accumulate. The math is
// gpu/math_data.hpp, shared with the host emulation.
#include "gpu/cuda_items.cuh"
#include "gpu/math_data.hpp"

namespace gdnv::gpu {

GDNV_GPU_DATA_KERNELS(GDNV_GPU_ELEMENTWISE_LAUNCH)

}  // namespace gdnv::gpu
