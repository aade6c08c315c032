// gdn-verify train through the real binary: the table, CSV columns, JSON, the SVG (where gnuplot is
// installed), exit codes, and every bad-input message.
#include <cstdlib>
#include <filesystem>
#include <regex>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_testing.hpp"
#include "core/file.hpp"
#include "mpirun_testing.hpp"

namespace gdnv {
namespace {

using testing::contains;
using testing::run_cli;

// One layer, hidden 16, V = 16, 2 steps: a second of training per run.
const std::string kSmall =
    " --layers 1 --hidden 16 --num-key-heads 4 --num-value-heads 4 --key-head-dim 4 --value-head-dim 4 --vocab 16"
    " --steps 2 --docs-per-batch 8";

bool have_gnuplot() { return std::system("gnuplot --version >/dev/null 2>&1") == 0; }

TEST(TrainCli, PrintsTheTableAndWritesCsvAndJson) {
  const auto dir = testing::temp_dir("train");
  const std::string csv = (dir / "t.csv").string(), json = (dir / "t.json").string();
  const auto r =
      run_cli("train" + kSmall + " --mode cp1,chunkwise --dynamic-cp 1,2,4 --csv " + csv + " --json " + json);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  for (const char* part : {"gdn-verify train: modes=cp1,chunkwise cp=4 dynamic=1,2,4", "step  tokens  cp1",
                           "chunkwise@4", "chunkwise@1/2/4", "oracle", "noise band (cp1-reordered vs cp1", "PASS"})
    EXPECT_TRUE(contains(r.out, part)) << part << "\n" << r.out;
  const std::string text = read_file_text(csv);
  EXPECT_EQ(text.substr(0, text.find('\n')), "step,mode,cp,loss,grad_norm,effective_tokens,update_norm");
  // cp1, cp1-reordered, chunkwise static and dynamic, oracle: 5 runs of 2 steps.
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 11) << text;
  EXPECT_TRUE(contains(text, "\n1,chunkwise,1/2/4,")) << text;
  const auto j = nlohmann::json::parse(read_file_text(json));
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["runs"].size(), 5u);
  EXPECT_EQ(j[0]["verdicts"].size(), 2u);
  EXPECT_TRUE(j[0]["pass"].get<bool>());
  EXPECT_GT(j[0]["noise_band"]["floor"].get<double>(), 0.0);
  EXPECT_EQ(j[0]["noise_band"]["factor"].get<double>(), 6.0);
  std::filesystem::remove_all(dir);
}

TEST(TrainCli, WritesTheSvgWithGnuplot) {
  if (!have_gnuplot()) GTEST_SKIP() << "gnuplot is not installed: the SVG is not drawn here";
  const auto dir = testing::temp_dir("train");
  const std::string svg = (dir / "t.svg").string();
  const auto r = run_cli("train" + kSmall + " --mode headwise --svg " + svg);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const std::string text = read_file_text(svg);
  EXPECT_TRUE(contains(text, "<svg")) << text.substr(0, 200);
  EXPECT_TRUE(contains(text, "headwise@4"));
  // Step 0's zero |dloss| is left off the log scale, which would otherwise run down to 1e-300.
  EXPECT_FALSE(contains(text, "1e-300")) << "the |dloss| axis reaches 1e-300";
  std::filesystem::remove_all(dir);
}

// --progress in a pipe: one stderr line per run (oracle, cp1-reordered, each mode, cp1) with the steps done,
// the run starting, the time and an ETA; stdout, the report, is byte-identical to a run without it.
TEST(TrainCli, ProgressIsOneStderrLinePerRunAndLeavesStdoutAsItWas) {
  const auto quiet = run_cli("train" + kSmall + " --mode headwise");
  const auto shown = run_cli("train" + kSmall + " --mode headwise --progress");
  ASSERT_EQ(shown.code, 0) << shown.out << shown.err;
  EXPECT_EQ(quiet.err, "") << "a pipe without --progress is quiet";
  const std::regex time("[0-9]+\\.[0-9]+ s");  // each run's time
  EXPECT_EQ(std::regex_replace(shown.out, time, ""), std::regex_replace(quiet.out, time, ""));
  EXPECT_TRUE(std::regex_match(
      shown.err, std::regex("train: 0/4 runs \\(0/8 steps\\), now oracle \\(fp64\\), [0-9:]+ s? ?elapsed\n"
                            "train: 1/4 runs \\(2/8 steps\\), now cp1-reordered@1, .* elapsed, ETA .*\n"
                            "train: 2/4 runs \\(4/8 steps\\), now headwise@4, .*\n"
                            "train: 3/4 runs \\(6/8 steps\\), now cp1@1, .*\n"
                            "train: 4/4 runs \\(8 steps\\) in .*\n")))
      << shown.err;
}

// On a terminal (a pseudo-terminal from script(1)) the progress line is rewritten in place and ended once.
TEST(TrainCli, OnATerminalProgressRewritesOneLine) {
  if (std::system("script --version >/dev/null 2>&1") != 0) GTEST_SKIP() << "script(1) is not installed";
  const auto r =
      testing::run_shell("script -qec '" + std::string(GDNV_CLI) + " train" + kSmall + " --mode headwise' /dev/null");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "\rtrain: 2/4 runs (4/8 steps), now headwise@4, ")) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("\rtrain: 4/4 runs \\(8 steps\\) in [0-9]+ s\x1b\\[K\r?\n")))
      << r.out;
}

TEST(TrainCli, SeedsPrintApartThenEachRunsMeanLossAndDlossOverTheSeeds) {
  const auto r = run_cli("train" + kSmall + " --mode headwise --seeds 2");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "pass\n\nseed 1\n")) << "seed blocks apart\n" << r.out;
  EXPECT_TRUE(contains(r.out,
                       "\n\nmeans over 2 seeds (|dloss| per step vs cp1; cp1-reordered's is the noise band)\n"
                       "run                      final loss    mean loss   max|dloss|  mean|dloss|\n"))
      << r.out;
  // Every run's mean loss over the seeds, the |dloss| columns for the runs compared with cp1.
  for (const char* run : {"cp1  ", "cp1-reordered", "headwise@4", "oracle  "})
    EXPECT_TRUE(std::regex_search(r.out, std::regex("\n" + std::string(run) + " +2\\.[0-9]{6} +2\\.[0-9]{6} ")))
        << run << "\n"
        << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("\ncp1  +2\\.[0-9]{6} +2\\.[0-9]{6} +- +-\n"))) << r.out;
}

TEST(TrainCli, APlantedTrainingFaultFailsWithExitOne) {
  const auto r = run_cli("train" + kSmall + " --mode headwise --dynamic-cp 1,2,4 --dtype fp64");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  setenv("GDNV_FAULT", "dynamic_cp_grads_over_static_world", 1);
  const auto f = run_cli("train" + kSmall + " --mode headwise --dynamic-cp 1,2,4 --dtype fp64");
  unsetenv("GDNV_FAULT");
  EXPECT_EQ(f.code, 1) << f.out << f.err;
  EXPECT_TRUE(contains(f.out, "FAIL")) << f.out;
}

// Under mpirun every run is the same trajectory, bit for bit, as on the in-process world.
TEST(TrainCli, MpiWorldTrainsTheInProcessTrajectory) {
  const auto dir = testing::temp_dir("train");
  const std::string mpi = (dir / "mpi.csv").string(), inproc = (dir / "inproc.csv").string();
  const std::string args = " train" + kSmall + " --mode chunkwise --dynamic-cp 1,2,4 --csv ";
  testing::prepare_mpirun_env();
  const std::string cmd =
      std::string(GDNV_MPIEXEC) + " --oversubscribe -np 4 " + GDNV_CLI + args + mpi + " --world mpi >/dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  ASSERT_EQ(run_cli(args + inproc).code, 0);
  EXPECT_EQ(read_file_text(mpi), read_file_text(inproc));
  std::filesystem::remove_all(dir);
}

struct BadInput {
  std::string args, message;
};

// train spells its options as run and plan do (--mode, --dynamic-cp); the old spellings still work, and
// defaults print as written.
TEST(TrainCli, OptionsAreSpelledAsRunSpellsThem) {
  const auto help = run_cli("train --help");
  EXPECT_TRUE(contains(help.out, "--mode arg")) << help.out;
  EXPECT_TRUE(contains(help.out, "--dynamic-cp arg")) << help.out;
  EXPECT_TRUE(contains(help.out, "--lr arg (=0.003)")) << help.out;
  const auto old = run_cli("train" + kSmall + " --modes headwise --dynamic 1,2");
  const auto now = run_cli("train" + kSmall + " --mode headwise --dynamic-cp 1,2");
  EXPECT_EQ(now.code, 0) << now.out << now.err;
  EXPECT_TRUE(contains(now.out, "gdn-verify train: modes=headwise cp=4 dynamic=1,2 ")) << now.out;
  EXPECT_EQ(old.code, now.code);
  EXPECT_EQ(old.out.substr(0, old.out.find('\n')), now.out.substr(0, now.out.find('\n')));
}

TEST(TrainCli, BadInputIsOneLineAndExitThree) {
  const BadInput cases[] = {
      {" --mode headwise,ring", "error: --mode: 'ring' is not a mode: list cp1, headwise, chunkwise or all_gather"},
      {" --dynamic-cp 1,3", "error: --dynamic-cp 1,3: 3 does not divide --cp 4: list divisors of the static CP size"},
      {" --dynamic-cp 1,x", "error: --dynamic-cp: 'x' is not an integer"},
      {" --mode headwise --modes chunkwise",
       "error: --mode and --modes are one option (--modes is its old spelling): pass --mode once"},
      {" --dynamic-cp 1,2 --dynamic 1,2",
       "error: --dynamic-cp and --dynamic are one option (--dynamic is its old spelling): pass --dynamic-cp once"},
      {" --recompute some", "error: --recompute 'some' is not supported: use full or none"},
      {" --mode all_gather --recompute none",
       "error: --recompute none with all_gather among the --mode list (the default list has it): micro-batch 1 of "
       "step 0 runs all_gather at cp=4"},
      {" --world ring", "error: --world 'ring' is not inproc or mpi"},
      {" --world mpi", "error: --world mpi needs the process started by mpirun with at least --cp processes"},
      {" --every 0", "error: --every must be at least 1"},
      {" --seeds 0", "error: --seeds must be at least 1"},
      {" --lr 0", "error: --lr 0 is not a learning rate: give a finite positive number"},
      {" --lr inf", "error: --lr inf is not a learning rate: give a finite positive number"},
      {" --lr nan", "error: --lr nan is not a learning rate: give a finite positive number"},
      {" --seed -1", "error: --seed '-1' is not a seed: give a non-negative integer of ASCII digits"},
      {" --steps 0", "error: --steps 0 is invalid: give at least 1 step"},
      {" --layers 0", "error: --layers 0 is invalid: give at least 1 layer"},
      {" --max-doc-length 200", "error: --micro-batch-tokens 128 is below --max-doc-length 200"},
      {" --dtype fp16", "error: "},
      {" --num-key-heads 2 --num-value-heads 4 --mode headwise", "error: "},
  };
  for (const BadInput& c : cases) {
    const auto r = run_cli("train" + c.args);  // every one fails before (or at) the first step
    EXPECT_EQ(r.code, 3) << c.args << "\n" << r.out << r.err;
    EXPECT_EQ(r.err.rfind(c.message, 0), 0u) << c.args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << c.args << "\n" << r.err;
  }
}

// Without gnuplot, --svg fails before any training and nothing is written.
TEST(TrainCli, SvgWithoutGnuplotFailsFirst) {
  const auto dir = testing::temp_dir("train");
  const std::string csv = (dir / "t.csv").string(), svg = (dir / "t.svg").string(), err = (dir / "err").string();
  const int status = std::system(("/usr/bin/env PATH=/nonexistent " + std::string(GDNV_CLI) + " train" + kSmall +
                                  " --csv " + csv + " --svg " + svg + " >/dev/null 2>" + err)
                                     .c_str());
  EXPECT_EQ(WEXITSTATUS(status), 3);
  EXPECT_TRUE(
      contains(read_file_text(err), "gnuplot failed: install gnuplot (apt-get install gnuplot-nox) or drop --svg"))
      << read_file_text(err);
  EXPECT_FALSE(std::filesystem::exists(csv));
  EXPECT_FALSE(std::filesystem::exists(svg));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gdnv
