// The gpu/ kernels' math on the CPU (gpu::make_emulated_backend): the full kernel-backend suite, with
// or without CUDA in the build.
#include "gpu/kernel_backend.hpp"
#include "tests/kernel_backend_suite.hpp"

namespace gdnv::cp {

std::unique_ptr<Backend> suite_backend(DType storage) { return gpu::make_emulated_backend(storage); }
std::string suite_skip_reason() { return ""; }

namespace {

TEST(EmulatedBackend, NamesItselfAndRejectsOtherStorage) {
  EXPECT_EQ(gpu::make_emulated_backend(DType::BF16)->name(), "emu/bf16");
  EXPECT_EQ(gpu::make_emulated_backend(DType::F32)->state_dtype(), DType::F32);
  try {
    gpu::make_emulated_backend(DType::F64);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "the emu backend stores F32 or BF16, not F64; choose --dtype fp32 or bf16");
  }
}

}  // namespace
}  // namespace gdnv::cp
