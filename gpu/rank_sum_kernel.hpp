#pragma once
// The rank-ordered sum of comm/rank_sum.hpp on the device, for the NCCL transport's reductions.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.hpp"

namespace gdnv {

// out[i] = rank-ordered sum over r < n of blocks[r * stride + i], i < count (device pointers), enqueued
// on `stream`. dtype F64, F32 or BF16.
void device_rank_sum(DType dtype,
                     void* out,           // [count]
                     const void* blocks,  // [n, stride], stride >= count
                     std::int64_t stride, int n, std::int64_t count, cudaStream_t stream);

}  // namespace gdnv
