// The MPI transport's failure semantics, end to end: each test launches `mpirun --oversubscribe -np 4
// comm_mpi_scenario <scenario>` (as root where needed: the harness sets OpenMPI's opt-in variables)
// and checks the job's exit code and every rank's error line.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/file.hpp"
#include "tests/mpirun_testing.hpp"

namespace gdnv {
namespace {

struct MpiRun {
  int code;
  std::string output;  // stdout and stderr of every rank
  double seconds;
};

MpiRun mpirun(const std::string& scenario, int timeout_ms) {
  testing::prepare_mpirun_env();
  const auto log =
      std::filesystem::temp_directory_path() / ("gdnv_mpi_" + std::to_string(::getpid()) + "_" + scenario + ".log");
  const std::string command = std::string(GDNV_MPIEXEC) + " --oversubscribe -np 4 " + GDNV_MPI_SCENARIO + " " +
                              scenario + " " + std::to_string(timeout_ms) + " >" + log.string() + " 2>&1";
  const auto start = std::chrono::steady_clock::now();
  const int status = std::system(command.c_str());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  MpiRun run{WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_file_text(log.string()), seconds};
  std::filesystem::remove(log);
  return run;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Every rank's timeout line names exactly the ranks that did not arrive: each line of the job's output
// that says "timed out" is "error: rank R: <what>" for R one of `timing_out` (at least one such line; the
// first rank to fail aborts the job, so the others may print a "failed" line or none).
void expect_timeout_lines(const MpiRun& run, const std::vector<int>& timing_out, const std::string& what) {
  std::istringstream lines(run.output);
  int seen = 0;
  for (std::string line; std::getline(lines, line);) {
    if (!has(line, "timed out")) continue;
    ++seen;
    bool named = false;
    for (const int r : timing_out) named = named || line == "error: rank " + std::to_string(r) + ": " + what;
    EXPECT_TRUE(named) << "a timeout line other than\n  error: rank R: " << what << "\n" << run.output;
  }
  EXPECT_GT(seen, 0) << run.output;
}

TEST(CommMpiFailure, AgreeingRanksExitCleanly) {
  const MpiRun run = mpirun("ok", 10000);
  EXPECT_EQ(run.code, 0) << run.output;
  EXPECT_FALSE(has(run.output, "error:")) << run.output;
}

TEST(CommMpiFailure, ThrowingRankFailsEveryPeerWithoutWaitingForTheTimeout) {
  const MpiRun run = mpirun("throw", 20000);
  EXPECT_EQ(run.code, 3) << run.output;  // a gdnv::Error aborts the job with 3
  EXPECT_LT(run.seconds, 5.0) << "the 20 s timeout must not be needed";
  EXPECT_TRUE(has(run.output, "error: rank 2: planted failure on rank 2\n")) << run.output;
  for (const int r : {0, 1, 3})
    EXPECT_TRUE(has(run.output, "error: rank " + std::to_string(r) +
                                    ": all_gather on group of 4 ranks [0, 1, 2, 3] (call #1): rank 2 failed: "
                                    "planted failure on rank 2\n"))
        << "rank " << r << ":\n"
        << run.output;
}

TEST(CommMpiFailure, SkippedCollectiveTimesOutNamingTheBusyRank) {
  const MpiRun run = mpirun("skip", 300);
  EXPECT_EQ(run.code, 3) << run.output;
  expect_timeout_lines(run, {0, 1, 2},
                       "all_gather on group of 4 ranks [0, 1, 2, 3] (call #1): timed out after 0.3 s: rank 3 did not "
                       "arrive (rank 3 did not answer: busy outside any collective)");
}

TEST(CommMpiFailure, TimeoutNamesExactlyTheTwoRanksThatDidNotArrive) {
  const MpiRun run = mpirun("skip-two", 300);
  EXPECT_EQ(run.code, 3) << run.output;
  expect_timeout_lines(run, {0, 1},
                       "all_gather on group of 4 ranks [0, 1, 2, 3] (call #1): timed out after 0.3 s: ranks 2, 3 did "
                       "not arrive (rank 2 did not answer: busy outside any collective; rank 3 did not answer: busy "
                       "outside any collective)");
}

// On a sub-group whose ranks are not the world's, the missing member by its group rank and world rank.
TEST(CommMpiFailure, SubGroupTimeoutNamesExactlyTheMissingMember) {
  const MpiRun run = mpirun("skip-sub", 300);
  EXPECT_EQ(run.code, 3) << run.output;
  expect_timeout_lines(run, {1, 2},
                       "all_gather on group of 3 ranks [1, 2, 3] (call #1): timed out after 0.3 s: rank 2 (world "
                       "rank 3) did not arrive (rank 2 (world rank 3) did not answer: busy outside any collective)");
}

TEST(CommMpiFailure, StartTimeoutNamesExactlyTheRankThatHasNotStarted) {
  const MpiRun run = mpirun("late-start", 300);
  EXPECT_EQ(run.code, 3) << run.output;
  expect_timeout_lines(run, {0, 1, 2},
                       "run_mpi: timed out after 0.3 s waiting for every rank to start: rank(s) 3 did not arrive "
                       "(stopped or hung before run_mpi)");
}

TEST(CommMpiFailure, SkippedCollectiveTimesOutNamingTheRankThatReturned) {
  const MpiRun run = mpirun("skip-return", 300);
  EXPECT_EQ(run.code, 3) << run.output;
  EXPECT_TRUE(has(run.output,
                  "all_gather on group of 4 ranks [0, 1, 2, 3] (call #1): timed out after 0.3 s: rank 3 did not "
                  "arrive (rank 3 returned from the world function)"))
      << run.output;
}

TEST(CommMpiFailure, SplitObeysTheTimeoutNamingTheStoppedRank) {
  const MpiRun run = mpirun("split-stop", 2000);
  EXPECT_EQ(run.code, 3) << run.output;
  EXPECT_LT(run.seconds, 15.0) << "rank 3 hangs for 30 s after the handshake: the split must time out at 2 s";
  expect_timeout_lines(run, {0, 1, 2},
                       "split on group of 4 ranks [0, 1, 2, 3] (call #1): timed out after 2 s: rank 3 did not "
                       "arrive (rank 3 did not answer: busy outside any collective)");
}

TEST(CommMpiFailure, JobEndsPromptlyAfterTheFirstTimeout) {
  // Rank 3 hangs 30 s; the others time out at 6 s. Aborting must not wait a second full timeout (12 s).
  const MpiRun run = mpirun("hang", 6000);
  EXPECT_EQ(run.code, 3) << run.output;
  EXPECT_LT(run.seconds, 11.0) << run.output;
  expect_timeout_lines(run, {0, 1, 2},
                       "all_gather on group of 4 ranks [0, 1, 2, 3] (call #1): timed out after 6 s: rank 3 did not "
                       "arrive (rank 3 did not answer: busy outside any collective)");
}

TEST(CommMpiFailure, IoErrorOnARankExitsThree) {
  const MpiRun run = mpirun("io-error", 20000);
  EXPECT_EQ(run.code, 3) << "an I/O error is bad input, not a numeric failure:\n" << run.output;
  EXPECT_TRUE(
      has(run.output, "error: rank 2: filesystem error: cannot open: No such file or directory [/no/such/dir/x]"))
      << run.output;
}

TEST(CommMpiFailure, CountMismatchIsReportedBeforeAnyTransfer) {
  const MpiRun run = mpirun("mismatch", 20000);
  EXPECT_EQ(run.code, 3) << run.output;
  const std::string mismatch = "count mismatch: rank 0 sends 3 elements to rank 1, which expects 4";
  EXPECT_TRUE(has(run.output, "error: rank 1: all_to_all_v on group of 4 ranks [0, 1, 2, 3] (call #1): " + mismatch))
      << run.output;
  for (const int r : {0, 2, 3})
    EXPECT_TRUE(has(run.output, "error: rank " + std::to_string(r) +
                                    ": all_to_all_v on group of 4 ranks [0, 1, 2, 3] "
                                    "(call #1): rank 1 failed: all_to_all_v"))
        << "rank " << r << ":\n"
        << run.output;
}

}  // namespace
}  // namespace gdnv
