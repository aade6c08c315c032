// gdn-verify run through the real binary: verdicts, exit codes and the validation messages.
#include <algorithm>
#include <cstdlib>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <regex>

#include "cli_testing.hpp"
#include "cp/illegal.hpp"

namespace gdnv {
namespace {

using testing::run_cli;

const std::string kSmall =
    " --lengths 16,8 --hidden 24 --num-key-heads 2 --num-value-heads 4 --key-head-dim 6 "
    "--value-head-dim 10";

// headwise is this project's default (as the upstream PR's); upstream Megatron-Core's default is chunkwise.
TEST(RunCli, HelpNamesWhoseDefaultHeadwiseIs) {
  const testing::CliResult r = testing::run_cli("run --help");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(testing::contains(r.out, "--mode arg (=headwise)")) << r.out;
  EXPECT_TRUE(testing::contains(r.out, "upstream Megatron-Core's is")) << r.out;
  EXPECT_FALSE(testing::contains(r.out, "the upstream default")) << r.out;
}

TEST(RunCli, LegalModesPassAndReportTheirCollectives) {
  const auto headwise = run_cli("run --mode headwise --cp 2 --dtype fp64" + kSmall);
  EXPECT_EQ(headwise.code, 0) << headwise.out << headwise.err;
  EXPECT_NE(headwise.out.find("all_to_all_v: 2 calls"), std::string::npos) << headwise.out;
  EXPECT_NE(headwise.out.find("PASS"), std::string::npos);
  const auto all_gather = run_cli("run --mode all_gather --cp 2 --dtype bf16" + kSmall);
  EXPECT_EQ(all_gather.code, 0) << all_gather.out << all_gather.err;
  EXPECT_NE(all_gather.out.find("reduce_scatter: 1 call"), std::string::npos) << all_gather.out;
}

TEST(RunCli, StagesPrintsEveryStagePassingAndWhatWouldPassElementwise) {
  const auto r = run_cli("run --mode chunkwise --cp 2 --dtype fp64 --stages" + kSmall);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  for (const char* stage :
       {"stage::x_norm", "stage::boundary_state", "stage_grad::x_norm", "stage_grad::boundary_state"})
    EXPECT_NE(r.out.find(std::string("  ") + stage + " "), std::string::npos) << stage << "\n" << r.out;
  // The histogram is bars on one decade axis, never decade:count tokens.
  EXPECT_TRUE(std::regex_search(r.out, std::regex("min_atol   min_rtol   exact  1e-[0-9]+ \\.\\. 1e-[0-9]+ \\(one "
                                                  "column a decade\\)\n")))
      << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("\n  out  +[0-9.e+-]+ +[0-9.e+-]+ +[0-9]+  \\|[^|\n0-9:]+\\|\n")))
      << r.out;
  EXPECT_EQ(r.out.find(" 1e-10:"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("first divergence:"), std::string::npos) << r.out;
}

TEST(RunCli, AFailingRunEndsWithTheFirstDivergenceInTextAndJson) {
  const std::string json = ::testing::TempDir() + "run_first_divergence.json";
  setenv("GDNV_FAULT", "conv_halo_wrong_rank", 1);
  const auto r = run_cli("run --mode chunkwise --cp 2 --dtype fp64 --json " + json + kSmall);
  unsetenv("GDNV_FAULT");
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  // rows 12..14 of contiguous rank 1 are the first sequence's last zigzag chunk, rank 0's
  const std::string line =
      "first divergence: stage::conv (forward, rank 1 of 2, rows 12..14 contiguous; zigzag rank 0): rel_rms ";
  EXPECT_NE(r.out.find("\n" + line), std::string::npos) << r.out;
  EXPECT_TRUE(r.out.ends_with("> gate 1.000e-10\nFAIL\n")) << r.out;
  const auto report = nlohmann::json::parse(read_file_text(json));
  const auto& d = report.at(0).at("first_divergence");
  EXPECT_EQ(d.at("tensor"), "stage::conv");
  EXPECT_EQ(d.at("direction"), "forward");
  EXPECT_EQ(d.at("rank"), 1);
  EXPECT_EQ(d.at("rows"), nlohmann::json({12, 14}));
  EXPECT_EQ(d.at("layout"), "contiguous");
  EXPECT_EQ(d.at("other_layout_ranks"), nlohmann::json({0}));
  EXPECT_TRUE(report.at(0).at("tensors").at(0).contains("min_rtol"));
  // The grid of error / gate by rank: rank 1 (the halo's reader) is outside from stage::conv on, rank 0 within.
  EXPECT_NE(r.out.find("  error / gate over each rank's own elements (above 1 fails):\n"), std::string::npos) << r.out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex("\n  stage::conv +([0-9.e+-]+) +([0-9.e+-]+) +([0-9.e+-]+)\n")))
      << r.out;
  EXPECT_LT(std::stod(m[1]), 1) << r.out;
  EXPECT_GT(std::stod(m[2]), 1) << r.out;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex("\n  stage::in_proj +([0-9.e+-]+) +([0-9.e+-]+) +")));
  EXPECT_LT(std::stod(m[2]), 1) << "before the conv rank 1 is right\n" << r.out;
}

// Chunkwise with TP and dynamic CP, in the regime where the state fold carries over every rank.
TEST(RunCli, ChunkwiseRunsWithTpAndDynamicCp) {
  const auto r = run_cli("run --mode chunkwise --cp 4 --tp 2 --dynamic-cp 1,2,4 --gates weak --dtype fp64" + kSmall);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("micro-batch 3/3 (cp=4)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("reduce_scatter: 1 call"), std::string::npos) << r.out;  // the conv halo's gradient
  EXPECT_EQ(r.out.find("FAIL"), std::string::npos) << r.out;
}

// As upstream: headwise when no mode is named, and the active configuration once, first, when CP is in use.
TEST(RunCli, DefaultsToHeadwiseAndPrintsTheUpstreamConfigLine) {
  const auto r = run_cli(
      "run --cp 2 --tp 2 --dtype fp64 --lengths 16,8 --hidden 24 --num-key-heads 4 "
      "--num-value-heads 8 --key-head-dim 6 --value-head-dim 10");
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(r.out.rfind("[GDN CP] linear_cp_mode=headwise TP=2 max_CP=2 key_heads=4 value_heads=8\n"
                        "gdn-verify run: mode=headwise cp=2 tp=2 ",
                        0),
            0u)
      << r.out;
  const auto dynamic = run_cli("run --mode chunkwise --cp 2 --dynamic-cp 1,2 --dtype fp64" + kSmall);
  EXPECT_EQ(dynamic.code, 0) << dynamic.out << dynamic.err;
  EXPECT_EQ(dynamic.out.rfind("[GDN CP] linear_cp_mode=chunkwise TP=1 max_CP=2 ", 0), 0u) << dynamic.out;
  const auto cp1 = run_cli("run --cp 1 --dtype fp64" + kSmall);
  EXPECT_EQ(cp1.code, 0) << cp1.out << cp1.err;
  EXPECT_EQ(cp1.out.find("[GDN CP]"), std::string::npos) << "no CP in use: " << cp1.out;
}

// Nothing is split at CP=1: odd lengths pass in every mode, THD and SBHD, at the static size and as a
// dynamic CP=1 micro-batch inside a static 2.
TEST(RunCli, Cp1AcceptsAnyLength) {
  const std::string geometry =
      " --hidden 24 --num-key-heads 2 --num-value-heads 4 --key-head-dim 6 --value-head-dim 10";
  for (const char* mode : {"headwise", "chunkwise", "all_gather"})
    for (const std::string input : {" --format thd --lengths 5,9", " --format sbhd --seq-len 7 --batch 2"}) {
      const auto r = run_cli(std::string("run --mode ") + mode + " --cp 1 --dtype fp64" + input + geometry);
      EXPECT_EQ(r.code, 0) << mode << input << "\n" << r.out << r.err;
      EXPECT_NE(r.out.find("PASS"), std::string::npos) << r.out;
    }
  const auto dynamic = run_cli("run --mode headwise --cp 2 --dynamic-cp 1 --dtype fp64 --lengths 5,9" + geometry);
  EXPECT_EQ(dynamic.code, 0) << dynamic.out << dynamic.err;
  EXPECT_NE(dynamic.out.find("micro-batch 1/1 (cp=1)"), std::string::npos) << dynamic.out;
}

// The upstream dynamic-CP job: each micro-batch its own packing, padded for its own CP size only (4, 12
// are not multiples of 2*4; 5 not of 2*2), its own inputs and its own oracle.
TEST(RunCli, DynamicCpTakesOneLengthsListPerMicroBatch) {
  const auto dir = testing::temp_dir("run_lengths");
  const std::string json = (dir / "run.json").string();
  const auto r = run_cli(
      "run --mode chunkwise --cp 4 --dynamic-cp 4,2,1 --gates weak --dtype fp64 --lengths 8,40,16 "
      "--lengths 4,12 --lengths 5 --hidden 24 --num-key-heads 2 --num-value-heads 4 --json " +
      json);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  for (const char* line : {"micro-batch 1/3 (cp=4), lengths 8,40,16", "micro-batch 2/3 (cp=2), lengths 4,12",
                           "micro-batch 3/3 (cp=1), lengths 5", "PASS"})
    EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
  EXPECT_EQ(r.out.find("FAIL"), std::string::npos) << r.out;
  const auto report = nlohmann::json::parse(read_file_text(json));
  ASSERT_EQ(report.size(), 3u);
  EXPECT_EQ(report[1]["lengths"], (std::vector<std::int64_t>{4, 12}));
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

// The CLI's command line for a row of the illegal-combination table; empty for a micro-batch the CLI
// cannot express (a per-micro-batch group, a THD batch > 1: run packs THD input itself).
std::string run_args(const cp::IllegalRule& rule) {
  const cp::CpConfig& c = rule.config;
  const cp::MicroBatchShape& mb = rule.micro_batch;
  if (mb.has_cp_group || mb.local_cp_size != 0 || (mb.format == cp::Format::Thd && mb.batch != 1)) return "";
  std::string args = "run --mode " + rule.mode + " --cp " + std::to_string(c.cp) + " --tp " + std::to_string(c.tp) +
                     " --hidden 32 --num-key-heads " + std::to_string(rule.Hk) + " --num-value-heads " +
                     std::to_string(rule.Hv);
  for (std::size_t i = 0; i < c.dynamic_cp.size(); ++i)
    args += (i ? "," : " --dynamic-cp ") + std::to_string(c.dynamic_cp[i]);
  if (c.deterministic) args += " --deterministic";
  if (c.allgather_cp) args += " --allgather-cp";
  if (c.inference) args += " --inference";
  if (mb.format == cp::Format::Sbhd)
    return args + " --format sbhd --seq-len " + std::to_string(mb.lengths[0]) + " --batch " + std::to_string(mb.batch);
  args += " --lengths ";
  for (std::size_t i = 0; i < mb.lengths.size(); ++i) args += (i ? "," : "") + std::to_string(mb.lengths[i]);
  return args;
}

// Every rule of the table the command line can express: exit 3, its fix on one line, nothing on stdout.
TEST(RunCli, EveryIllegalCombinationExitsThreeWithItsFix) {
  int run = 0;
  for (const cp::IllegalRule& rule : cp::illegal_rules()) {
    const std::string args = run_args(rule);
    if (args.empty()) continue;
    ++run;
    const auto r = run_cli(args);
    EXPECT_EQ(r.code, 3) << args << "\n" << r.out << r.err;
    EXPECT_NE(r.err.find(rule.fragment), std::string::npos) << rule.name << ": " << args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_TRUE(r.out.empty()) << "rejected before any output: " << r.out;
  }
  EXPECT_GE(run, 15) << "the table's configuration rules all reach the command line";
}

// An illegal combination's fix is also given in the CLI's flags, not only in the upstream layer's kwargs.
TEST(RunCli, AnIllegalCombinationNamesTheFixInCliFlags) {
  const auto r = run_cli("run --mode chunkwise --deterministic" + kSmall);
  EXPECT_EQ(r.code, 3) << r.out << r.err;
  EXPECT_TRUE(
      r.err.ends_with("deterministic=False (in gdn-verify's flags: --mode headwise, or drop --deterministic)\n"))
      << r.err;
  const auto g = run_cli("run --mode all_gather --format sbhd --cp 2");
  EXPECT_EQ(g.code, 3) << g.out << g.err;
  EXPECT_TRUE(g.err.ends_with("(in gdn-verify's flags: --format thd, or --mode headwise or chunkwise)\n")) << g.err;
}

TEST(RunCli, IllegalCombinationsExitThreeWithTheFix) {
  struct Case {
    std::string args, message;
  };
  const std::vector<Case> cases = {
      {"--mode chunkwise --cp 2 --gates mild", "unknown gate regime 'mild': use default, weak, strong or extreme"},
      {"--mode headwise --cp 2 --dtype fp16", "--dtype 'fp16' is not supported"},
      {"--mode headwise --cp 2 --lengths 16,x", "--lengths: 'x' is not an integer"},
      {"--mode chunkwise --cp 4 --dynamic-cp 4,2,1 --lengths 8 --lengths 4",
       "--lengths given 2 times for 3 micro-batch(es) (--dynamic-cp 4,2,1): give one --lengths for every "
       "micro-batch, or one per --dynamic-cp entry in its order"},
      {"--mode chunkwise --cp 2 --lengths 8 --lengths 4", "--lengths given 2 times for 1 micro-batch(es): give one"},
      {"--mode chunkwise --cp 4 --dynamic-cp 2,4 --lengths 4,12 --lengths 4,12",
       "micro-batch 2/2 (cp=4, lengths 4,12): sequence lengths 4,12 are not divisible by 2*cp = 8"},
      {"--mode chunkwise --cp 2 --format sbhd --seq-len 7", "not divisible by cp = 2"},
      // Were a SIGFPE and a run that "did not complete" (geometry_spec, cli/lists.cpp).
      {"--mode headwise --cp 1 --format sbhd --seq-len 0", "SBHD needs at least one token"},
      {"--mode headwise --cp 1 --format sbhd --batch 0", "SBHD needs at least one token"},
      {"--mode headwise --cp 1 --lengths 0,0", "--lengths 0,0 holds no token"},
  };
  for (const auto& c : cases) {
    const auto r = run_cli("run " + c.args + " --hidden 24 --num-key-heads 2 --num-value-heads 4");
    EXPECT_EQ(r.code, 3) << c.args << "\n" << r.out << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_TRUE(r.out.empty()) << "rejected before any output: " << r.out;
  }
}

}  // namespace
}  // namespace gdnv
