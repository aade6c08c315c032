// A build without CUDA (GDNV_CUDA=OFF or no nvcc): the CUDA backend exists only to say so.
#include "core/error.hpp"
#include "gpu/cuda_backend.hpp"

namespace gdnv::gpu {

std::string cuda_backend_unavailable_reason() { return kBuiltWithoutCuda; }

std::unique_ptr<cp::Backend> make_cuda_backend(DType /*storage*/) {
  throw ConfigError("no CUDA device: " + cuda_backend_unavailable_reason());
}

NcclRank make_nccl_rank(comm::Communicator& /*mpi*/, DType storage) { return {nullptr, make_cuda_backend(storage)}; }

}  // namespace gdnv::gpu
