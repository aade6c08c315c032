// The device backends through the real binary: run and gate with --backend cuda give one error line
// naming the fix and exit 3 without a usable device (or without CUDA in the build, or without the CUDA
// plugin), and pass with one; --backend emu runs the same device code path on host streams and passes
// with zero host syncs. The binary itself links no CUDA or NCCL library.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "cli_testing.hpp"
#include "gpu/cuda_backend.hpp"
#include "gpu/cuda_plugin.hpp"

namespace gdnv {
namespace {

using testing::run_cli;

const std::string kSmall =
    " --lengths 16,8 --hidden 24 --num-key-heads 2 --num-value-heads 4 --key-head-dim 6 "
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

// GDNV_PLUGIN_DIR set to a fresh directory for the scope; `plugin` (if not empty) is written there as
// libgdnv_cuda.so.
class PluginDir {
 public:
  explicit PluginDir(const std::string& plugin = "") : dir_(testing::temp_dir("plugin")) {
    if (!plugin.empty()) std::ofstream(path()) << plugin;
    setenv(gpu::kPluginDirVariable, dir_.c_str(), 1);
  }
  ~PluginDir() {
    unsetenv(gpu::kPluginDirVariable);
    std::filesystem::remove_all(dir_);
  }
  PluginDir(const PluginDir&) = delete;
  PluginDir& operator=(const PluginDir&) = delete;
  std::string path() const { return (dir_ / gpu::kCudaPluginFile).string(); }

 private:
  std::filesystem::path dir_;
};

#ifdef GDNV_CUDA_PLUGIN_BUILT
constexpr bool kPluginBuilt = true;
#else
constexpr bool kPluginBuilt = false;
#endif

TEST(CudaCli, WithoutThePluginTheCudaBackendNamesTheMissingFile) {
  if (!kPluginBuilt) GTEST_SKIP() << "built without CUDA: there is no plugin to miss";
  const PluginDir empty;
  const auto r = run_cli("run --mode chunkwise --cp 2 --backend cuda" + kSmall);
  EXPECT_EQ(r.code, 3) << r.out << r.err;
  EXPECT_EQ(r.err, "error: --backend cuda: cannot load the CUDA plugin " + empty.path() +
                       ": no such file; build it (cmake --build build --target gdnv_cuda_plugin) or set "
                       "GDNV_PLUGIN_DIR to the directory that holds it, or use --backend cpu\n");
  EXPECT_EQ(r.out, "");
}

TEST(CudaCli, ABrokenPluginIsOneLineNamingIt) {
  if (!kPluginBuilt) GTEST_SKIP() << "built without CUDA: there is no plugin to load";
  const PluginDir broken("not a shared library");
  const auto r = run_cli("gate --quick --backend cuda");
  EXPECT_EQ(r.code, 3) << r.out << r.err;
  EXPECT_EQ(r.err.rfind("error: --backend cuda: cannot load the CUDA plugin " + broken.path() + ": ", 0), 0u) << r.err;
  EXPECT_TRUE(testing::contains(r.err, "or add its directory to LD_LIBRARY_PATH")) << r.err;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line: " << r.err;
  EXPECT_EQ(r.out, "");  // refused before any step ran
}

TEST(CudaCli, WithoutThePluginTheGateSkipsItsCudaStepSayingWhy) {
  if (!kPluginBuilt) GTEST_SKIP() << "built without CUDA: the step's reason is the build's";
  const PluginDir empty;
  const auto r = run_cli("gate --quick");
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(testing::contains(
      r.out, "CP mode matrix (cuda) ... skipped\n    cannot load the CUDA plugin " + empty.path() + ": no such file\n"))
      << r.out;
}

// What the dynamic loader maps before main(): none of the CUDA runtime, cuBLAS or NCCL (only the plugin
// links them), so the binary starts in milliseconds and runs where they are not installed.
TEST(CudaCli, TheBinaryLinksNoCudaOrNcclLibrary) {
  FILE* ldd = popen(("ldd " + std::string(GDNV_CLI) + " 2>&1").c_str(), "r");
  ASSERT_NE(ldd, nullptr);
  std::string libs;
  for (char buf[4096]; std::fgets(buf, sizeof buf, ldd);) libs += buf;
  EXPECT_EQ(pclose(ldd), 0) << libs;
  EXPECT_TRUE(testing::contains(libs, "libstdc++")) << libs;
  for (const char* lib : {"libcuda", "libcublas", "libnccl"}) EXPECT_FALSE(testing::contains(libs, lib)) << libs;
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
