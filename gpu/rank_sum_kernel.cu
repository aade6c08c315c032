#include "comm/rank_sum.hpp"
#include "core/error.hpp"
#include "gpu/rank_sum_kernel.hpp"

namespace gdnv {
namespace {

template <class T>
__global__ void rank_sum_kernel(T* out, const T* blocks, std::int64_t stride, int n, std::int64_t count) {
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += step)
    out[i] = comm::rank_ordered_sum<T>(n, [&](int r) { return blocks[r * stride + i]; });
}

template <class T>
void launch(void* out, const void* blocks, std::int64_t stride, int n, std::int64_t count, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const auto grid = static_cast<unsigned>(std::min<std::int64_t>((count + kThreads - 1) / kThreads, 4096));
  rank_sum_kernel<T>
      <<<grid, kThreads, 0, stream>>>(static_cast<T*>(out), static_cast<const T*>(blocks), stride, n, count);
}

}  // namespace

void device_rank_sum(DType dtype, void* out, const void* blocks, std::int64_t stride, int n, std::int64_t count,
                     cudaStream_t stream) {
  if (count == 0 || n == 0) return;
  switch (dtype) {
    case DType::F64:
      launch<double>(out, blocks, stride, n, count, stream);
      break;
    case DType::F32:
      launch<float>(out, blocks, stride, n, count, stream);
      break;
    case DType::BF16:
      launch<bf16_t>(out, blocks, stride, n, count, stream);
      break;
    default:
      throw Error("device_rank_sum: no sum for dtype " + std::string(dtype_name(dtype)));
  }
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess)
    throw Error("device_rank_sum: kernel launch failed: " + std::string(cudaGetErrorString(e)));
}

}  // namespace gdnv
