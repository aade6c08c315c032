// gdn-verify plan through the real binary: the per-mode table, the sweep's CSV and SVG, run's
// validation messages for illegal geometries, and every bad-input message.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>

#include <gtest/gtest.h>

#include "cli_testing.hpp"
#include "core/file.hpp"

namespace gdnv {
namespace {

using testing::run_cli;

const std::string kQwen =
    " --hidden 2048 --num-key-heads 16 --num-value-heads 32 --key-head-dim 128 --value-head-dim 128";
const std::string kSmall = " --hidden 24 --num-key-heads 2 --num-value-heads 4 --key-head-dim 6 --value-head-dim 10";

std::size_t count_lines(const std::string& text) {
  return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
}

std::string write_temp(const std::filesystem::path& dir, const std::string& name, const std::string& text) {
  const auto path = (dir / name).string();
  std::ofstream(path) << text;
  return path;
}

TEST(PlanCli, PrintsEveryModeForTheReadmeGeometry) {
  const auto r = run_cli("plan" + kQwen + " --tp 2 --cp 4 --lengths 32768 --layers 24");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  for (const char* line :
       {"headwise    fwd  2 x", "headwise    bwd  2 x", "chunkwise   fwd  2 x", "chunkwise   bwd  2 x",
        "all_gather  fwd  -                 1 x", "all_gather  bwd  -", "fastest: ", "24 layers: "})
    EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
  EXPECT_EQ(r.out.find("illegal"), std::string::npos) << r.out;
}

// The collectives in nccl-tests' columns: algbw = bytes / time and busbw = algbw x 2(n-1)/n (all_reduce) or
// (n-1)/n, on every row; and a row's time is the h200 profile's link model: the tp all_reduce of headwise's
// forward is one call over 2 ranks inside a node, 2(n-1) = 2 steps of 5 us latency plus 32 MiB at 450 GB/s.
TEST(PlanCli, CollectivesInNcclTestsColumns) {
  const auto r = run_cli("plan" + kQwen + " --tp 2 --cp 4 --lengths 32768");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const std::regex row(R"((\w+) +(fwd|bwd) +(\w+) +(tp|cp) +(\d+) +(\d+) +(\d+) +([0-9.]+) +([0-9.]+) +([0-9.]+)\n)");
  int rows = 0;
  for (auto it = std::sregex_iterator(r.out.begin(), r.out.end(), row); it != std::sregex_iterator(); ++it, ++rows) {
    const auto& m = *it;
    const double n = std::stod(m[5]), bytes = std::stod(m[7]), us = std::stod(m[8]), algbw = std::stod(m[9]),
                 busbw = std::stod(m[10]);
    EXPECT_NEAR(algbw, bytes / (us * 1e-6) / 1e9, 0.01 * algbw + 0.01) << m[0];
    const double factor = m[3] == "all_reduce" ? 2 * (n - 1) / n : (n - 1) / n;
    EXPECT_NEAR(busbw, algbw * factor, 0.011) << m[0];
  }
  EXPECT_EQ(rows, 18) << r.out;  // headwise 5, chunkwise 8, all_gather 5 (mode x direction x kind x group)
  EXPECT_TRUE(
      testing::contains(r.out, "headwise    fwd  all_reduce      tp          2      1      33554432       84.6"))
      << "2 x 5 us + 33554432 B / 450 GB/s = 84.6 us\n"
      << r.out;
}

TEST(PlanCli, SweepWritesCsvAndSvgWithOneRowPerPointAndMode) {
  const auto dir = testing::temp_dir("plan");
  const std::string csv = (dir / "plan.csv").string(), svg = (dir / "plan.svg").string();
  const auto r =
      run_cli("plan" + kSmall + " --tp 1 --cp 2 --sweep cp=1,2 --sweep seq=64..256 --csv " + csv + " --svg " + svg);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const std::string table = read_file_text(csv);
  EXPECT_EQ(count_lines(table), 1u + 2 * 3 * 3) << table;  // header, cp x seq (64, 128, 256) x mode
  EXPECT_EQ(table.rfind("cp,tp,micro_batch,micro_batch_cp,tokens,mode,legal,", 0), 0u) << table;
  const std::string plot = read_file_text(svg);
  for (const char* title : {"<svg", "headwise cp=2", "chunkwise cp=1", "all_gather cp=2"})
    EXPECT_NE(plot.find(title), std::string::npos) << title;
  std::filesystem::remove_all(dir);
}

TEST(PlanCli, ReadsTheLengthDistributionAndTheHardwareProfile) {
  const auto dir = testing::temp_dir("plan");
  const auto dist = write_temp(dir, "lengths.txt", "64 2\n# one long sequence\n\n128\n");
  const auto hw = write_temp(dir, "slow.json", R"({"name": "slow", "bf16_tflops": 1, "gpus_per_node": 4})");
  const auto r = run_cli("plan" + kSmall + " --tp 1 --cp 2 --length-dist " + dist + " --hw " + hw);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("256 tokens (3 packed sequences, THD)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("hw=slow (4 GPUs per node)"), std::string::npos) << r.out;
  std::filesystem::remove_all(dir);
}

// The same geometry through run and plan: the same error line, exit 3; without --mode, plan lists
// the mode as illegal with that message.
TEST(PlanCli, IllegalGeometriesGiveRunsMessages) {
  const std::string odd_heads =
      " --hidden 24 --num-key-heads 2 --num-value-heads 3 --key-head-dim 6 --value-head-dim 10";
  const std::vector<std::string> cases = {
      kSmall + " --mode auto --cp 2 --tp 1 --lengths 16,8",
      kSmall + " --mode headwise --cp 4 --tp 1 --lengths 16,8",
      kSmall + " --mode chunkwise --cp 2 --tp 4 --lengths 16,8",
      kSmall + " --mode chunkwise --cp 2 --tp 1 --format sbhd --seq-len 16 --batch 2",
      kSmall + " --mode all_gather --cp 2 --tp 1 --format sbhd --seq-len 16",
      kSmall + " --mode all_gather --cp 2 --tp 1 --deterministic --lengths 16,8",
      kSmall + " --mode chunkwise --cp 2 --tp 1 --deterministic --lengths 16,8",
      kSmall + " --mode chunkwise --cp 2 --tp 1 --inference --lengths 16,8",
      kSmall + " --mode chunkwise --cp 2 --tp 1 --allgather-cp --lengths 16,8",
      kSmall + " --mode chunkwise --cp 4 --tp 1 --dynamic-cp 3 --lengths 16,8",
      kSmall + " --mode headwise --cp 2 --tp 1 --lengths 10,8",
      kSmall + " --mode headwise --cp 2 --tp 1 --lengths 9,8",
      odd_heads + " --mode headwise --cp 2 --tp 1 --lengths 16,8",
      kSmall + " --mode chunkwise --cp 4 --tp 1 --dynamic-cp 2,4 --lengths 4,12",
  };
  for (const std::string& args : cases) {
    const auto run = run_cli("run" + args);
    const auto plan = run_cli("plan" + args);
    EXPECT_EQ(run.code, 3) << args << "\n" << run.out << run.err;
    EXPECT_EQ(plan.code, 3) << args << "\n" << plan.out << plan.err;
    EXPECT_NE(run.err.find("error: "), std::string::npos) << args << "\n" << run.err;
    EXPECT_EQ(plan.err, run.err) << args;
  }
  const auto run = run_cli("run" + kSmall + " --mode headwise --cp 4 --lengths 16,8");
  const auto plan = run_cli("plan" + kSmall + " --cp 4 --tp 1 --lengths 16,8");
  EXPECT_EQ(plan.code, 0) << plan.out << plan.err;
  const std::string message = run.err.substr(std::string("error: ").size(), run.err.size() - 8);
  EXPECT_NE(plan.out.find("headwise    illegal: " + message + "\n"), std::string::npos) << message << "\n" << plan.out;
  EXPECT_NE(plan.out.find("chunkwise   fwd"), std::string::npos) << plan.out;
}

// CP=1 splits nothing: odd lengths plan in every mode, THD and SBHD, also as a dynamic micro-batch;
// the same lengths at CP 2 are run's error.
TEST(PlanCli, Cp1AcceptsAnyLength) {
  for (const char* input : {" --lengths 5,9", " --format sbhd --seq-len 7 --batch 2"}) {
    const auto r = run_cli("plan" + kSmall + " --tp 1 --cp 1" + input);
    EXPECT_EQ(r.code, 0) << input << "\n" << r.out << r.err;
    EXPECT_EQ(r.out.find("illegal"), std::string::npos) << r.out;
  }
  const auto dynamic = run_cli("plan" + kSmall + " --tp 1 --cp 2 --dynamic-cp 1 --lengths 5,9 --mode chunkwise");
  EXPECT_EQ(dynamic.code, 0) << dynamic.out << dynamic.err;
  EXPECT_NE(dynamic.out.find("micro-batch 1/1: cp=1, 14 tokens"), std::string::npos) << dynamic.out;
  const auto cp2 = run_cli("plan" + kSmall + " --tp 1 --cp 2 --lengths 5,9 --mode chunkwise");
  EXPECT_EQ(cp2.code, 3) << cp2.out << cp2.err;
  EXPECT_NE(cp2.err.find("sequence lengths 5,9 are not divisible by cp = 2"), std::string::npos) << cp2.err;
}

// One --lengths per --dynamic-cp entry: each micro-batch planned on its own packing at its own CP size,
// as run runs it.
TEST(PlanCli, DynamicCpTakesOneLengthsListPerMicroBatch) {
  const auto r = run_cli("plan" + kSmall +
                         " --tp 1 --cp 4 --dynamic-cp 4,2,1 --lengths 8,40,16 --lengths 4,12 "
                         "--lengths 5 --mode chunkwise");
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  for (const char* line : {"micro-batch 1/3: cp=4, 64 tokens (3 packed sequences, THD)",
                           "micro-batch 2/3: cp=2, 16 tokens (2 packed sequences, THD)",
                           "micro-batch 3/3: cp=1, 5 tokens (1 sequence, THD)"})
    EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
}

TEST(PlanCli, BadInputExitsThreeNamingTheFix) {
  const auto dir = testing::temp_dir("plan");
  const auto bad_line = write_temp(dir, "bad.txt", "64\nabc\n");
  const auto empty = write_temp(dir, "empty.txt", "# nothing\n");
  const auto not_json = write_temp(dir, "not.json", "{");
  const auto array = write_temp(dir, "array.json", "[1]");
  const auto unknown = write_temp(dir, "unknown.json", R"({"tflops": 1})");
  const auto negative = write_temp(dir, "negative.json", R"({"hbm_gbps": -1})");
  const auto fraction = write_temp(dir, "fraction.json", R"({"gpus_per_node": 1.5})");
  const auto unnamed = write_temp(dir, "unnamed.json", R"({"name": 7})");
  struct Case {
    std::string args, message;
  };
  const std::string geo = kSmall + " --tp 1 --cp 2";
  const std::vector<Case> cases = {
      {kSmall + " --cp 2 --lengths 16", "gdn-verify plan: the option '--tp' is required but missing"},
      {geo + " --sweep tp=1,2", "--sweep tp=1,2: expected cp=LIST or seq=LIST"},
      {geo + " --sweep seq=4q", "--sweep seq=4q: '4q' is not a positive size: write e.g. 4096, 4k or 1m"},
      {geo + " --sweep seq=8k..4k", "--sweep seq=8k..4k: range '8k..4k' ends below its start"},
      {geo + " --lengths 16 --length-dist " + empty, "both --lengths and --length-dist given: use one of them"},
      {geo, "no sequence lengths: give --lengths 32768, --length-dist FILE, or --sweep seq=4k..128k"},
      {geo + " --format sbhd", "SBHD input needs --seq-len S"},
      {geo + " --length-dist " + (dir / "missing.txt").string(), "missing.txt: no such file"},
      {geo + " --length-dist " + bad_line, "bad.txt:2: 'abc' is not 'LENGTH [COUNT]'"},
      {geo + " --length-dist " + empty, "empty.txt: no lengths"},
      {geo + " --lengths 16 --hw h100", "--hw 'h100' is neither a built-in profile nor a file: use h200"},
      {geo + " --lengths 16 --hw " + not_json, "not.json: not JSON"},
      {geo + " --lengths 16 --hw " + array, "array.json: expected a JSON object"},
      {geo + " --lengths 16 --hw " + unknown, "unknown.json: unknown key 'tflops': use name, gpus_per_node"},
      {geo + " --lengths 16 --hw " + negative, "negative.json: 'hbm_gbps' must be a positive number"},
      {geo + " --lengths 16 --hw " + fraction, "fraction.json: 'gpus_per_node' must be a positive integer"},
      {geo + " --lengths 16 --hw " + unnamed, "unnamed.json: 'name' must be a string"},
      {geo + " --lengths 16 --layers 0", "--layers 0 is invalid: give at least 1 layer"},
      {geo + " --lengths 16 --dtype fp16", "--dtype 'fp16' is not supported: use bf16, fp32 or fp64"},
      {kSmall + " --tp 4 --cp 1 --lengths 16", "no linear_cp_mode is legal for this geometry"},
      {kSmall + " --tp 1 --cp 4 --dynamic-cp 4,2,1 --lengths 8 --lengths 4",
       "--lengths given 2 times for 3 micro-batch(es) (--dynamic-cp 4,2,1): give one --lengths for every "
       "micro-batch, or one per --dynamic-cp entry in its order"},
      {kSmall + " --tp 1 --cp 4 --dynamic-cp 4,2 --lengths 8 --lengths 4 --sweep seq=4k..8k",
       "--sweep seq=4k..8k gives every micro-batch one sequence: drop it, or give one --lengths"},
  };
  for (const Case& c : cases) {
    const auto r = run_cli("plan" + c.args);
    EXPECT_EQ(r.code, 3) << c.args << "\n" << r.out << r.err;
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
    EXPECT_EQ(count_lines(r.err), 1u) << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << "\n" << r.err;
  }
  std::filesystem::remove_all(dir);
}

// Without gnuplot nothing is written, not even the CSV asked for alongside.
TEST(PlanCli, SvgWithoutGnuplotWritesNothing) {
  const auto dir = testing::temp_dir("plan");
  const std::string csv = (dir / "plan.csv").string(), svg = (dir / "plan.svg").string(),
                    err = (dir / "err.txt").string();
  const std::string command = "/usr/bin/env PATH=/nonexistent " + std::string(GDNV_CLI) + " plan" + kSmall +
                              " --tp 1 --cp 2 --lengths 16 --csv " + csv + " --svg " + svg + " >/dev/null 2>" + err;
  const int status = std::system(command.c_str());
  EXPECT_EQ(WEXITSTATUS(status), 3);
  EXPECT_NE(read_file_text(err).find("gnuplot failed: install gnuplot (apt-get install gnuplot-nox) or drop --svg"),
            std::string::npos)
      << read_file_text(err);
  EXPECT_FALSE(std::filesystem::exists(csv));
  EXPECT_FALSE(std::filesystem::exists(svg));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gdnv
