#pragma once
// The one kernel shape of gpu/: a grid-stride loop calling an item function of gpu/math_*.hpp for
// every item, and the macro that defines a family's launch_<name> entry points from its X-list.
#include <algorithm>
#include <cstdint>

#include <cuda_runtime.h>

#include "gpu/cuda_launch.hpp"

namespace gdnv::gpu {

template <class Params, class Item>
__global__ void item_kernel(Params p, std::int64_t items) {
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < items; i += step)
    Item{}(p, i);
}

// `threads` per block: 256 for elementwise items; the long serial tasks of the chunked core take 32 so
// even a few tasks spread over many SMs.
template <class Params, class Item>
void launch_items(const Params& p, std::int64_t items, cudaStream_t stream, int threads) {
  if (items == 0) return;
  const auto blocks = static_cast<unsigned>(std::min<std::int64_t>((items + threads - 1) / threads, 65535));
  item_kernel<Params, Item><<<blocks, threads, 0, stream>>>(p, items);
}

}  // namespace gdnv::gpu

// Defines launch_<name> for one X-list entry with `threads` per block.
#define GDNV_GPU_DEFINE_CUDA_LAUNCH(name, Params, item, threads)                                   \
  namespace {                                                                                      \
  struct name##_functor {                                                                          \
    __device__ void operator()(const Params& p, std::int64_t i) const { ::gdnv::gpu::item(p, i); } \
  };                                                                                               \
  }                                                                                                \
  void launch_##name(const Params& p, std::int64_t items, cudaStream_t stream) {                   \
    launch_items<Params, name##_functor>(p, items, stream, threads);                               \
  }
#define GDNV_GPU_ELEMENTWISE_LAUNCH(name, Params, item) GDNV_GPU_DEFINE_CUDA_LAUNCH(name, Params, item, 256)
#define GDNV_GPU_TASK_LAUNCH(name, Params, item) GDNV_GPU_DEFINE_CUDA_LAUNCH(name, Params, item, 32)
