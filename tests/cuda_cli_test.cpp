// The device backends through the real binary: run and gate with --backend cuda give one error line
// naming the fix and exit 3 without a usable device (or without CUDA in the build), and pass with one;
// --backend emu runs the same device code path on host streams and passes with zero host syncs.
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

TEST(CudaCli, TheEmulatedDeviceBackendPassesWithoutHostSyncsInTheLayer) {
  const auto r = run_cli("run --mode chunkwise --cp 4 --dtype bf16 --backend emu" + kSmall);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("backend=emu"), std::string::npos) << r.out;
  std::size_t syncs = 0;
  for (std::size_t at = r.out.find("host syncs: "); at != std::string::npos; at = r.out.find("host syncs: ", at + 1)) {
    ++syncs;
    EXPECT_EQ(r.out.substr(at, 14), "host syncs: 0\n") << r.out;
  }
  EXPECT_EQ(syncs, 2u) << r.out;  // forward and backward
}

TEST(CudaCli, GateWithTheCudaBackendNamesTheFixOrRuns) {
  const std::string reason = gpu::cuda_backend_unavailable_reason();
  const auto r = run_cli("gate --quick --backend cuda");
  if (!reason.empty()) {
    EXPECT_EQ(r.code, 3) << r.out << r.err;
    EXPECT_NE(r.err.find("--backend cuda: no CUDA device: " + reason), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");  // refused before any step ran
    return;
  }
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("CP mode matrix (cuda)"), std::string::npos) << r.out;
}

TEST(CudaCli, GateTakesOnlyCpuOrCuda) {
  const auto r = run_cli("gate --backend emu");
  EXPECT_EQ(r.code, 3);
  EXPECT_NE(r.err.find("gate --backend 'emu' is not supported: use cpu or cuda"), std::string::npos) << r.err;
}

TEST(CudaCli, AnUnknownBackendIsBadInput) {
  const auto r = run_cli("run --mode headwise --backend tpu" + kSmall);
  EXPECT_EQ(r.code, 3);
  EXPECT_NE(r.err.find("--backend 'tpu' is not supported: use cpu, emu or cuda"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace gdnv
