// The real `gdn-verify layout` binary: its JSON agrees with the library and docs/DESIGN.md §2's examples, and
// every bad input is one line on stderr, exit 3, nothing on stdout.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "cli_harness.hpp"
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
