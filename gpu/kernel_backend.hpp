#pragma once
// The Backend of gpu/: argument checks, buffers and the composition of each leaf op from the kernel
// launches of gpu/kernels.hpp, written once for the CUDA backend and its host emulation.
// Storage F32 or BF16 (bf16 rounded to nearest even at every op's outputs), fp32 arithmetic; gates,
// states, the (M, h_ext) maps and parameter gradients in fp32 (docs/DESIGN.md §4).
#include <memory>

#include "cp/backend.hpp"
#include "gpu/kernels.hpp"

namespace gdnv::gpu {

// Throws ConfigError naming the supported storage dtypes for anything but F32 and BF16.
std::unique_ptr<cp::Backend> make_kernel_backend(DType storage, std::unique_ptr<Kernels> kernels);

// The kernels' math on the CPU ("emu/fp32", "emu/bf16"): host memory, no CUDA needed.
std::unique_ptr<cp::Backend> make_emulated_backend(DType storage);

}  // namespace gdnv::gpu
