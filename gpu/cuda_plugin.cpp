// The entry point of libgdnv_cuda.so (gpu/cuda_plugin.hpp): gpu/cuda_backend.hpp's functions, as a table.
#include "gpu/cuda_plugin.hpp"

// Named by kCudaPluginEntry.
extern "C" __attribute__((visibility("default"))) const gdnv::gpu::CudaPluginApi* gdnv_cuda_plugin_api() {
  using namespace gdnv::gpu;
  static const CudaPluginApi api{kCudaPluginAbi, cuda_backend_unavailable_reason, make_cuda_backend, make_nccl_rank};
  return &api;
}
