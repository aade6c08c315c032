#pragma once
// The CUDA Backend: the kernels of gpu/kernels.hpp on the current device, one stream, GEMMs through
// cuBLAS (fp32 compute). Buffers are CUDA managed memory so the host-side communicators (in-process
// threads, MPI) can move them as well as NCCL; every op waits for its stream before returning.
#include <memory>
#include <string>

#include "cp/backend.hpp"

namespace gdnv::gpu {

// storage F32 or BF16 (ConfigError otherwise). Throws Error "no CUDA device: <reason>" without a usable
// device, and ConfigError in a build without CUDA.
std::unique_ptr<cp::Backend> make_cuda_backend(DType storage);

// Why make_cuda_backend cannot work here ("" when it can): no CUDA in this build, or no device.
std::string cuda_backend_unavailable_reason();

}  // namespace gdnv::gpu
