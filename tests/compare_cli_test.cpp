// gdn-verify compare through the real binary: exit codes, the summary line, per-tensor indices and
// counts, policies (built-in, file, globs, unknown keys) and the JSON / markdown reports.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <regex>

#include "cli_testing.hpp"
#include "core/file.hpp"
#include "core/safetensors.hpp"

namespace gdnv {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::run_cli;

// Two tensors of distinct values, a reference file in REF/, CAND/ the same unless changed.
TensorFile sample() {
  TensorFile f;
  std::vector<double> a(24), b(6);
  for (int i = 0; i < 24; ++i) a[i] = 0.5 + 0.125 * i - 0.01 * i * i;
  for (int i = 0; i < 6; ++i) b[i] = -1.0 + 0.75 * i;
  f.tensors["out"] = Tensor::from_f64(a, {2, 3, 4}, DType::F32);
  f.tensors["grad::w"] = Tensor::from_f64(b, {6}, DType::F32);
  return f;
}

struct Dirs {
  fs::path root = testing::temp_dir("compare");
  fs::path ref = root / "ref", cand = root / "cand";
  Dirs(const TensorFile& r, const TensorFile& c) {
    fs::create_directories(ref);
    fs::create_directories(cand);
    write_safetensors((ref / "a.safetensors").string(), r);
    write_safetensors((cand / "a.safetensors").string(), c);
  }
  ~Dirs() { fs::remove_all(root); }
  std::string args() const { return "compare " + ref.string() + " " + cand.string(); }
};

TEST(CompareCli, IdenticalDirectoriesAreAllBitwise) {
  const Dirs d(sample(), sample());
  const auto r = run_cli(d.args());
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "cand: 2 tensors compared, 2 bitwise identical, 0 outside tolerance\nPASS\n")) << r.out;
}

TEST(CompareCli, OneUlpIsNotBitwiseButWithinTolerance) {
  TensorFile c = sample();
  Tensor& out = c.tensors["out"];
  const float v = static_cast<float>(out.get(5));
  out.set(5, std::nextafter(v, std::numeric_limits<float>::infinity()));
  const Dirs d(sample(), c);
  const auto r = run_cli(d.args());
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "cand: 2 tensors compared, 1 bitwise identical, 0 outside tolerance\nPASS\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "a.safetensors:out: pass, bitwise no, max_abs")) << r.out;
  EXPECT_TRUE(contains(r.out, "at [0, 1, 1]")) << r.out;  // flat index 5 of [2, 3, 4]
}

TEST(CompareCli, LargeChangeFailsAtItsIndex) {
  TensorFile c = sample();
  c.tensors["out"].set(17, c.tensors["out"].get(17) + 3.0);  // [1, 1, 1]
  const Dirs d(sample(), c);
  const auto r = run_cli(d.args() + " --policy cp-vs-cp1");
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "cand: 2 tensors compared, 1 bitwise identical, 1 outside tolerance\nFAIL\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "a.safetensors:out: FAIL (1 elements outside atol + rtol |ref|)")) << r.out;
  EXPECT_TRUE(contains(r.out, "max_abs 3.000e+00 at [1, 1, 1]")) << r.out;
  EXPECT_TRUE(contains(r.out, "mismatched 1 / 24 (4.17%)")) << r.out;
}

// The |error| histogram is a line of bars between its lowest and highest decade, with the peak's count;
// the JSON keeps the counts, and the largest error over its bound: |err| / (atol + rtol |ref|).
TEST(CompareCli, TheErrorHistogramIsBarsAndTheJsonKeepsTheCounts) {
  TensorFile c = sample();
  c.tensors["out"].set(17, c.tensors["out"].get(17) + 3.0);
  c.tensors["out"].set(3, c.tensors["out"].get(3) + 0.01);
  const Dirs d(sample(), c);
  const std::string json = (d.root / "r.json").string(), policy = (d.root / "policy.json").string();
  write_file_atomic(policy, std::string(R"({"default": {"atol": 2e-3, "rtol": 1e-2}})"));
  const auto r = run_cli(d.args() + " --policy " + policy + " --json " + json);
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_TRUE(
      std::regex_search(r.out, std::regex("\\|err\\| by decade 1e-03 \\[[^\\]0-9]+\\] 1e\\+00 \\(log height, most "
                                          "at 1e[-+][0-9]+: 1\\), 22 exact\n")))
      << r.out;
  const auto report = nlohmann::json::parse(read_file_text(json));
  const auto& out = report["tensors"][1];
  EXPECT_EQ(out["histogram"], "0:22 1e-03:1 1e+00:1");
  EXPECT_NEAR(out["error_ratio"].get<double>(), 3.0 / (2e-3 + 1e-2 * std::abs(sample().tensors["out"].get(17))), 1e-3);
}

// A bitwise-identical tensor has no angle to measure: markdown's 1-cos cell is "-".
TEST(CompareCli, ABitwiseIdenticalTensorHasNoOneMinusCos) {
  const Dirs d(sample(), sample());
  const std::string md = (d.root / "r.md").string();
  const auto r = run_cli(d.args() + " --markdown " + md);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(
      contains(read_file_text(md), "| a.safetensors:out | pass | yes | 0.000e+00 | 0.000e+00 | 0.000e+00 | - |"))
      << read_file_text(md);
}

TEST(CompareCli, NanInCandidateFailsAndIsCounted) {
  TensorFile c = sample();
  c.tensors["grad::w"].set(2, std::numeric_limits<double>::quiet_NaN());
  const Dirs d(sample(), c);
  const auto r = run_cli(d.args());
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "a.safetensors:grad::w: FAIL (1 elements NaN/Inf on one side only)")) << r.out;
  EXPECT_TRUE(contains(r.out, "nan 0/1")) << r.out;
  EXPECT_TRUE(contains(r.out, "1 outside tolerance\nFAIL\n")) << r.out;
}

TEST(CompareCli, MissingTensorAndShapeChangeAreStructural) {
  TensorFile missing = sample(), reshaped = sample();
  missing.tensors.erase("grad::w");
  reshaped.tensors["out"] = reshaped.tensors["out"].reshaped({4, 6});
  {
    const Dirs d(sample(), missing);
    const auto r = run_cli(d.args());
    EXPECT_EQ(r.code, 2) << r.out << r.err;
    EXPECT_TRUE(contains(r.out, "a.safetensors:grad::w: STRUCTURAL MISMATCH: missing in CAND")) << r.out;
    EXPECT_TRUE(contains(r.out, "cand: 1 tensors compared, 1 bitwise identical, 0 outside tolerance\nFAIL\n")) << r.out;
    EXPECT_TRUE(std::regex_search(r.out, std::regex("\n1 passed, 1 structural mismatch in [0-9.]+ s\n$"))) << r.out;
  }
  const Dirs d(sample(), reshaped);
  const auto r = run_cli(d.args());
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "STRUCTURAL MISMATCH: REF F32 [2, 3, 4], CAND F32 [4, 6]")) << r.out;
}

// Each measured error is printed beside the bound it is held to (as torch.testing.assert_close does).
TEST(CompareCli, EachMeasuredErrorShowsItsAllowedBound) {
  TensorFile c = sample();
  c.tensors["out"].set(17, c.tensors["out"].get(17) + 3.0);  // [1, 1, 1]
  const Dirs d(sample(), c);
  const auto r = run_cli(d.args() + " --policy cp-vs-cp1");
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "max_abs 3.000e+00 at [1, 1, 1] (up to 2.000e-03 allowed), max_rel")) << r.out;
  EXPECT_TRUE(contains(r.out, "at [1, 1, 1] (up to 1.000e-02 allowed)\n")) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("1-cos [0-9.e+-]+ \\(up to 1\\.000e-04 allowed\\)"))) << r.out;
  // Norm-wise (upstream-probe): max_abs against atol + rtol max|ref|, and no element-wise rtol.
  const auto up = run_cli(d.args() + " --policy upstream-probe");
  EXPECT_TRUE(std::regex_search(up.out, std::regex("max_abs 3\\.000e\\+00 at \\[1, 1, 1\\] \\(up to [0-9.e+-]+ "
                                                   "allowed\\), max_rel [0-9.e+-]+ at \\[[0-9, ]+\\]\\n")))
      << up.out;
}

// A bitwise-identical tensor has no error to measure: one line, no metrics.
TEST(CompareCli, BitwiseIdenticalTensorIsOneLine) {
  const Dirs d(sample(), sample());
  const auto r = run_cli(d.args());
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out,
                       "policy: cp1-vs-old\na.safetensors:grad::w: pass, bitwise yes\na.safetensors:out: pass, "
                       "bitwise yes\ncand: 2 tensors"))
      << r.out;
  EXPECT_FALSE(contains(r.out, "1-cos")) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("PASS\n2 passed in [0-9.]+ s\n$"))) << r.out;
}

// --failures-only lists what fails and says how many passing tensors it left out; --all (and a pipe, by
// default) lists every one; a terminal gets the failures only when anything fails.
TEST(CompareCli, FailuresOnlyListsTheFailingTensorsAndCountsTheRest) {
  TensorFile c = sample();
  c.tensors["out"].set(17, c.tensors["out"].get(17) + 3.0);
  const Dirs d(sample(), c);
  const auto only = run_cli(d.args() + " --failures-only");
  EXPECT_EQ(only.code, 1) << only.out << only.err;
  EXPECT_TRUE(contains(only.out, "a.safetensors:out: FAIL")) << only.out;
  EXPECT_FALSE(contains(only.out, "grad::w")) << only.out;
  EXPECT_TRUE(contains(only.out, "(1 passing tensor not listed: --all lists every one)\ncand: 2 tensors compared"))
      << only.out;
  EXPECT_TRUE(std::regex_search(only.out, std::regex("FAIL\n1 failed, 1 passed in [0-9.]+ s\n$"))) << only.out;
  const auto piped = run_cli(d.args());
  EXPECT_TRUE(contains(piped.out, "a.safetensors:grad::w: pass, bitwise yes")) << piped.out;
  // On a terminal (script(1) gives the command one), the failing report lists failures only.
  const std::string cmd = "script -qec '" + std::string(GDNV_CLI) + " " + d.args() + "' /dev/null";
  const auto tty = testing::run_shell(cmd);
  EXPECT_TRUE(contains(tty.out, "a.safetensors:out: FAIL")) << tty.out;
  EXPECT_TRUE(contains(tty.out, "(1 passing tensor not listed")) << tty.out;
  const auto tty_all =
      testing::run_shell("script -qec '" + std::string(GDNV_CLI) + " " + d.args() + " --all' /dev/null");
  EXPECT_TRUE(contains(tty_all.out, "grad::w: pass, bitwise yes")) << tty_all.out;
  const auto both = run_cli(d.args() + " --failures-only --all");
  EXPECT_EQ(both.code, 3);
  EXPECT_TRUE(contains(both.err, "error: --failures-only and --all contradict each other: pass one of them"))
      << both.err;
}

TEST(CompareCli, MissingFileIsStructural) {
  const Dirs d(sample(), sample());
  write_safetensors((d.ref / "b.safetensors").string(), sample());
  const auto r = run_cli(d.args());
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "b.safetensors:*: STRUCTURAL MISMATCH: file missing in CAND")) << r.out;
}

TEST(CompareCli, UnreadableFileIsBadInputWithNothingWritten) {
  const Dirs d(sample(), sample());
  write_file_atomic((d.cand / "a.safetensors").string(), std::string("not a safetensors file"));
  const std::string json = (d.root / "report.json").string();
  const auto r = run_cli(d.args() + " --json " + json);
  EXPECT_EQ(r.code, 3) << r.out << r.err;
  EXPECT_TRUE(contains(r.err, "a.safetensors")) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_FALSE(fs::exists(json));
  const auto missing = run_cli("compare " + d.ref.string() + " " + (d.root / "nope").string());
  EXPECT_EQ(missing.code, 3);
  EXPECT_TRUE(contains(missing.err, "CAND '" + (d.root / "nope").string() + "' does not exist")) << missing.err;
}

TEST(CompareCli, PolicyFileRulesByExactNameThenGlobOverTheDefault) {
  TensorFile c = sample();
  c.tensors["grad::w"].set(0, c.tensors["grad::w"].get(0) * 1.01);  // 1% change in one element
  const Dirs d(sample(), c);
  const std::string policy = (d.root / "policy.json").string();
  write_file_atomic(
      policy, std::string(R"({"default": {"exact": true}, "tensors": {"grad::*": {"exact": false, "rtol": 0.02}}})"));
  const auto loose = run_cli(d.args() + " --policy " + policy);
  EXPECT_EQ(loose.code, 0) << loose.out << loose.err;
  write_file_atomic(
      policy,
      std::string(
          R"({"default": {"exact": false, "rtol": 0.02}, "tensors": {"grad::w": {"rtol": 0.001}, "grad::*": {"rtol": 1}}})"));
  const auto strict = run_cli(d.args() + " --policy " + policy);
  EXPECT_EQ(strict.code, 1) << strict.out << strict.err;  // the exact name wins over the glob
  const auto bitwise = run_cli(d.args() + " --policy bitwise");
  EXPECT_EQ(bitwise.code, 1) << bitwise.out;
  EXPECT_TRUE(contains(bitwise.out, "FAIL (not bitwise identical (policy: exact))")) << bitwise.out;
}

// out[16] = -0.06 is the smallest element of a tensor whose largest is |out[23]| = 1.915. A change of
// 1e-3 there is outside the element-wise bound 2e-4 + 2e-3 * 0.06 = 3.2e-4 of cp1-vs-old, but inside
// the upstream probe's norm-wise bound 2e-4 + 2e-3 * 1.915 = 4.0e-3 (1 - cos is ~3e-8 for both).
TEST(CompareCli, UpstreamProbePolicyBoundsMaxAbsByTheLargestReference) {
  TensorFile c = sample();
  c.tensors["out"].set(16, c.tensors["out"].get(16) + 1e-3);
  const Dirs d(sample(), c);
  const auto elementwise = run_cli(d.args() + " --policy cp1-vs-old");
  EXPECT_EQ(elementwise.code, 1) << elementwise.out;
  EXPECT_TRUE(contains(elementwise.out, "a.safetensors:out: FAIL (1 elements outside atol + rtol |ref|)"))
      << elementwise.out;
  const auto normwise = run_cli(d.args() + " --policy upstream-probe");
  EXPECT_EQ(normwise.code, 0) << normwise.out;
  EXPECT_TRUE(contains(normwise.out, "policy: upstream-probe")) << normwise.out;
  EXPECT_TRUE(contains(normwise.out, "mismatched 0 / 24 (0%)")) << normwise.out;

  c.tensors["out"].set(16, c.tensors["out"].get(16) + 4e-3);  // 5e-3 in all: past 4.0e-3
  const Dirs far(sample(), c);
  const auto r = run_cli(far.args() + " --policy upstream-probe");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(contains(r.out, "a.safetensors:out: FAIL (1 elements outside atol + rtol max|ref|)")) << r.out;
  const std::string policy = (far.root / "normwise.json").string();
  write_file_atomic(policy, std::string(R"({"default": {"atol": 2e-4, "rtol": 3e-3, "normwise": true}})"));
  EXPECT_EQ(run_cli(far.args() + " --policy " + policy).code, 0) << "2e-4 + 3e-3 * 1.915 = 5.9e-3 > 5e-3";
}

TEST(CompareCli, BadPoliciesAreBadInputNamingTheKey) {
  const Dirs d(sample(), sample());
  const std::string policy = (d.root / "policy.json").string();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"default": {"atoll": 1}})", "default.atoll is not a tolerance key"},
      {R"({"defaults": {}})", "unknown key 'defaults'"},
      {R"({"tensors": {"out": {"rtol": "big"}}})", "tensors.out.rtol must be a non-negative number"},
      {R"({"default": {"exact": 1}})", "default.exact must be true or false"},
      {R"({"default": {"normwise": "yes"}})", "default.normwise must be true or false"},
      {R"({"default": )", "not valid JSON"}};
  for (const auto& [text, message] : cases) {
    write_file_atomic(policy, text);
    const auto r = run_cli(d.args() + " --policy " + policy);
    EXPECT_EQ(r.code, 3) << text << "\n" << r.out << r.err;
    EXPECT_TRUE(contains(r.err, message)) << text << "\n" << r.err;
  }
  const auto unknown = run_cli(d.args() + " --policy strictest");
  EXPECT_EQ(unknown.code, 3);
  EXPECT_TRUE(
      contains(unknown.err,
               "'strictest' is neither a built-in policy (cp1-vs-old, cp-vs-cp1, bitwise, upstream-probe) nor a file"))
      << unknown.err;
}

TEST(CompareCli, JsonAndMarkdownReportsCarryEveryTensor) {
  TensorFile c = sample();
  c.tensors["out"].set(17, c.tensors["out"].get(17) + 3.0);
  const Dirs d(sample(), c);
  const std::string json = (d.root / "r.json").string(), md = (d.root / "r.md").string();
  const auto r = run_cli(d.args() + " --json " + json + " --markdown " + md);
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  const auto j = nlohmann::json::parse(read_file_text(json));
  EXPECT_EQ(j["summary"], "cand: 2 tensors compared, 1 bitwise identical, 1 outside tolerance");
  EXPECT_EQ(j["tensors"].size(), 2u);
  EXPECT_EQ(j["tensors"][1]["name"], "out");
  EXPECT_EQ(j["tensors"][1]["max_abs_index"], "[1, 1, 1]");
  EXPECT_EQ(j["tensors"][1]["mismatched"], 1);
  const std::string text = read_file_text(md);
  EXPECT_TRUE(contains(text, "| a.safetensors:out | FAIL | no |")) << text;
  EXPECT_TRUE(contains(text, "**cand: 2 tensors compared, 1 bitwise identical, 1 outside tolerance** — FAIL")) << text;
}

TEST(CompareCli, SignedZeroIsNumericallyEqualButNotBitwise) {
  TensorFile r = sample(), c = sample();
  r.tensors["grad::w"].set(0, 0.0);
  c.tensors["grad::w"].set(0, -0.0);
  const Dirs d(r, c);
  const auto res = run_cli(d.args());
  EXPECT_EQ(res.code, 0) << res.out;
  EXPECT_TRUE(contains(res.out, "grad::w: pass, bitwise no (numerically equal)")) << res.out;
}

}  // namespace
}  // namespace gdnv
