// gdn-verify run --backend cuda through the real binary: without a usable device (or without CUDA in
// the build) one error line naming the fix and exit 3; with one, the run passes on the device.
#include <gtest/gtest.h>

#include "cli_harness.hpp"
#include "gpu/cuda_backend.hpp"

namespace gdnv {
namespace {

using testing::run_cli;

const std::string kSmall = " --lengths 16,8 --hidden 24 --num-key-heads 2 --num-value-heads 4 --key-head-dim 6 "
                           "--value-head-dim 10";

TEST(CudaCli, RunWithTheCudaBackendNamesTheFixOrPasses) {
  const std::string reason = gpu::cuda_backend_unavailable_reason();
  const auto r = run_cli("run --mode chunkwise --cp 2 --backend cuda" + kSmall);
  if (!reason.empty()) {
    EXPECT_EQ(r.code, 3) << r.out << r.err;
    EXPECT_NE(r.err.find("--backend cuda: no CUDA device: " + reason), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("or use --backend cpu"), std::string::npos) << r.err;
    return;
  }
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("backend=cuda"), std::string::npos) << r.out;
}

TEST(CudaCli, AnUnknownBackendIsBadInput) {
  const auto r = run_cli("run --mode headwise --backend tpu" + kSmall);
  EXPECT_EQ(r.code, 3);
  EXPECT_NE(r.err.find("--backend 'tpu' is not supported: use cpu or cuda"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace gdnv
