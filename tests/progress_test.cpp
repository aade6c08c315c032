// Progress lines (core/progress.hpp): what a terminal and a pipe with --progress receive on stderr.
#include <gtest/gtest.h>

#include <regex>
#include <sstream>
#include <thread>

#include "core/progress.hpp"

namespace gdnv {
namespace {

TEST(Progress, DurationsReadAsSecondsThenMinutes) {
  EXPECT_EQ(progress_duration(0.2), "0 s");
  EXPECT_EQ(progress_duration(59.4), "59 s");
  EXPECT_EQ(progress_duration(125), "2:05");
}

// Lines: one line per item, the done count, what runs now, the elapsed time and, after the first item, an
// ETA; the last line the total.
TEST(Progress, LinesStyleWritesOneLinePerItem) {
  std::ostringstream err;
  Progress p("train", 3, "runs", ProgressStyle::Lines, err);
  p.update(0, "cp1@1", "0/24 steps");
  p.update(1, "headwise@4", "8/24 steps");
  p.finish("24 steps");
  EXPECT_TRUE(std::regex_match(err.str(), std::regex("train: 0/3 runs \\(0/24 steps\\), now cp1@1, 0 s elapsed\n"
                                                     "train: 1/3 runs \\(8/24 steps\\), now headwise@4, 0 s elapsed, "
                                                     "ETA 0 s\n"
                                                     "train: 3/3 runs \\(24 steps\\) in 0 s\n")))
      << err.str();
}

// A terminal's line is rewritten in place (carriage return, the rest cleared) and ends once, at finish.
TEST(Progress, TerminalStyleRewritesOneLine) {
  std::ostringstream err;
  Progress p("train", 2, "runs", ProgressStyle::Terminal, err);
  p.update(0, "cp1@1");
  p.finish();
  EXPECT_EQ(err.str(), "\rtrain: 0/2 runs, now cp1@1, 0 s elapsed\033[K\rtrain: 2/2 runs in 0 s\033[K\n");
}

TEST(Progress, OffWritesNothing) {
  std::ostringstream err;
  {
    Progress p("train", 2, "runs", ProgressStyle::Off, err);
    p.update(0, "cp1@1");
    p.finish();
    const Ticker t("reference: x", ProgressStyle::Off, err);
  }
  EXPECT_EQ(err.str(), "");
}

TEST(Ticker, LinesStyleSaysWhenItStartsAndEnds) {
  std::ostringstream err;
  { const Ticker t("reference: in.safetensors", ProgressStyle::Lines, err); }
  EXPECT_EQ(err.str(), "reference: in.safetensors ...\nreference: in.safetensors done in 0 s\n");
}

// On a terminal the time ticks after "<what> ..." and everything it wrote is erased at the end, so what
// the command prints next starts where the ticker began.
TEST(Ticker, TerminalStyleTicksAndErasesItself) {
  std::ostringstream err;
  {
    const Ticker t("work", ProgressStyle::Terminal, err, std::chrono::milliseconds(5));
    std::this_thread::sleep_for(std::chrono::milliseconds(40));
  }
  const std::string s = err.str();
  ASSERT_TRUE(s.starts_with("work ... 0 s")) << s;
  const std::size_t shown = std::string("work ... 0 s").size();
  EXPECT_TRUE(s.ends_with(std::string(shown, '\b') + std::string(shown, ' ') + std::string(shown, '\b'))) << s;
}

}  // namespace
}  // namespace gdnv
