// The gate's "precision regression" step (gate/precision_regression.cpp) against the committed baseline
// and against edited copies of it, and the command that rewrites the baseline, run as a user runs it.
#include <filesystem>
#include <functional>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_testing.hpp"
#include "core/file.hpp"
#include "gate/precision_regression.hpp"
#include "gate/steps.hpp"

namespace gdnv::testing {
namespace {

namespace fs = std::filesystem;
using gate::committed_precision_baseline;
using gate::precision_regression;
using gate::precision_regression_against;
using gate::StepOptions;
using gate::StepResult;
using nlohmann::json;

const std::string kRegenerate = "gdn-verify fixtures precision-baseline --write ";

StepOptions quick() { return {true, ""}; }

// A copy of the committed baseline with `edit` applied to its JSON.
fs::path edited_baseline(const std::string& tag, const std::function<void(json&)>& edit) {
  const fs::path file = temp_dir(tag) / "precision_baseline.json";
  json j = json::parse(read_file_text(committed_precision_baseline()));
  edit(j);
  write_file_atomic(file.string(), j.dump(1));
  return file;
}

json& entry(json& baseline, const std::string& label) {
  for (json& e : baseline["entries"])
    if (e["label"] == label) return e;
  throw std::runtime_error("no baseline entry " + label);
}

TEST(PrecisionRegression, CommittedBaselineHoldsForTheWholeCatalog) {
  const StepResult r = precision_regression.run({});
  EXPECT_EQ(r.failed, 0) << r.detail;
  EXPECT_EQ(r.cases, 2 + 205);  // the baseline file, its reordering spread, every catalog entry
  EXPECT_EQ(r.notes, 0) << r.first_note;
}

TEST(PrecisionRegression, QuickSubsetIsSmallAndPasses) {
  const StepResult r = precision_regression.run(quick());
  EXPECT_EQ(r.failed, 0) << r.detail;
  EXPECT_EQ(r.cases, 2 + 13);
}

TEST(PrecisionRegression, LoweredBaselineEntryFailsThatEntryOnly) {
  const std::string label = "chunkwise W=2 tp=1 bf16 thd default";
  const fs::path file = edited_baseline("precision_lowered", [&](json& j) {
    entry(j, label)["rel_rms"]["out"] = entry(j, label)["rel_rms"]["out"].get<double>() / 100;
  });
  const StepResult r = precision_regression_against({false, label}, file.string());
  EXPECT_EQ(r.cases, 1);
  EXPECT_EQ(r.failed, 1);
  EXPECT_TRUE(contains(r.detail, label + ": out: rel_rms ")) << r.detail;
  // The whole quick subset: that entry, and the spread its lowered value opens in its group.
  const StepResult all = precision_regression_against(quick(), file.string());
  EXPECT_EQ(all.failed, 2) << all.detail;
  fs::remove_all(file.parent_path());
}

TEST(PrecisionRegression, ShrunkDeviationIsANoteNotAFailure) {
  const std::string label = "headwise W=2 tp=1 fp32 thd default";
  const fs::path file = edited_baseline("precision_raised", [&](json& j) {
    entry(j, label)["rel_rms"]["grad_hidden"] = entry(j, label)["rel_rms"]["grad_hidden"].get<double>() * 100;
  });
  const StepResult r = precision_regression_against({false, label}, file.string());
  EXPECT_EQ(r.cases, 1);
  EXPECT_EQ(r.failed, 0) << r.detail;
  EXPECT_EQ(r.notes, 1);
  EXPECT_TRUE(contains(r.first_note, label + ": grad_hidden rel_rms ")) << r.first_note;
  fs::remove_all(file.parent_path());
}

TEST(PrecisionRegression, MissingBaselineNamesTheRegenerateCommand) {
  const fs::path dir = temp_dir("precision_missing");
  const std::string file = (dir / "absent.json").string();
  const StepResult r = precision_regression_against(quick(), file);
  EXPECT_EQ(r.failed, r.cases);  // the file and every entry: none can be judged
  EXPECT_EQ(r.label, "baseline");
  EXPECT_TRUE(contains(r.detail, file + ": cannot open")) << r.detail;
  EXPECT_TRUE(contains(r.detail, "regenerate it with '" + kRegenerate + file + "'")) << r.detail;
  fs::remove_all(dir);
}

TEST(PrecisionRegression, CorruptBaselineNamesTheRegenerateCommand) {
  const fs::path dir = temp_dir("precision_corrupt");
  const std::string file = (dir / "baseline.json").string();
  write_file_atomic(file, std::string("{\"format\": \"gdn-verify precision baseline 1\", \"entries\": [{}]}"));
  const StepResult r = precision_regression_against(quick(), file);
  EXPECT_EQ(r.label, "baseline");
  EXPECT_TRUE(contains(r.detail, "not a precision baseline")) << r.detail;
  EXPECT_TRUE(contains(r.detail, kRegenerate + file)) << r.detail;
  fs::remove_all(dir);
}

TEST(PrecisionRegression, OutdatedBaselineNamesTheRegenerateCommand) {
  const std::string label = "all_gather W=4 tp=2 fp64 thd strong";
  const fs::path file =
      edited_baseline("precision_outdated", [&](json& j) { entry(j, label)["spec"]["lengths"][0] = 64; });
  const StepResult r = precision_regression_against(quick(), file.string());
  EXPECT_EQ(r.label, "baseline");
  EXPECT_TRUE(contains(r.detail, "catalog changed: no entry for '" + label + "' with its spec")) << r.detail;
  EXPECT_TRUE(contains(r.detail, kRegenerate + file.string())) << r.detail;
  fs::remove_all(file.parent_path());
}

TEST(PrecisionRegression, OtherFormatVersionIsOutdated) {
  const fs::path file =
      edited_baseline("precision_version", [](json& j) { j["format"] = "gdn-verify precision baseline 0"; });
  const StepResult r = precision_regression_against(quick(), file.string());
  EXPECT_EQ(r.label, "baseline");
  EXPECT_TRUE(contains(r.detail, "expected 'gdn-verify precision baseline 1'")) << r.detail;
  fs::remove_all(file.parent_path());
}

// A baseline whose runs of one group spread wider than kFactor / margin no longer supports the factor.
TEST(PrecisionRegression, WiderReorderingSpreadAsksForANewFactor) {
  const std::string label = "chunkwise W=4 tp=2 fp32 sbhd default";
  const fs::path file = edited_baseline("precision_spread", [&](json& j) {
    entry(j, label)["rel_rms"]["out"] = entry(j, label)["rel_rms"]["out"].get<double>() * 12;
  });
  const StepResult r = precision_regression_against({{}, "reordering spread"}, file.string());
  EXPECT_EQ(r.cases, 1);
  EXPECT_EQ(r.failed, 1);
  EXPECT_TRUE(contains(r.detail, "(fp32 sbhd default out), more than factor 18 / margin 2")) << r.detail;
  fs::remove_all(file.parent_path());
}

TEST(PrecisionRegression, OneCaseRunsAlone) {
  const StepResult r = precision_regression.run({false, "all_gather W=4 tp=2 fp32 thd strong"});
  EXPECT_EQ(r.cases, 1);
  EXPECT_EQ(r.failed, 0) << r.detail;
}

TEST(PrecisionBaselineCli, RewritesTheCommittedBaselineByteForByte) {
  const fs::path dir = temp_dir("precision_write");
  const std::string file = (dir / "baseline.json").string();
  const CliResult r = run_cli("fixtures precision-baseline --write " + file);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "wrote 205 entries to " + file)) << r.out;
  EXPECT_TRUE(contains(r.out, "largest reordering spread 3.58 (fp32 thd strong grad::A_log)")) << r.out;
  EXPECT_EQ(read_file_text(file), read_file_text(committed_precision_baseline()))
      << "the committed baseline is stale: run " << kRegenerate << "fixtures/precision_baseline.json";
  fs::remove_all(dir);
}

TEST(PrecisionBaselineCli, BadOptionsAreOneLineAndWriteNothing) {
  const fs::path dir = temp_dir("precision_bad");
  const std::string absent = (dir / "no-such-dir" / "b.json").string();
  const std::string fix =
      "' is not a file in an existing directory: give a FILE path such as " + committed_precision_baseline() + "\n";
  const struct {
    std::string args, message;
  } cases[] = {
      {"fixtures precision-baseline",
       "error: gdn-verify fixtures precision-baseline: the option '--write' is required but missing; see "
       "'gdn-verify fixtures precision-baseline --help'\n"},
      {"fixtures precision-baseline --write " + dir.string() + "/b.json --catalog full",
       "error: gdn-verify fixtures precision-baseline: unrecognised option '--catalog'; see "
       "'gdn-verify fixtures precision-baseline --help'\n"},
      {"fixtures precision-baseline --write " + absent, "error: fixtures precision-baseline --write '" + absent + fix},
      {"fixtures precision-baseline --write " + dir.string(),
       "error: fixtures precision-baseline --write '" + dir.string() + fix},
  };
  for (const auto& c : cases) {
    const CliResult r = run_cli(c.args);
    EXPECT_EQ(r.code, 3) << c.args;
    EXPECT_EQ(r.err, c.message) << c.args;
    EXPECT_EQ(r.out, "") << c.args;
  }
  EXPECT_TRUE(fs::is_empty(dir)) << "a rejected command must write nothing";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gdnv::testing
