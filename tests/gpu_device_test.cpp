// gpu/ pieces that need no MPI: the device query (runs everywhere) and the device rank-ordered sum
// against the host one (skipped, with the reason, where there is no CUDA device).
#include <cuda_runtime_api.h>

#include <gtest/gtest.h>

#include "comm/rank_sum.hpp"
#include "core/rng.hpp"
#include "core/tensor.hpp"
#include "gpu/device.hpp"
#include "gpu/rank_sum_kernel.hpp"

namespace gdnv {
namespace {

TEST(GpuDevice, CountTreatsAnyErrorAsNoDevice) {
  int raw = 0;
  const cudaError_t e = cudaGetDeviceCount(&raw);
  cudaGetLastError();
  if (e != cudaSuccess) {
    EXPECT_EQ(cuda_device_count(), 0);
    EXPECT_NE(cuda_unavailable_reason().find(cudaGetErrorName(e)), std::string::npos) << cuda_unavailable_reason();
  } else {
    EXPECT_EQ(cuda_device_count(), raw);
    EXPECT_EQ(cuda_unavailable_reason().empty(), raw > 0);
  }
}

// Device and host sums of n blocks agree bit for bit: they share comm/rank_sum.hpp's math.
TEST(GpuDevice, RankSumMatchesTheHostBitForBit) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cuda_unavailable_reason();
  constexpr std::int64_t kCount = 1000;
  for (const DType dtype : {DType::F64, DType::F32, DType::BF16}) {
    for (int n = 1; n <= 8; ++n) {
      std::vector<double> v(static_cast<std::size_t>(n * kCount));
      const Rng rng(7, "gpu_rank_sum");
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = rng.normal(i);
      const Tensor blocks = Tensor::from_f64(v, {n * kCount}, dtype);
      Tensor host(dtype, {kCount}), device(dtype, {kCount});
      std::vector<const void*> inputs;
      for (int r = 0; r < n; ++r) inputs.push_back(blocks.bytes() + r * kCount * dtype_size(dtype));
      comm::rank_sum(dtype, host.bytes(), inputs, kCount);

      void *d_blocks = nullptr, *d_out = nullptr;
      ASSERT_EQ(cudaMalloc(&d_blocks, blocks.nbytes()), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&d_out, device.nbytes()), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(d_blocks, blocks.bytes(), blocks.nbytes(), cudaMemcpyHostToDevice), cudaSuccess);
      device_rank_sum(dtype, d_out, d_blocks, kCount, n, kCount, nullptr);
      ASSERT_EQ(cudaMemcpy(device.bytes(), d_out, device.nbytes(), cudaMemcpyDeviceToHost), cudaSuccess);
      cudaFree(d_blocks);
      cudaFree(d_out);

      const auto h = host.to_f64();
      ASSERT_NE(h[0], h[1]);  // a real, varying sum
      EXPECT_TRUE(device.bitwise_equal(host)) << dtype_name(dtype) << ", " << n << " ranks";
    }
  }
}

}  // namespace
}  // namespace gdnv
