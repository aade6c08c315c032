// Opens libgdnv_cuda.so (gpu/cuda_plugin.hpp) once, and says precisely why when it cannot.
#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>

#include "gpu/cuda_plugin.hpp"

namespace gdnv::gpu {
namespace {

namespace fs = std::filesystem;

// $GDNV_PLUGIN_DIR, else the directory of the running executable.
fs::path plugin_dir() {
  if (const char* dir = std::getenv(kPluginDirVariable); dir && *dir) return dir;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::current_path() : exe.parent_path();
}

CudaPlugin load() {
#ifndef GDNV_CUDA_PLUGIN_BUILT
  return {nullptr, std::string("no CUDA device: ") + kBuiltWithoutCuda,
          "run on a machine with an NVIDIA GPU and driver (and a CUDA build)"};
#else
  const fs::path path = plugin_dir() / kCudaPluginFile;
  const std::string what = "cannot load the CUDA plugin " + path.string();
  const std::string rebuild = "rebuild it with this gdn-verify (cmake --build build --target gdnv_cuda_plugin)";
  if (!fs::exists(path))
    return {nullptr, what + ": no such file",
            "build it (cmake --build build --target gdnv_cuda_plugin) or set " + std::string(kPluginDirVariable) +
                " to the directory that holds it"};
  // RTLD_NOW: a missing library or symbol is this one message now, not a crash later.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle)
    return {nullptr, what + ": " + dlerror(),
            "install what it names (the CUDA runtime, cuBLAS, NCCL) or add its directory to LD_LIBRARY_PATH, or " +
                rebuild};
  using Entry = const CudaPluginApi* (*)();
  const auto entry = reinterpret_cast<Entry>(dlsym(handle, kCudaPluginEntry));
  const CudaPluginApi* api = entry ? entry() : nullptr;
  if (!api || api->abi != kCudaPluginAbi)
    return {nullptr, what + ": it comes from another build of gdn-verify", rebuild};
  return {api, "", ""};
#endif
}

}  // namespace

const CudaPlugin& cuda_plugin() {
  static const CudaPlugin plugin = load();
  return plugin;
}

std::string cuda_plugin_unavailable_reason() {
  const CudaPlugin& plugin = cuda_plugin();
  if (!plugin.api) return plugin.problem;
  const std::string reason = plugin.api->unavailable_reason();
  return reason.empty() ? "" : "no CUDA device: " + reason;
}

}  // namespace gdnv::gpu
