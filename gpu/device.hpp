#pragma once
// CUDA device query that never fails: without a usable driver or device the answer is "none".
#include <string>

namespace gdnv {

// Number of CUDA devices; 0 when cudaGetDeviceCount reports any error (a machine without a GPU
// reports cudaErrorInsufficientDriver (35), not cudaErrorNoDevice).
int cuda_device_count();
// Why there is no device ("cudaGetDeviceCount failed: cudaErrorInsufficientDriver (35): <text>"), or
// "" when there is one: the reason a GPU test gives when it skips.
std::string cuda_unavailable_reason();

}  // namespace gdnv
