#pragma once
// gdn-verify reaches the CUDA backend and the NCCL communicator through a plugin, libgdnv_cuda.so, built
// beside it when CUDA is (gpu/CMakeLists.txt): the binary links no CUDA or NCCL library, so it starts
// without loading them and runs where there is no CUDA runtime; the plugin is opened (dlopen) on the
// first use of the CUDA backend. It is looked for beside the executable (/proc/self/exe), or in
// $GDNV_PLUGIN_DIR when that is set.
#include <memory>
#include <string>

#include "gpu/cuda_backend.hpp"

namespace gdnv::gpu {

// What the plugin exports: one extern "C" function named kCudaPluginEntry returning this table. Both sides
// are compiled from the same tree; kCudaPluginAbi changes whenever the table or a type it passes does.
struct CudaPluginApi {
  int abi;
  std::string (*unavailable_reason)();  // cuda_backend_unavailable_reason
  std::unique_ptr<cp::Backend> (*make_backend)(DType storage);
  NcclRank (*make_nccl_rank)(comm::Communicator& mpi, DType storage);
};
inline constexpr int kCudaPluginAbi = 2;
inline constexpr const char* kCudaPluginEntry = "gdnv_cuda_plugin_api";
inline constexpr const char* kCudaPluginFile = "libgdnv_cuda.so";
inline constexpr const char* kPluginDirVariable = "GDNV_PLUGIN_DIR";

struct CudaPlugin {
  const CudaPluginApi* api = nullptr;  // null when the plugin could not be loaded; then:
  std::string problem;                 // what failed, naming the missing file or library
  std::string fix;                     // what to do about it
};

// The plugin, loaded on the first call (thread-safe; later calls return the same answer).
const CudaPlugin& cuda_plugin();

// Why the CUDA backend cannot run in this process, "" when it can: the plugin's problem, or
// "no CUDA device: <reason>".
std::string cuda_plugin_unavailable_reason();

}  // namespace gdnv::gpu
