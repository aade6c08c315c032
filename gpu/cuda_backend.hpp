#pragma once
// The CUDA Backend: the kernels of gpu/kernels.hpp on the current device, one stream, GEMMs through
// cuBLAS (fp32 compute). Buffers are device memory from the stream-ordered allocator; ops only enqueue
// work, so a layer's forward and backward never block the host. Its data_mover() carries the
// in-process world's collectives on that stream (several ranks on one GPU).
#include <memory>
#include <string>

#include "cp/backend.hpp"

namespace gdnv::gpu {

// storage F32 or BF16 (ConfigError otherwise). Throws Error "no CUDA device: <reason>" without a usable
// device, and ConfigError in a build without CUDA.
std::unique_ptr<cp::Backend> make_cuda_backend(DType storage);

// Why make_cuda_backend cannot work here ("" when it can): no CUDA in this build, or no device.
std::string cuda_backend_unavailable_reason();

// This process's rank of an mpirun world on its own GPU (the node-local rank modulo the device count):
// the NCCL communicator over `mpi`'s ranks, and a CUDA backend enqueuing on that communicator's stream,
// so kernels and collectives are ordered without host syncs. `backend` must go before `comm`.
// Collective over `mpi` (an MpiCommunicator); Error/ConfigError as make_cuda_backend.
struct NcclRank {
  std::unique_ptr<comm::Communicator> comm;
  std::unique_ptr<cp::Backend> backend;
};
NcclRank make_nccl_rank(comm::Communicator& mpi, DType storage);

// The reason a build without CUDA gives.
inline constexpr const char* kBuiltWithoutCuda =
    "this gdn-verify was built without CUDA (GDNV_CUDA=OFF or no nvcc at configure time)";

}  // namespace gdnv::gpu
