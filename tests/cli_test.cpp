// The real CLI: dispatch, --help for every command, exit codes and one-line errors.
#include <cmath>
#include <cstdlib>
#include <fstream>

#include <gtest/gtest.h>

#include "cli_harness.hpp"
#include "core/safetensors.hpp"

namespace gdnv {
namespace {

using testing::run_cli;

int count_lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

TEST(Cli, EveryCommandHasHelp) {
  for (const char* cmd : {"inspect", "gate"}) {
    const auto r = run_cli(std::string(cmd) + " --help");
    EXPECT_EQ(r.code, 0) << cmd << ": " << r.err;
    EXPECT_NE(r.out.find(std::string("usage: gdn-verify ") + cmd), std::string::npos) << r.out;
  }
}

TEST(Cli, UnknownCommandExitsThreeWithOneLine) {
  const auto r = run_cli("frobnicate");
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.err, "error: unknown command 'frobnicate'; run 'gdn-verify --help' for the list of commands\n");
}

TEST(Cli, UnknownOptionExitsThreeNamingIt) {
  const auto r = run_cli("inspect --bogus x");
  EXPECT_EQ(r.code, 3);
  EXPECT_NE(r.err.find("gdn-verify inspect: unrecognised option '--bogus'"), std::string::npos) << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
}

TEST(Cli, InspectPrintsTensorsAndMetadata) {
  const auto r = run_cli(GDNV_TEST_DATA "/vectors/conv1d_silu_bias.safetensors");
  EXPECT_EQ(r.code, 3) << "a file is not a command";
  const auto ok = run_cli("inspect " GDNV_TEST_DATA "/vectors/conv1d_silu_bias.safetensors");
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_NE(ok.out.find("weight"), std::string::npos) << ok.out;
  EXPECT_NE(ok.out.find("source = "), std::string::npos) << ok.out;
  EXPECT_NE(ok.out.find("[2, 19, 6]"), std::string::npos) << ok.out;
}

TEST(Cli, InspectCountsNaNAndInf) {
  const auto dir = testing::temp_dir("inspect");
  TensorFile f;
  f.tensors.emplace("x", Tensor::from(std::vector<float>{1.0f, NAN, INFINITY, -INFINITY, 2.0f}, {5}));
  write_safetensors((dir / "x.safetensors").string(), f);
  const auto r = run_cli("inspect " + (dir / "x.safetensors").string());
  EXPECT_EQ(r.code, 0);
  // min 1, max 2, mean 1.5 over the finite values; 1 NaN, 2 Inf.
  EXPECT_NE(r.out.find("1.5     1     2"), std::string::npos) << r.out;
  std::filesystem::remove_all(dir);
}

TEST(Cli, InspectOfCorruptFileIsOneLineNamingFileAndTensor) {
  const auto dir = testing::temp_dir("corrupt");
  const std::string path = (dir / "bad.safetensors").string();
  const std::string header = R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  std::string len(8, '\0');
  len[0] = static_cast<char>(header.size());
  std::ofstream(path, std::ios::binary) << len << header << "abcd";  // 4 of the 16 data bytes
  const auto r = run_cli("inspect " + path);
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find(path), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("tensor 'w'"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << "nothing half-written: " << r.out;
  std::filesystem::remove_all(dir);
}

TEST(Cli, GatePassesAndPrintsSummary) {
  const auto r = run_cli("gate");
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("PASS"), std::string::npos) << r.out;
}

TEST(Cli, GateFailsUnderEachPlantedFaultNamingTheStep) {
  for (const char* fault : {"allgather_no_reduce_scatter", "headwise_head_perm_shift", "missing_grad_reduction_over_cp",
                            "chunkwise_bf16_state_chain", "conv_halo_wrong_rank", "route_off_by_one"}) {
    setenv("GDNV_FAULT", fault, 1);
    const auto r = run_cli("gate");
    unsetenv("GDNV_FAULT");
    EXPECT_EQ(r.code, 1) << fault << "\n" << r.out << r.err;
    EXPECT_NE(r.out.find("CP mode matrix (cpu) ... FAIL"), std::string::npos) << fault << "\n" << r.out;
    EXPECT_NE(r.out.find("\nFAIL\n"), std::string::npos) << fault << "\n" << r.out;
  }
}

}  // namespace
}  // namespace gdnv
