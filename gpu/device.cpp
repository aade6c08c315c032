#include "gpu/device.hpp"

#include <cuda_runtime_api.h>

namespace gdnv {

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error so later calls start clean
    return 0;
  }
  return n;
}

std::string cuda_unavailable_reason() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return "cudaGetDeviceCount failed: " + std::string(cudaGetErrorName(e)) + " (" +
           std::to_string(static_cast<int>(e)) + "): " + cudaGetErrorString(e);
  }
  return n == 0 ? "cudaGetDeviceCount found 0 devices" : "";
}

}  // namespace gdnv
