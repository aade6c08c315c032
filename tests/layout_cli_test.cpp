// The real `gdn-verify layout` binary: its JSON agrees with the library and docs/DESIGN.md §2's examples, and
// every bad input is one line on stderr, exit 3, nothing on stdout.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>

#include "cli_testing.hpp"
#include "core/file.hpp"
#include "layouts/partition.hpp"
#include "layouts/route.hpp"

namespace gdnv {
namespace {

using Ints = std::vector<std::int64_t>;
using testing::run_cli;

nlohmann::json json_of(const testing::CliResult& r) {
  EXPECT_EQ(r.code, 0) << r.err;
  return nlohmann::json::parse(r.out);
}

void expect_one_line_error(const testing::CliResult& r, const std::string& message) {
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.err, "error: " + message + "\n");
  EXPECT_TRUE(r.out.empty()) << "nothing half-written: " << r.out;
}

TEST(LayoutCli, HelpNamesEveryOption) {
  const auto r = run_cli("layout --help");
  EXPECT_EQ(r.code, 0) << r.err;
  for (const char* option : {"--layout", "--cp", "--rank", "--cu-seqlens", "--seq-len", "--route"})
    EXPECT_NE(r.out.find(option), std::string::npos) << option << " missing from\n" << r.out;
}

TEST(LayoutCli, ThdIndicesMatchLibraryForEveryRank) {
  const Ints cu = {0, 16, 40};
  for (const char* layout : {"zigzag", "contiguous"}) {
    for (int rank = 0; rank < 2; ++rank) {
      const auto j = json_of(run_cli(std::string("layout --layout ") + layout + " --cp 2 --rank " +
                                     std::to_string(rank) + " --cu-seqlens 0,16,40"));
      EXPECT_EQ(j["format"], "thd");
      EXPECT_EQ(j["indices"].get<Ints>(),
                layouts::thd_partition(layouts::parse_layout(layout), cu, 2, rank).positions())
          << layout << " rank " << rank;
      EXPECT_FALSE(j.contains("route"));
    }
  }
}

// The picture's strip of each sequence is the library's partition of every rank, token by token; the zigzag
// of docs/DESIGN.md §2 (rank r holds chunks r and 2W-1-r of every sequence) reads at a glance.
TEST(LayoutCli, PictureShowsTheRankHoldingEachToken) {
  const Ints cu = {0, 8, 20, 44};
  for (const char* layout : {"zigzag", "contiguous"}) {
    const auto r =
        run_cli(std::string("layout --layout ") + layout + " --cp 2 --rank 1 --cu-seqlens 0,8,20,44 --picture");
    ASSERT_EQ(r.code, 0) << r.err;
    std::string owner(44, '?');
    for (int rank = 0; rank < 2; ++rank)
      for (const auto t : layouts::thd_partition(layouts::parse_layout(layout), cu, 2, rank).positions())
        owner[static_cast<std::size_t>(t)] = static_cast<char>('0' + rank);
    for (std::size_t i = 0; i + 1 < cu.size(); ++i) {
      const std::string head =
          "seq " + std::to_string(i) + " [" + std::to_string(cu[i]) + ", " + std::to_string(cu[i + 1]) + ")";
      EXPECT_TRUE(testing::contains(
          r.out, head + std::string(22 - head.size(), ' ') + owner.substr(cu[i], cu[i + 1] - cu[i]) + "\n"))
          << layout << "\n"
          << r.out;
    }
    EXPECT_TRUE(testing::contains(r.out, "tokens per rank: 0:22 1:22\n")) << r.out;
  }
  const auto z = run_cli("layout --layout zigzag --cp 2 --rank 0 --cu-seqlens 0,16,40 --picture --route");
  EXPECT_EQ(z.out,
            "zigzag layout, cp=2: the CP rank that holds each token (0-9, then a-z), one strip per sequence\n"
            "seq 0 [0, 16)         0000111111110000\n"
            "seq 1 [16, 40)        000000111111111111000000\n"
            "tokens per rank: 0:20 1:20\n"
            "route of rank 0 (zigzag->contiguous): rows sent to each peer [12,8], received from each [12,8]\n");
  // A long sequence is drawn in 64 cells, each the rank of its first token.
  const auto l = run_cli("layout --layout zigzag --cp 4 --rank 0 --seq-len 256 --picture");
  EXPECT_TRUE(testing::contains(
      l.out,
      "seq 0 [0, 256)        0000000011111111222222223333333333333333222222221111111100000000  (256 tokens in 64 "
      "cells)\n"))
      << l.out;
}

// The SVG holds one rect per run of tokens on one rank, together covering every token exactly once, each
// run held by the rank the library says; a bad geometry writes no file.
TEST(LayoutCli, SvgCoversEveryTokenWithItsRank) {
  const auto dir = testing::temp_dir("layout_svg");
  const std::string file = (dir / "l.svg").string();
  const Ints cu = {0, 8, 20, 44};
  const auto r = run_cli("layout --layout zigzag --cp 2 --rank 0 --cu-seqlens 0,8,20,44 --svg " + file);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(nlohmann::json::parse(r.out).contains("indices")) << "stdout stays JSON without --picture";
  const std::string svg = read_file_text(file);
  std::vector<int> covered(44, 0);
  const std::regex run(R"(<title>tokens (\d+)\.\.(\d+): rank (\d+)</title>)");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), run); it != std::sregex_iterator(); ++it) {
    const int first = std::stoi((*it)[1]), last = std::stoi((*it)[2]), rank = std::stoi((*it)[3]);
    const auto held = layouts::thd_partition(layouts::Layout::zigzag, cu, 2, rank).positions();
    for (int t = first; t <= last; ++t) {
      ++covered[static_cast<std::size_t>(t)];
      EXPECT_NE(std::find(held.begin(), held.end(), t), held.end()) << "token " << t << " drawn on rank " << rank;
    }
  }
  EXPECT_EQ(covered, std::vector<int>(44, 1));
  const auto bad = run_cli("layout --layout zigzag --cp 2 --rank 0 --cu-seqlens 0,6,16 --svg " + file + ".bad");
  EXPECT_EQ(bad.code, 3);
  EXPECT_FALSE(std::filesystem::exists(file + ".bad"));
  std::filesystem::remove_all(dir);
}

TEST(LayoutCli, RouteOfTheDesignExample) {
  const auto j = json_of(run_cli("layout --layout contiguous --cp 2 --rank 0 --cu-seqlens 0,8,12,16 --route"));
  EXPECT_EQ(j["indices"].get<Ints>(), (Ints{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(j["route"]["index"].get<Ints>(), (Ints{0, 1, 6, 7, 2, 3, 4, 5}));
  EXPECT_EQ(j["route"]["send_counts"].get<Ints>(), (Ints{4, 4}));
  EXPECT_EQ(j["route"]["recv_counts"].get<Ints>(), (Ints{4, 4}));
}

TEST(LayoutCli, SbhdSeqLenUsesChunksRAnd2WMinus1MinusR) {
  const auto j = json_of(run_cli("layout --layout zigzag --cp 3 --rank 1 --seq-len 12 --route"));
  EXPECT_EQ(j["format"], "sbhd");
  EXPECT_EQ(j["indices"].get<Ints>(), (Ints{2, 3, 8, 9}));  // chunks 1 and 4 of 6, 2 tokens each
  EXPECT_EQ(j["route"]["recv_counts"].get<Ints>(), layouts::sbhd_zigzag_contiguous_route(12, 3, 1).recv_counts);
}

TEST(LayoutCli, UnknownLayoutExitsThree) {
  expect_one_line_error(run_cli("layout --layout ring --cp 2 --rank 0 --seq-len 8"),
                        "unknown layout 'ring'; use zigzag or contiguous");
}

TEST(LayoutCli, LengthsNotDivisibleExitThreeListingThem) {
  expect_one_line_error(run_cli("layout --layout zigzag --cp 2 --rank 0 --cu-seqlens 0,6,16"),
                        "zigzag layout needs every sequence length divisible by 2*cp_size = 4; not divisible: "
                        "sequence 0 (length 6), sequence 1 (length 10); pad each sequence to a multiple of 4");
}

TEST(LayoutCli, RankOutOfRangeExitsThree) {
  expect_one_line_error(run_cli("layout --layout contiguous --cp 4 --rank 4 --seq-len 8"),
                        "cp_rank 4 is out of range for cp_size 4; use a rank in [0, 3]");
}

TEST(LayoutCli, NeedsExactlyOneOfCuSeqlensAndSeqLen) {
  const std::string message = "gdn-verify layout: give exactly one of --cu-seqlens (THD) and --seq-len (SBHD)";
  expect_one_line_error(run_cli("layout --layout zigzag --cp 2 --rank 0"), message);
  expect_one_line_error(run_cli("layout --layout zigzag --cp 2 --rank 0 --seq-len 8 --cu-seqlens 0,8"), message);
}

TEST(LayoutCli, NonIntegerBoundaryExitsThree) {
  expect_one_line_error(run_cli("layout --layout zigzag --cp 2 --rank 0 --cu-seqlens 0,8x,16"),
                        "--cu-seqlens: '8x' is not an integer; give a comma-separated list like 0,16,40");
  expect_one_line_error(run_cli("layout --layout zigzag --cp 2 --rank 0 --cu-seqlens 0,,16"),
                        "--cu-seqlens: '' is not an integer; give a comma-separated list like 0,16,40");
}

}  // namespace
}  // namespace gdnv
