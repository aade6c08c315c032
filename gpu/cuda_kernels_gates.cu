// CUDA kernels: the gates g, beta and their gradients. The math is gpu/math_gates.hpp, shared with the
// host emulation.
#include "gpu/cuda_items.cuh"
#include "gpu/math_gates.hpp"

namespace gdnv::gpu {

GDNV_GPU_GATE_KERNELS(GDNV_GPU_ELEMENTWISE_LAUNCH)

}  // namespace gdnv::gpu
