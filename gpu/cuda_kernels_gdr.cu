// CUDA kernels: the chunked gated delta rule (L2 norm, forward, backward, span maps, their fold).
// The math is gpu/math_gdr.hpp, shared with the host emulation.
#include "gpu/cuda_items.cuh"
#include "gpu/math_gdr.hpp"

namespace gdnv::gpu {

GDNV_GPU_GDR_KERNELS(GDNV_GPU_TASK_LAUNCH)

}  // namespace gdnv::gpu
