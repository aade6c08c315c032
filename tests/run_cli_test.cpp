// gdn-verify run through the real binary: verdicts, exit codes and the validation messages.
#include <algorithm>
#include <cstdlib>

#include <gtest/gtest.h>

#include "cli_harness.hpp"

namespace gdnv {
namespace {

using testing::run_cli;

const std::string kSmall = " --lengths 16,8 --hidden 24 --num-key-heads 2 --num-value-heads 4 --key-head-dim 6 "
                           "--value-head-dim 10";

TEST(RunCli, LegalModesPassAndReportTheirCollectives) {
  const auto headwise = run_cli("run --mode headwise --cp 2 --dtype fp64" + kSmall);
  EXPECT_EQ(headwise.code, 0) << headwise.out << headwise.err;
  EXPECT_NE(headwise.out.find("all_to_all_v: 2 calls"), std::string::npos) << headwise.out;
  EXPECT_NE(headwise.out.find("PASS"), std::string::npos);
  const auto all_gather = run_cli("run --mode all_gather --cp 2 --dtype bf16" + kSmall);
  EXPECT_EQ(all_gather.code, 0) << all_gather.out << all_gather.err;
  EXPECT_NE(all_gather.out.find("reduce_scatter: 1 call"), std::string::npos) << all_gather.out;
}

// Chunkwise with TP and dynamic CP, in the regime where the state fold carries over every rank.
TEST(RunCli, ChunkwiseRunsWithTpAndDynamicCp) {
  const auto r = run_cli("run --mode chunkwise --cp 4 --tp 2 --dynamic-cp 1,2,4 --gates weak --dtype fp64" + kSmall);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("micro-batch 3/3 (cp=4)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("reduce_scatter: 1 call"), std::string::npos) << r.out;  // the conv halo's gradient
  EXPECT_EQ(r.out.find("FAIL"), std::string::npos) << r.out;
}

TEST(RunCli, PlantedFaultIsANumericFailure) {
  const auto r = run_cli("run --mode all_gather --cp 2 --dtype fp64" + kSmall);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  setenv("GDNV_FAULT", "allgather_no_reduce_scatter", 1);
  const auto planted = run_cli("run --mode all_gather --cp 2 --dtype fp64" + kSmall);
  setenv("GDNV_FAULT", "no_such_fault", 1);
  const auto unknown = run_cli("run --mode all_gather --cp 2 --dtype fp64" + kSmall);
  unsetenv("GDNV_FAULT");
  EXPECT_EQ(planted.code, 1) << planted.out << planted.err;
  EXPECT_NE(planted.out.find("FAIL"), std::string::npos) << planted.out;
  EXPECT_EQ(unknown.code, 3) << unknown.out << unknown.err;
  EXPECT_NE(unknown.err.find("GDNV_FAULT='no_such_fault' is not a known fault"), std::string::npos) << unknown.err;
}

TEST(RunCli, IllegalCombinationsExitThreeWithTheFix) {
  struct Case {
    std::string args, message;
  };
  const std::vector<Case> cases = {
      {"--mode auto --cp 2", "use one of 'headwise', 'chunkwise', 'all_gather'"},
      {"--mode chunkwise --cp 2 --tp 4", "divisible by tp = 4"},
      {"--mode chunkwise --cp 2 --format sbhd --seq-len 16 --batch 2", "batch"},
      {"--mode chunkwise --cp 2 --gates mild", "unknown gate regime 'mild': use default, weak, strong or extreme"},
      {"--mode headwise --cp 4", "use linear_cp_mode='chunkwise' or 'all_gather'"},
      {"--mode all_gather --cp 2 --deterministic", "'all_gather' is not deterministic"},
      {"--mode chunkwise --cp 2 --allgather-cp", "set allgather_cp=False"},
      {"--mode all_gather --cp 2 --inference", "use linear_cp_mode='headwise' for inference"},
      {"--mode all_gather --cp 2 --format sbhd --seq-len 16", "supports THD input only"},
      {"--mode headwise --cp 2 --lengths 16,6", "not divisible by 2*cp = 4"},
      {"--mode headwise --cp 2 --dynamic-cp 3", "dynamic CP size 3 does not divide"},
      {"--mode headwise --cp 2 --dtype fp16", "--dtype 'fp16' is not supported"},
      {"--mode headwise --cp 2 --lengths 16,x", "--lengths: 'x' is not an integer"},
  };
  for (const auto& c : cases) {
    const auto r = run_cli("run " + c.args + " --hidden 24 --num-key-heads 2 --num-value-heads 4");
    EXPECT_EQ(r.code, 3) << c.args << "\n" << r.out << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

}  // namespace
}  // namespace gdnv
