// The CUDA backend (gpu/cuda_backend.*): the full kernel-backend suite on the device, every test
// skipped with the reason when no device is usable; the factory's behaviour either way.
#include "gpu/cuda_backend.hpp"
#include "tests/kernel_backend_suite.hpp"

namespace gdnv::cp {

std::unique_ptr<Backend> suite_backend(DType storage) { return gpu::make_cuda_backend(storage); }
std::string suite_skip_reason() {
  const std::string reason = gpu::cuda_backend_unavailable_reason();
  return reason.empty() ? "" : "no CUDA device: " + reason;
}

namespace {

// Not a skip: without a device the factory must say so; with one it must build a device backend.
TEST(CudaBackendFactory, NamesTheMissingDeviceOrBuildsADeviceBackend) {
  const std::string reason = gpu::cuda_backend_unavailable_reason();
  if (reason.empty()) {
    const auto be = gpu::make_cuda_backend(DType::BF16);
    EXPECT_EQ(be->name(), "cuda/bf16");
    EXPECT_EQ(be->memory(), comm::Memory::Device);
    return;
  }
  try {
    gpu::make_cuda_backend(DType::F32);
    ADD_FAILURE() << "no error without a device";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "no CUDA device: " + reason);
  }
}

}  // namespace
}  // namespace gdnv::cp
