// gdn-verify probe through the real binary: dumps of every mode into one image, cross-mode and oracle
// judgements, image-vs-image comparisons (catching a planted fault), MPI dumps equal to in-process
// ones bit for bit, and the bad-input messages.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "cli_testing.hpp"
#include "core/file.hpp"
#include "core/safetensors.hpp"
#include "tests/mpirun_testing.hpp"

namespace gdnv {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::run_cli;

// Dumps `modes` (cp1 on one rank, the others on `world` ranks) into dir; asserts each succeeded.
void dump(const fs::path& dir, const std::string& image, const std::vector<std::string>& modes,
          const std::string& extra = "", int world = 2) {
  for (const auto& m : modes) {
    const int w = m == "cp1" ? 1 : world;
    const auto r = run_cli("probe dump --mode " + m + " --image " + image + " --out " + dir.string() +
                           " --world inproc:" + std::to_string(w) + " " + extra);
    ASSERT_EQ(r.code, 0) << m << "\n" << r.out << r.err;
  }
}

const std::vector<std::string> kAllModes = {"cp1", "headwise", "chunkwise", "all_gather"};

// Rewrites DIR/file through `edit`: what a hostile or broken writer leaves.
void tamper(const fs::path& dir, const std::string& file, const std::function<void(TensorFile&)>& edit) {
  TensorFile f = read_safetensors((dir / file).string());
  edit(f);
  write_safetensors((dir / file).string(), f);
}
void tamper_meta(const fs::path& dir, const std::function<void(nlohmann::json&)>& edit) {
  auto meta = nlohmann::json::parse(read_file_text((dir / "meta.json").string()));
  edit(meta);
  write_file_atomic((dir / "meta.json").string(), meta.dump(2));
}

// The readers' exit codes and outputs on DIR (compare: against REF).
struct Readings {
  testing::CliResult oracle, cross, compare;
};
Readings read_all(const fs::path& dir, const fs::path& ref) {
  return {run_cli("probe oracle --dir " + dir.string()), run_cli("probe cross-mode --dir " + dir.string()),
          run_cli("probe compare --ref " + ref.string() + " --cand " + dir.string())};
}

TEST(ProbeCli, DumpWritesInputsRankShardsAndMeta) {
  const auto dir = testing::temp_dir("probe");
  dump(dir, "new", {"cp1", "chunkwise"}, "--dtype bf16 --case thd-short", 4);
  for (const char* f : {"inputs.safetensors", "cp1.rank0.safetensors", "chunkwise.rank0.safetensors",
                        "chunkwise.rank3.safetensors", "meta.json"})
    EXPECT_TRUE(fs::exists(dir / f)) << f;
  const TensorFile shard = read_safetensors((dir / "chunkwise.rank2.safetensors").string());
  EXPECT_EQ(shard.at("out", "shard").dtype(), DType::BF16);
  EXPECT_EQ(shard.at("out", "shard").shape(), (Shape{4, 1, 32}));  // 16 tokens over 4 ranks
  EXPECT_EQ(shard.at("grad::A_log", "shard").dtype(), DType::F32);
  for (const auto& [name, t] : shard.tensors) EXPECT_FALSE(name.starts_with("stage")) << name << ": no --stages";
  const auto meta = nlohmann::json::parse(read_file_text((dir / "meta.json").string()));
  EXPECT_EQ(meta["image"], "new");
  EXPECT_EQ(meta["modes"]["chunkwise"]["world"], 4);
  EXPECT_EQ(meta["modes"]["chunkwise"]["accounting"]["forward"]["all_to_all_v"]["calls"], 2);
  EXPECT_FALSE(meta["versions"]["git_commit"].get<std::string>().empty());
  // One run id, drawn by rank 0 and shared by every rank file of the dump; another dump draws another.
  const std::string run = meta["modes"]["chunkwise"]["run"];
  EXPECT_EQ(run.size(), 16u) << run;
  for (int r = 0; r < 4; ++r)
    EXPECT_EQ(
        read_safetensors((dir / ("chunkwise.rank" + std::to_string(r) + ".safetensors")).string()).metadata.at("run"),
        run)
        << r;
  EXPECT_NE(meta["modes"]["cp1"]["run"], run);
  // The inputs are a layer-level file the oracle command reads.
  const auto ref =
      run_cli("reference --in " + (dir / "inputs.safetensors").string() + " --out " + (dir / "oracle.out").string());
  EXPECT_EQ(ref.code, 0) << ref.out << ref.err;
  fs::remove_all(dir);
}

TEST(ProbeCli, CrossModeAndOracleJudgeEveryMode) {
  const auto dir = testing::temp_dir("probe");
  dump(dir, "new", kAllModes, "--dtype fp32");
  const auto cross = run_cli("probe cross-mode --dir " + dir.string());
  EXPECT_EQ(cross.code, 0) << cross.out << cross.err;
  EXPECT_TRUE(contains(cross.out, "chunkwise vs cp1:out: pass")) << cross.out;
  EXPECT_TRUE(contains(cross.out, "48 tensors compared")) << "3 modes x 9, and 3 x 7 rank-1 gradient copies\n"
                                                          << cross.out;
  EXPECT_TRUE(contains(cross.out, "deviation ratio (<= 4x headwise's, floor 1e-6): 18 checked, 0 outside"))
      << cross.out;
  const auto oracle = run_cli("probe oracle --dir " + dir.string());
  EXPECT_EQ(oracle.code, 0) << oracle.out << oracle.err;
  EXPECT_TRUE(contains(oracle.out, "57 tensors compared, 21 bitwise identical, 0 outside tolerance\nPASS\n"))
      << "4 modes x 9, and 3 x 7 rank-1 gradient copies equal to rank 0's bit for bit\n"
      << oracle.out;
  EXPECT_TRUE(contains(oracle.out, "chunkwise.rank1 vs rank0:grad::A_log: pass, bitwise yes")) << oracle.out;
  fs::remove_all(dir);
}

TEST(ProbeCli, StageDumpsHoldEachRanksPiecesAndPassCrossModeAndOracle) {
  const auto dir = testing::temp_dir("probe_stages");
  dump(dir, "new", kAllModes, "--dtype fp32 --stages");
  // Chunkwise rank 1 computed the conv on its contiguous span: 112 of thd-gva's 224 tokens, every
  // channel (2 Hk dk + Hv dv = 256), and the state entering its span (Hv dk dv = 2048).
  const TensorFile shard = read_safetensors((dir / "chunkwise.rank1.safetensors").string());
  EXPECT_EQ(shard.at("stage::conv", "shard").shape(), (Shape{112, 256}));
  EXPECT_EQ(shard.at("rows::stage::conv", "shard").get(0), 112.0);
  EXPECT_EQ(shard.at("cols::stage::conv", "shard").numel(), 256);
  EXPECT_EQ(shard.at("stage::boundary_state", "shard").shape(), (Shape{1, 2048}));
  EXPECT_EQ(shard.at("rows::stage::boundary_state", "shard").get(0), 1.0) << "its row is the rank";
  // The gradient of the state entering rank 1 is computed by rank 0 (its fold), so it is rank 0's row 1.
  EXPECT_FALSE(shard.has("stage_grad::boundary_state"));
  const TensorFile rank0 = read_safetensors((dir / "chunkwise.rank0.safetensors").string());
  EXPECT_EQ(rank0.at("rows::stage_grad::boundary_state", "rank0").get(0), 1.0);
  EXPECT_EQ(rank0.at("rows::stage::boundary_state", "rank0").get(0), 0.0);
  for (const char* mode : {"cp1", "headwise", "all_gather"}) {
    const TensorFile f = read_safetensors((dir / (std::string(mode) + ".rank0.safetensors")).string());
    EXPECT_TRUE(f.has("stage::conv") && f.has("stage_grad::x_norm")) << mode;
    EXPECT_FALSE(f.has("stage::boundary_state")) << mode;
  }
  const auto cross = run_cli("probe cross-mode --dir " + dir.string());
  EXPECT_EQ(cross.code, 0) << cross.out << cross.err;
  EXPECT_TRUE(contains(cross.out, "chunkwise vs cp1:stage::conv: pass")) << cross.out;
  EXPECT_TRUE(contains(cross.out, "108 tensors compared"))
      << "3 modes x (9 outputs + 20 stages + 7 rank-1 gradient copies)\n"
      << cross.out;
  const auto oracle = run_cli("probe oracle --dir " + dir.string() + " --json " + (dir / "o.json").string());
  EXPECT_EQ(oracle.code, 0) << oracle.out << oracle.err;
  EXPECT_TRUE(contains(oracle.out, "chunkwise:stage::boundary_state: pass")) << oracle.out;
  EXPECT_TRUE(contains(oracle.out, "chunkwise:stage_grad::boundary_state: pass")) << oracle.out;
  EXPECT_TRUE(contains(oracle.out, "139 tensors compared, 21 bitwise identical, 0 outside tolerance\nPASS\n"))
      << "4 x 29, chunkwise's two boundary states and 3 x 7 rank-1 gradient copies\n"
      << oracle.out;
  EXPECT_TRUE(contains(oracle.out, "    min atol ")) << oracle.out;
  EXPECT_FALSE(contains(oracle.out, "first divergence")) << oracle.out;
  const auto json = nlohmann::json::parse(read_file_text((dir / "o.json").string()));
  EXPECT_TRUE(json["first_divergence"].is_null());
  for (const auto& t : json["tensors"]) {
    if (t["file"].get<std::string>().ends_with(" vs rank0")) continue;  // replicas: bitwise equal
    EXPECT_GT(t["min_atol"].get<double>(), 0.0) << t["name"];
    EXPECT_FALSE(t["histogram"].get<std::string>().empty()) << t["name"];
  }
  fs::remove_all(dir);
}

TEST(ProbeCli, UnderAPlantedFaultEveryReaderNamesTheFirstDivergingStageAndRank) {
  const auto root = testing::temp_dir("probe_divergence");
  dump(root / "clean", "x", {"cp1", "chunkwise"}, "--dtype fp32 --stages");
  setenv("GDNV_FAULT", "conv_halo_wrong_rank", 1);  // rank 1 takes its conv halo from the wrong rank
  dump(root / "bad", "x", {"cp1", "chunkwise"}, "--dtype fp32 --stages");
  unsetenv("GDNV_FAULT");
  const std::string bad = (root / "bad").string();
  // The halo is the W - 1 = 3 rows before rank 1's span [112, 224): its first 3 conv rows go wrong; in
  // zigzag they are rank 0's (the last chunk of the first sequence).
  const std::string where =
      "first divergence: stage::conv (forward, rank 1 of 2, rows 112..114 contiguous; zigzag rank 0): ";
  const auto oracle = run_cli("probe oracle --dir " + bad + " --json " + (root / "o.json").string() + " --markdown " +
                              (root / "o.md").string());
  EXPECT_EQ(oracle.code, 1) << oracle.out << oracle.err;
  EXPECT_TRUE(contains(oracle.out, "FAIL\n" + where + "rel_rms ")) << oracle.out;
  EXPECT_TRUE(
      std::regex_search(oracle.out, std::regex("> gate 1\\.000e-05\n[0-9]+ failed, [0-9]+ passed in [0-9.]+ s\n$")))
      << "the line ends the report, before the counts line\n"
      << oracle.out;
  const auto json = nlohmann::json::parse(read_file_text((root / "o.json").string()));
  const auto& d = json["first_divergence"];
  EXPECT_EQ(d["tensor"], "stage::conv");
  EXPECT_EQ(d["dump"], "chunkwise");
  EXPECT_EQ(d["direction"], "forward");
  EXPECT_EQ(d["rank"], 1);
  EXPECT_EQ(d["rows"], nlohmann::json({112, 114}));
  EXPECT_EQ(d["other_layout_ranks"], nlohmann::json({0}));
  EXPECT_EQ(d.size(), 12u) << "run --json's eleven fields plus dump: " << d.dump();
  EXPECT_TRUE(contains(read_file_text((root / "o.md").string()), where)) << "markdown carries the line";
  const auto cross = run_cli("probe cross-mode --dir " + bad);
  EXPECT_EQ(cross.code, 1) << cross.out << cross.err;
  EXPECT_TRUE(contains(cross.out, "FAIL\n" + where + "mismatched fraction ")) << cross.out;
  const auto compare = run_cli("probe compare --ref " + (root / "clean").string() + " --cand " + bad);
  EXPECT_EQ(compare.code, 1) << compare.out << compare.err;
  EXPECT_TRUE(contains(compare.out, "FAIL\n" + where + "mismatched fraction ")) << compare.out;
  fs::remove_all(root);
}

// The cells of tensor `name`'s row in a report's rank table ("  <name>  <cell> <cell> ..."): the tokens after
// the name on the first line so laid out; empty when the report has no such row.
std::vector<std::string> rank_cells(const std::string& report, const std::string& name) {
  const std::regex row("\n  " + std::regex_replace(name, std::regex("[.:]"), "\\$&") + " +([^\n]*)");
  std::smatch m;
  if (!std::regex_search(report, m, row)) return {};
  std::vector<std::string> cells;
  std::istringstream in(m[1].str());
  for (std::string cell; in >> cell;) cells.push_back(cell);
  return cells;
}

double ratio_of(const std::string& cell) { return std::stod(cell.substr(0, cell.find('x'))); }

// A fault on rank 1 only (its conv halo read from the wrong rank) shows as rank 1's column: each reader's
// table puts the stages rank 0 computed within their bounds and rank 1's far outside, from stage::conv on.
TEST(ProbeCli, UnderAFaultOnOneRankTheRankTablesShowWhichRank) {
  const auto root = testing::temp_dir("probe_rank_table");
  dump(root / "clean", "x", {"chunkwise"}, "--dtype fp32 --stages");
  setenv("GDNV_FAULT", "conv_halo_wrong_rank", 1);
  dump(root / "bad", "x", {"cp1", "chunkwise"}, "--dtype fp32 --stages");
  unsetenv("GDNV_FAULT");
  const std::string bad = (root / "bad").string();
  const auto oracle = run_cli("probe oracle --failures-only --dir " + bad);
  EXPECT_TRUE(contains(oracle.out, "chunkwise: error / gate over each rank's own elements (above 1 fails)\n"))
      << oracle.out;
  for (const auto& [name, rank0_passes] :
       {std::pair{"stage::x_norm", true}, {"stage::conv", true}, {"stage::core", true}}) {
    const auto cells = rank_cells(oracle.out, name);  // rank0 rank1 whole
    ASSERT_EQ(cells.size(), 3u) << name << "\n" << oracle.out;
    EXPECT_EQ(ratio_of(cells[0]) < 1, rank0_passes) << name << "\n" << oracle.out;
  }
  EXPECT_LT(ratio_of(rank_cells(oracle.out, "stage::x_norm")[1]), 1) << "before the conv, rank 1 is right";
  EXPECT_GT(ratio_of(rank_cells(oracle.out, "stage::conv")[1]), 100) << oracle.out;
  EXPECT_EQ(rank_cells(oracle.out, "grad::A_log")[0], "-") << "a CP-summed gradient has no rank's own elements";
  const auto cross = run_cli("probe cross-mode --failures-only --dir " + bad);
  EXPECT_TRUE(contains(cross.out, "chunkwise vs cp1: error / gate over each rank's own elements")) << cross.out;
  EXPECT_EQ(ratio_of(rank_cells(cross.out, "stage::conv")[0]), 0) << cross.out;
  EXPECT_GT(ratio_of(rank_cells(cross.out, "stage::conv")[1]), 1) << cross.out;
  const std::string md = (root / "c.md").string();
  const auto compare = run_cli("probe compare --failures-only --ref " + (root / "clean").string() + " --cand " + bad +
                               " --markdown " + md);
  EXPECT_TRUE(contains(read_file_text(md),
                       "\nchunkwise: error / bound by tensor and rank\n\n| tensor | rank0 | rank1 |\n"
                       "| --- | --- | --- |\n"))
      << read_file_text(md);
  EXPECT_TRUE(contains(read_file_text(md), "\n| stage::conv | pass | ")) << read_file_text(md);
  EXPECT_TRUE(contains(compare.out, "chunkwise: error / bound by tensor and rank\n")) << compare.out;
  EXPECT_EQ(rank_cells(compare.out, "stage::conv")[0], "pass") << compare.out;
  EXPECT_TRUE(rank_cells(compare.out, "stage::conv")[1].ends_with("x")) << compare.out;
  EXPECT_GT(ratio_of(rank_cells(compare.out, "stage::conv")[1]), 1) << compare.out;
  const auto clean =
      run_cli("probe compare --ref " + (root / "clean").string() + " --cand " + (root / "clean").string());
  EXPECT_FALSE(contains(clean.out, "by tensor and rank")) << "a passing report has no table\n" << clean.out;
  fs::remove_all(root);
}

// Rank r of a W = 4 dump holds other rows than rank r of a W = 2 one: one line says so and what to do.
TEST(ProbeCli, ImagesDumpedAtDifferentWorldSizesAreOneStructuralLine) {
  const auto root = testing::temp_dir("probe_world");
  dump(root / "a", "a", {"chunkwise"}, "--case thd-short", 4);
  dump(root / "b", "b", {"chunkwise"}, "--case thd-short", 2);
  const auto r = run_cli("probe compare --ref " + (root / "a").string() + " --cand " + (root / "b").string());
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_TRUE(
      contains(r.out, "chunkwise:*: STRUCTURAL MISMATCH: W = 4 vs W = 2: use cross-mode or dump at the same --world\n"))
      << r.out;
  EXPECT_FALSE(contains(r.out, "file missing")) << r.out;
  EXPECT_TRUE(contains(r.out, "1 structural mismatch in ")) << r.out;
  fs::remove_all(root);
}

// Odd lengths split nowhere at CP=1: every mode dumps on one rank, and the image passes cross-mode and
// the oracle; on two ranks the same case is run's error.
TEST(ProbeCli, Cp1DumpsAcceptAnyLength) {
  const auto dir = testing::temp_dir("probe_odd");
  dump(dir, "odd", kAllModes, "--dtype fp64 --case thd-odd", 1);
  const auto cross = run_cli("probe cross-mode --dir " + dir.string());
  EXPECT_EQ(cross.code, 0) << cross.out << cross.err;
  const auto oracle = run_cli("probe oracle --dir " + dir.string());
  EXPECT_EQ(oracle.code, 0) << oracle.out << oracle.err;
  const auto two = run_cli(
      "probe dump --mode chunkwise --image odd --dtype fp64 --case thd-odd --world inproc:2 --out " + dir.string());
  EXPECT_EQ(two.code, 3) << two.out << two.err;
  EXPECT_TRUE(contains(two.err, "sequence lengths 9,5,3 are not divisible by cp = 2")) << two.err;
  EXPECT_FALSE(fs::exists(dir / "chunkwise.rank1.safetensors"));
  fs::remove_all(dir);
}

TEST(ProbeCli, ImageCompareCatchesAPlantedFault) {
  const auto root = testing::temp_dir("probe");
  dump(root / "old", "old", {"headwise", "all_gather"});
  dump(root / "new", "new", {"headwise", "all_gather"});
  const std::string args = "probe compare --ref " + (root / "old").string() + " --cand " + (root / "new").string();
  const auto same = run_cli(args);
  EXPECT_EQ(same.code, 0) << same.out << same.err;
  EXPECT_TRUE(contains(same.out, "new: 36 tensors compared, 36 bitwise identical, 0 outside tolerance\nPASS"))
      << same.out;

  setenv("GDNV_FAULT", "headwise_head_perm_shift", 1);
  dump(root / "bad", "bad", {"cp1", "headwise"});
  unsetenv("GDNV_FAULT");
  const auto caught = run_cli("probe compare --ref " + (root / "old").string() + " --cand " + (root / "bad").string() +
                              " --mode headwise");
  EXPECT_EQ(caught.code, 1) << caught.out << caught.err;
  EXPECT_TRUE(contains(caught.out, "headwise.rank0.safetensors:out: FAIL")) << caught.out;
  const auto cross = run_cli("probe cross-mode --dir " + (root / "bad").string());
  EXPECT_EQ(cross.code, 1) << cross.out << cross.err;
  fs::remove_all(root);
}

// A CP-summed parameter gradient is in every rank file: a rank whose copy differs (a reduce to the
// root where an all-reduce was needed) fails, named by the divergence line.
TEST(ProbeCli, EveryRanksCopyOfAParameterGradientIsJudged) {
  const auto root = testing::temp_dir("probe_replica");
  dump(root / "clean", "x", {"cp1", "chunkwise"});
  dump(root / "bad", "x", {"cp1", "chunkwise"});
  tamper(root / "bad", "chunkwise.rank1.safetensors", [](TensorFile& f) {
    Tensor& g = f.tensors.at("grad::A_log");
    for (std::int64_t i = 0; i < g.numel(); ++i) g.set(i, 2 * g.get(i));
  });
  const Readings r = read_all(root / "bad", root / "clean");
  const std::string where = "first divergence: grad::A_log (backward, rank 1 of 2, rows 0..7): ";
  EXPECT_EQ(r.oracle.code, 1) << r.oracle.out << r.oracle.err;
  EXPECT_TRUE(contains(r.oracle.out, "chunkwise.rank1 vs rank0:grad::A_log: FAIL")) << r.oracle.out;
  EXPECT_TRUE(contains(r.oracle.out, "FAIL\n" + where + "bitwise mismatches 8.000e+00 > gate 0.000e+00\n"))
      << r.oracle.out;
  EXPECT_EQ(r.cross.code, 1) << r.cross.out << r.cross.err;
  EXPECT_TRUE(contains(r.cross.out, "FAIL\n" + where + "bitwise mismatches ")) << r.cross.out;
  EXPECT_EQ(r.compare.code, 1) << r.compare.out << r.compare.err;
  EXPECT_TRUE(contains(r.compare.out, "chunkwise.rank1.safetensors:grad::A_log: FAIL")) << r.compare.out;
  fs::remove_all(root);
}

// An image is whole per meta.json: a missing rank file (rank 0 too), an orphan one and files of a mode
// meta.json does not declare are structural mismatches naming the file, never a skipped mode.
TEST(ProbeCli, AMissingOrOrphanRankFileIsAStructuralMismatchNamingIt) {
  const auto root = testing::temp_dir("probe_whole");
  dump(root / "clean", "x", {"cp1", "headwise", "chunkwise"}, "--case thd-short", 4);
  const auto broken = [&](const std::string& name, const std::function<void(const fs::path&)>& edit,
                          const std::string& file, const std::string& what) {
    const fs::path dir = root / name;
    fs::copy(root / "clean", dir);
    edit(dir);
    const Readings r = read_all(dir, root / "clean");
    for (const testing::CliResult* c : {&r.oracle, &r.cross, &r.compare}) {
      EXPECT_EQ(c->code, 2) << name << "\n" << c->out << c->err;
      // compare says whose image it is: "CAND: missing ..."
      const std::string prefix = file + ":*: STRUCTURAL MISMATCH: " + (c == &r.compare ? "CAND: " : "");
      EXPECT_TRUE(contains(c->out, prefix + what)) << name << "\n" << c->out;
      EXPECT_TRUE(contains(c->out, "\nFAIL\n")) << name << "\n" << c->out;
    }
    EXPECT_FALSE(contains(r.oracle.err + r.oracle.out, "divisible")) << "names the file, not a layout\n"
                                                                     << r.oracle.err;
  };
  broken(
      "rank3", [](const fs::path& d) { fs::remove(d / "chunkwise.rank3.safetensors"); }, "chunkwise.rank3.safetensors",
      "missing: meta.json declares chunkwise on 4 rank(s)");
  broken(
      "rank0", [](const fs::path& d) { fs::remove(d / "chunkwise.rank0.safetensors"); }, "chunkwise.rank0.safetensors",
      "missing: meta.json declares chunkwise on 4 rank(s)");
  broken(
      "orphan",
      [](const fs::path& d) { fs::copy_file(d / "chunkwise.rank1.safetensors", d / "chunkwise.rank4.safetensors"); },
      "chunkwise.rank4.safetensors", "orphan: meta.json declares chunkwise on 4 rank(s)");
  broken(
      "undeclared", [](const fs::path& d) { tamper_meta(d, [](auto& m) { m["modes"].erase("chunkwise"); }); },
      "chunkwise.rank0.safetensors",
      "chunkwise.rank0.safetensors, chunkwise.rank1.safetensors, "
      "chunkwise.rank2.safetensors, chunkwise.rank3.safetensors without a chunkwise entry in meta.json");
  fs::remove_all(root);
}

// A rank file of another dump (a stale one beside a killed re-dump's, or one copied in) is refused
// even where its bits are the same: every rank file carries its dump's run id.
TEST(ProbeCli, ARankFileOfAnotherRunIsRefused) {
  const auto root = testing::temp_dir("probe_mixed");
  dump(root / "a", "x", {"cp1", "chunkwise"});
  dump(root / "b", "x", {"cp1", "chunkwise"});
  fs::copy_file(root / "b" / "chunkwise.rank1.safetensors", root / "a" / "chunkwise.rank1.safetensors",
                fs::copy_options::overwrite_existing);
  const Readings r = read_all(root / "a", root / "b");
  for (const testing::CliResult* c : {&r.oracle, &r.cross, &r.compare}) {
    EXPECT_EQ(c->code, 2) << c->out << c->err;
    EXPECT_TRUE(contains(c->out, "chunkwise.rank1.safetensors:*: STRUCTURAL MISMATCH: ")) << c->out;
    EXPECT_TRUE(contains(c->out, "a file of another dump; dump --mode chunkwise again")) << c->out;
  }
  fs::remove_all(root);
}

// The gate's dtype is the image's (meta.json, inputs.safetensors): one tensor relabelled bf16 in an fp32
// image, or an image relabelled as a whole, is refused rather than judged at bf16 gates.
TEST(ProbeCli, ARelabelledDtypeIsRefused) {
  const auto root = testing::temp_dir("probe_dtype");
  dump(root / "clean", "x", {"cp1", "chunkwise"});
  fs::copy(root / "clean", root / "tensor");
  tamper(root / "tensor", "chunkwise.rank0.safetensors",
         [](TensorFile& f) { f.tensors.at("out") = f.tensors.at("out").to(DType::BF16); });
  const Readings r = read_all(root / "tensor", root / "clean");
  for (const testing::CliResult* c : {&r.oracle, &r.cross, &r.compare}) {
    EXPECT_EQ(c->code, 2) << c->out << c->err;
    EXPECT_TRUE(contains(c->out, "chunkwise.rank0.safetensors:*: STRUCTURAL MISMATCH: ")) << c->out;
    EXPECT_TRUE(contains(c->out,
                         "tensor 'out' is BF16, the image's F32 storage (meta.json, inputs.safetensors) "
                         "stores it as F32"))
        << c->out;
  }
  fs::copy(root / "clean", root / "meta");
  tamper_meta(root / "meta", [](auto& m) { m["dtype"] = "BF16"; });
  const auto oracle = run_cli("probe oracle --dir " + (root / "meta").string());
  EXPECT_EQ(oracle.code, 2) << oracle.out << oracle.err;
  EXPECT_TRUE(contains(oracle.out,
                       "inputs.safetensors:*: STRUCTURAL MISMATCH: metadata dtype 'F32', meta.json says "
                       "\"BF16\""))
      << oracle.out;
  fs::remove_all(root);
}

// Two images whose inputs are bitwise equal but whose layer config differs are of different cases.
TEST(ProbeCli, CompareJudgesTheInputsConfig) {
  const auto root = testing::temp_dir("probe_config");
  dump(root / "a", "a", {"headwise"});
  dump(root / "b", "b", {"headwise"});
  tamper(root / "b", "inputs.safetensors", [](TensorFile& f) { f.metadata["layernorm_epsilon"] = "0.5"; });
  const auto r = run_cli("probe compare --ref " + (root / "a").string() + " --cand " + (root / "b").string());
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_TRUE(contains(r.out,
                       "inputs.safetensors:*: STRUCTURAL MISMATCH: metadata 'layernorm_epsilon' is '1e-06' "
                       "in REF, '0.5' in CAND"))
      << r.out;
  fs::remove_all(root);
}

// meta.json declares a mode only once every rank file of the dump is written: a re-dump that fails on
// one rank leaves the mode undeclared (the readers refuse it), never declared over a mixture.
TEST(ProbeCli, ADumpThatFailsOnOneRankLeavesItsModeUndeclared) {
  const auto dir = testing::temp_dir("probe_cut");
  dump(dir, "x", {"cp1", "chunkwise"});
  fs::remove(dir / "chunkwise.rank1.safetensors");
  fs::create_directories(dir / "chunkwise.rank1.safetensors" / "in-the-way");  // rank 1 cannot write its file
  const auto failed = run_cli("probe dump --mode chunkwise --image x --world inproc:2 --out " + dir.string());
  EXPECT_NE(failed.code, 0) << failed.out << failed.err;
  const auto meta = nlohmann::json::parse(read_file_text((dir / "meta.json").string()));
  EXPECT_FALSE(meta["modes"].contains("chunkwise")) << meta.dump(2);
  EXPECT_TRUE(meta["modes"].contains("cp1")) << meta.dump(2);
  const auto oracle = run_cli("probe oracle --dir " + dir.string());
  EXPECT_EQ(oracle.code, 2) << oracle.out << oracle.err;
  EXPECT_TRUE(contains(oracle.out, "without a chunkwise entry in meta.json (a dump that did not finish?)"))
      << oracle.out;
  fs::remove_all(dir);
}

// A meta.json that is not the object a dump writes is bad input for the dump and every reader: one
// line naming it, exit 3, never an abort.
TEST(ProbeCli, AMalformedMetaJsonIsOneLineAndExitThree) {
  const auto dir = testing::temp_dir("probe_meta");
  dump(dir, "x", {"cp1"});
  tamper_meta(dir, [](auto& m) { m["modes"] = nlohmann::json::array(); });
  for (const std::string& args :
       {"probe dump --mode cp1 --image x --world inproc:1 --out " + dir.string(), "probe oracle --dir " + dir.string(),
        "probe cross-mode --dir " + dir.string(), "probe compare --ref " + dir.string() + " --cand " + dir.string()}) {
    const auto r = run_cli(args);
    EXPECT_EQ(r.code, 3) << args << "\n" << r.out << r.err;
    EXPECT_TRUE(contains(r.err, "meta.json: 'modes' is missing or not an object: not a meta.json written by a dump"))
        << args << "\n"
        << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  fs::remove_all(dir);
}

// A mode re-dumped on fewer ranks replaces the wider dump's files; the image stays whole.
TEST(ProbeCli, ARedumpOnFewerRanksLeavesNoOrphans) {
  const auto dir = testing::temp_dir("probe_redump");
  dump(dir, "x", {"cp1", "chunkwise"}, "--case thd-short", 4);
  dump(dir, "x", {"chunkwise"}, "--case thd-short", 2);
  EXPECT_FALSE(fs::exists(dir / "chunkwise.rank2.safetensors"));
  EXPECT_FALSE(fs::exists(dir / "chunkwise.rank3.safetensors"));
  const auto oracle = run_cli("probe oracle --dir " + dir.string());
  EXPECT_EQ(oracle.code, 0) << oracle.out << oracle.err;
  EXPECT_EQ(nlohmann::json::parse(read_file_text((dir / "meta.json").string()))["modes"]["chunkwise"]["world"], 2);
  fs::remove_all(dir);
}

// The deviation ratio needs headwise and another CP mode: the skip line says which is missing.
// Headwise alone leaves nothing to measure against it; without headwise the deviation is bounded by the
// same image's cp1 band (docs/DESIGN.md §4), never skipped.
TEST(ProbeCli, CrossModeSaysWhichDeviationBoundItApplies) {
  const auto dir = testing::temp_dir("probe_skip");
  dump(dir, "x", {"cp1", "headwise"});
  const auto r = run_cli("probe cross-mode --dir " + dir.string());
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(
      contains(r.out, "deviation ratio: skipped (headwise is the only CP mode dumped: no other mode to measure)"))
      << r.out;
  fs::remove_all(dir);
  dump(dir, "x", {"cp1", "chunkwise"});
  const auto c = run_cli("probe cross-mode --dir " + dir.string());
  EXPECT_EQ(c.code, 0) << c.out << c.err;
  EXPECT_TRUE(contains(c.out,
                       "deviation ratio (<= sqrt((13 + W)/14 F(1 - 1e-6; nu, nu)) x cp1's, nu its effective roundings, "
                       "docs/DESIGN.md §4, "
                       "floor 1e-6): 9 checked, 0 outside"))
      << c.out;
  fs::remove_all(dir);
}

TEST(ProbeCli, ImagesOfDifferentInputsAreStructuralMismatches) {
  const auto root = testing::temp_dir("probe");
  dump(root / "a", "a", {"headwise"});
  dump(root / "b", "b", {"headwise"}, "--seed 7");
  const auto r = run_cli("probe compare --ref " + (root / "a").string() + " --cand " + (root / "b").string());
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "inputs.safetensors:*: STRUCTURAL MISMATCH: the images' inputs differ")) << r.out;
  fs::remove_all(root);
}

TEST(ProbeCli, BadInputIsOneLineAndExitThree) {
  const auto dir = testing::temp_dir("probe");
  dump(dir, "one", {"headwise"});
  const std::string out = " --out " + dir.string();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"probe dump --mode cp1 --image x --world inproc:2" + out, "--mode cp1 runs on one rank, not 2"},
      {"probe dump --mode headwise --image x --world threads:2" + out, "is not 'inproc:W' or 'mpi'"},
      {"probe dump --mode headwise --image x --world inproc:0" + out, "W must be a positive integer"},
      {"probe dump --mode headwise --image x --world mpi" + out, "--world mpi needs the process started by mpirun"},
      {"probe dump --mode headwise --image x --case huge" + out, "unknown --case 'huge'"},
      {"probe dump --mode auto --image x" + out, "use one of 'headwise', 'chunkwise', 'all_gather'"},
      {"probe dump --mode all_gather --image x --case sbhd" + out, "supports THD input only"},
      {"probe dump --mode headwise --image two" + out, "holds an image with image \"one\", not \"two\""},
      {"probe dump --mode headwise --image one --dtype bf16" + out, "holds an image with dtype \"F32\""},
      {"probe cross-mode --dir " + dir.string(), "holds no cp1 dump"},
      {"probe oracle --dir " + (dir / "nope").string(), "holds no inputs.safetensors"},
      {"probe compare --ref " + dir.string() + " --cand " + dir.string() + " --mode chunkwise",
       "has no chunkwise dump"},
      {"probe dump --mode headwise --image one --backend emu" + out,
       "holds an image with backend \"cpu\", not \"emu\""},
      {"probe dump --mode headwise --image x --backend tpu" + out,
       "--backend 'tpu' is not supported: use cpu, emu or cuda"},
      {"probe dump --mode headwise --image x --backend emu --dtype fp64" + out,
       "the emu backend stores F32 or BF16, not F64; choose --dtype fp32 or bf16"},
      {"probe teleport", "unknown probe subcommand 'teleport'"},
  };
  for (const auto& [args, message] : cases) {
    const auto r = run_cli(args);
    EXPECT_EQ(r.code, 3) << args << "\n" << r.out << r.err;
    EXPECT_TRUE(contains(r.err, message)) << args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  EXPECT_FALSE(fs::exists(dir / "cp1.rank0.safetensors"));  // nothing half-written by the failed dumps
  fs::remove_all(dir);
}

// run's geometry options in place of --case: a 200-token sequence spanning all four ranks of chunkwise, with a
// conv bias; the image names its case by the options that rebuild it and records the geometry.
TEST(ProbeCli, GeometryOptionsDumpAnyCaseAndRecordIt) {
  const auto dir = testing::temp_dir("probe_geometry");
  const std::string geometry = "--lengths 40,200,16 --num-key-heads 4 --num-value-heads 8 --conv-bias --gates weak";
  dump(dir, "g", {"cp1", "chunkwise"}, geometry + " --stages", 4);
  const auto meta = nlohmann::json::parse(read_file_text((dir / "meta.json").string()));
  EXPECT_EQ(meta["case"],
            "--format thd --lengths 40,200,16 --hidden 64 --num-key-heads 4 --num-value-heads 8 --key-head-dim 16 "
            "--value-head-dim 16 --conv-width 4 --conv-bias --gates weak");
  EXPECT_EQ(meta["geometry"]["lengths"], nlohmann::json({40, 200, 16}));
  EXPECT_EQ(meta["geometry"]["conv_bias"], true);
  EXPECT_EQ(meta["geometry"]["gates"], "weak");
  const TensorFile inputs = read_safetensors((dir / "inputs.safetensors").string());
  EXPECT_EQ(inputs.at("conv1d.bias", "inputs").numel(), 2 * 4 * 16 + 8 * 16);
  for (const std::string sub : {"oracle", "cross-mode"}) {
    const auto r = run_cli("probe " + sub + " --dir " + dir.string());
    EXPECT_EQ(r.code, 0) << sub << "\n" << r.out << r.err;
    EXPECT_TRUE(contains(r.out, "grad::conv1d.bias: pass")) << r.out;
  }
  // Without a headwise dump the deviation from the oracle is bounded by cp1's (docs/DESIGN.md §4).
  EXPECT_TRUE(contains(run_cli("probe cross-mode --dir " + dir.string()).out,
                       "nu its effective roundings, docs/DESIGN.md §4, floor 1e-6): 10 checked, 0 outside"));
  fs::remove_all(dir);
}

// Marks an image third-party, as the Python bridge's meta.json does (`adapter`).
void as_third_party(const fs::path& dir) {
  auto meta = nlohmann::json::parse(read_file_text((dir / "meta.json").string()));
  meta["adapter"] = "test";
  write_file_atomic((dir / "meta.json").string(), meta.dump());
}

// A third-party image (meta.json names its adapter) leaves a tensor whose cp1 is itself beyond the kernel
// gate of the oracle (bf16's layer tensors) to its deviation from the oracle, within cp1's band or its
// class's gate (docs/DESIGN.md §4); this project's own image, or a policy named instead of the contract's
// rule, keeps the elementwise comparison for every tensor, and a conv halo from the wrong rank still fails.
TEST(ProbeCli, CrossModeJudgesAThirdPartyTensorBeyondTheKernelGateByItsDeviation) {
  const auto good = testing::temp_dir("probe_band_good"), bad = testing::temp_dir("probe_band_bad");
  dump(good, "b", {"cp1", "chunkwise"}, "--case thd-gva --dtype bf16");
  EXPECT_FALSE(contains(run_cli("probe cross-mode --dir " + good.string()).out, "band only"));
  as_third_party(good);
  const auto r = run_cli("probe cross-mode --dir " + good.string());
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "band only out: cp1 itself rel_rms ")) << r.out;
  EXPECT_TRUE(contains(r.out, "vs oracle > kernel gate 2e-03; bound: the band or its class's oracle gate")) << r.out;
  EXPECT_FALSE(contains(run_cli("probe cross-mode --policy bitwise --dir " + good.string()).out, "band only"));
  dump(bad, "b", {"cp1"}, "--case thd-gva --dtype bf16");
  setenv("GDNV_FAULT", "conv_halo_wrong_rank", 1);
  dump(bad, "b", {"chunkwise"}, "--case thd-gva --dtype bf16");
  unsetenv("GDNV_FAULT");
  as_third_party(bad);
  const auto f = run_cli("probe cross-mode --dir " + bad.string());
  EXPECT_EQ(f.code, 1) << f.out << f.err;
  EXPECT_TRUE(contains(f.out, "deviation chunkwise grad::conv1d.weight: rel_rms ")) << f.out;
  fs::remove_all(good);
  fs::remove_all(bad);
}

// `probe cross-mode --json` carries the whole verdict, the deviation ratios included, so a gate reads it
// from the JSON (docs/json_format.md): a third-party image failing only on a deviation ratio (its
// band-only tensors never diverge elementwise) names that ratio's line as its first failure.
TEST(ProbeCli, CrossModeJsonCarriesTheVerdictAndTheFirstFailure) {
  const auto good = testing::temp_dir("probe_json_good"), bad = testing::temp_dir("probe_json_bad");
  const auto report = testing::temp_dir("probe_json_out") / "r.json";
  dump(good, "b", {"cp1", "chunkwise"}, "--case thd-gva --dtype bf16");
  as_third_party(good);
  const auto r = run_cli("probe cross-mode --dir " + good.string() + " --json " + report.string());
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  auto j = nlohmann::json::parse(read_file_text(report.string()));
  EXPECT_TRUE(j["pass"].get<bool>());
  EXPECT_TRUE(j["first_failure"].is_null());
  ASSERT_FALSE(j["band_only"].empty());
  EXPECT_TRUE(contains(r.out, j["band_only"][0]["line"].get<std::string>() + "\n")) << r.out;
  ASSERT_FALSE(j["deviation_ratios"].empty());
  EXPECT_TRUE(contains(r.out, j["deviation_ratios"][0]["line"].get<std::string>() + "\n")) << r.out;
  dump(bad, "b", {"cp1"}, "--case thd-gva --dtype bf16");
  setenv("GDNV_FAULT", "conv_halo_wrong_rank", 1);
  dump(bad, "b", {"chunkwise"}, "--case thd-gva --dtype bf16");
  unsetenv("GDNV_FAULT");
  as_third_party(bad);
  const auto f = run_cli("probe cross-mode --dir " + bad.string() + " --json " + report.string());
  ASSERT_EQ(f.code, 1) << f.out << f.err;
  j = nlohmann::json::parse(read_file_text(report.string()));
  EXPECT_FALSE(j["pass"].get<bool>());
  EXPECT_TRUE(j["first_divergence"].is_null()) << "the planted halo moves only band-only tensors here";
  const std::string first = j["first_failure"].get<std::string>();
  EXPECT_TRUE(first.starts_with("first divergence: deviation chunkwise ") && contains(first, "  FAIL")) << first;
  // The text names it after FAIL, and the counts line counts the ratios outside their bound.
  EXPECT_TRUE(contains(f.out, "\nFAIL\n" + first + "\n")) << f.out;
  EXPECT_TRUE(std::regex_search(f.out, std::regex("\n[0-9]+ passed, [0-9]+ deviation ratios? outside its bound in ")))
      << f.out;
  // The first failing ratio in the order a divergence propagates (out, the forward stages, grad_hidden, ...).
  std::vector<std::string> failing;
  for (const auto& d : j["deviation_ratios"])
    if (!d["pass"].get<bool>()) failing.push_back(d["tensor"].get<std::string>());
  ASSERT_FALSE(failing.empty());
  EXPECT_TRUE(contains(first, "deviation chunkwise " + failing.front() + ": ")) << first;
  const auto phase = [](const std::string& t) {  // docs/DESIGN.md §8: forward stages, out, backward, parameters
    return t.starts_with("stage::")        ? 0
           : t == "out"                    ? 1
           : t.starts_with("stage_grad::") ? 2
           : t == "grad_hidden"            ? 3
                                           : 4;
  };
  EXPECT_TRUE(std::is_sorted(failing.begin(), failing.end(), [&](const auto& a, const auto& b) {
    return phase(a) < phase(b);
  })) << j["deviation_ratios"].dump();
  fs::remove_all(good);
  fs::remove_all(bad);
  fs::remove_all(report.parent_path());
}

// An image is judged by the decay class its meta.json declares, and the report says whose gates it meets
// (docs/DESIGN.md §4): this project's images declare product-of-decays and meet both; an unknown class is
// bad input naming the file.
TEST(ProbeCli, OracleReportsTheDecayClassesAnImageMeets) {
  const auto dir = testing::temp_dir("probe_class");
  dump(dir, "c", {"cp1"}, "--case thd-short");
  const auto r = run_cli("probe oracle --dir " + dir.string());
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out,
                       "decay class (docs/DESIGN.md §4): declared product-of-decays; meets product-of-decays gates: "
                       "yes; meets cumsum-decay gates: yes\n"))
      << r.out;
  auto meta = nlohmann::json::parse(read_file_text((dir / "meta.json").string()));
  meta["decay_class"] = "chunked";
  write_file_atomic((dir / "meta.json").string(), meta.dump());
  const auto bad = run_cli("probe oracle --dir " + dir.string());
  EXPECT_EQ(bad.code, 3) << bad.out << bad.err;
  EXPECT_TRUE(contains(bad.err, "meta.json: unknown decay class 'chunked': use product-of-decays or cumsum-decay"))
      << bad.err;
  fs::remove_all(dir);
}

// The library a third-party image's meta.json names (docs/DESIGN.md §14) heads every reader's report, a line per
// image judged; this project's own images name none and print none.
TEST(ProbeCli, ReadersPrintTheLibraryAThirdPartyImageNames) {
  const auto lib = testing::temp_dir("probe_library"), own = testing::temp_dir("probe_library_own");
  dump(lib, "l", {"cp1", "chunkwise"}, "--case thd-short");
  dump(own, "l", {"cp1"}, "--case thd-short");
  tamper_meta(lib, [](auto& m) {
    m["library"] = {{"name", "fla"},       {"version", "0.6.0"},
                    {"path", "/site/fla"}, {"source_sha256", "1a2b3c4d" + std::string(56, '0')},
                    {"files", 43},         {"commit", "abc1234def5678"}};
  });
  const std::string line = "library: fla 0.6.0 at /site/fla (sha256 1a2b3c4d... of 43 files, commit abc1234)\n";
  const Readings r = read_all(lib, own);
  for (const auto* reading : {&r.oracle, &r.cross, &r.compare}) {
    EXPECT_EQ(reading->code, 0) << reading->out << reading->err;
    EXPECT_EQ(reading->out.find(reading == &r.compare ? "cand " + line : line), 0u) << reading->out;
  }
  EXPECT_FALSE(contains(r.compare.out, "ref library")) << r.compare.out;
  tamper_meta(lib, [](auto& m) { m["library"].erase("commit"); });
  EXPECT_TRUE(contains(run_cli("probe oracle --dir " + lib.string()).out,
                       "library: fla 0.6.0 at /site/fla (sha256 1a2b3c4d... of 43 files)\n"));
  // Megatron's layer names the FLA whose kernels it ran
  tamper_meta(lib, [](auto& m) {
    m["library"]["name"] = "megatron.core";
    m["library"]["kernels"] = {{"name", "fla"},
                               {"version", "0.4.2"},
                               {"path", "/k/fla"},
                               {"files", 1},
                               {"source_sha256", "ff" + std::string(62, '0')}};
  });
  EXPECT_TRUE(contains(run_cli("probe oracle --dir " + lib.string()).out,
                       "library: megatron.core 0.6.0 at /site/fla (sha256 1a2b3c4d... of 43 files); kernels: fla "
                       "0.4.2 at /k/fla (sha256 ff000000... of 1 file)\n"));
  for (const auto& reading :
       {run_cli("probe oracle --dir " + own.string()), run_cli("probe cross-mode --dir " + own.string()),
        run_cli("probe compare --ref " + own.string() + " --cand " + own.string())})
    EXPECT_FALSE(contains(reading.out, "library:")) << reading.out;
  fs::remove_all(lib);
  fs::remove_all(own);
}

// A "library" that is not the object the bridge writes is bad input for the dump and every reader: one line
// naming meta.json and the key, exit 3.
TEST(ProbeCli, AMalformedLibraryIsOneLineNamingTheKeyAndExitThree) {
  const auto dir = testing::temp_dir("probe_library_bad");
  dump(dir, "x", {"cp1"}, "--case thd-short");
  const nlohmann::json good = {
      {"name", "fla"}, {"version", "0.6.0"}, {"path", "/p"}, {"source_sha256", "00"}, {"files", 1}};
  const std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>> cases = {
      {[](auto& l) { l = "fla 0.6.0"; }, "'library' is not an object"},
      {[](auto& l) { l["version"] = 6; }, "'library.version' is missing or not a string"},
      {[](auto& l) { l.erase("path"); }, "'library.path' is missing or not a string"},
      {[](auto& l) { l["files"] = "1"; }, "'library.files' is missing or not a non-negative integer"},
      {[](auto& l) { l["files"] = -1; }, "'library.files' is missing or not a non-negative integer"},
      {[](auto& l) { l["commit"] = nullptr; }, "'library.commit' is not a string"},
      {[](auto& l) { l["kernels"] = "fla"; }, "'library.kernels' is not an object"},
      {[&good](auto& l) {
         l["kernels"] = good;
         l["kernels"].erase("source_sha256");
       },
       "'library.kernels.source_sha256' is missing or not a string"},
  };
  for (const auto& [edit, message] : cases) {
    tamper_meta(dir, [&good, &change = edit](auto& m) {
      m["library"] = good;
      change(m["library"]);
    });
    for (const std::string& args :
         {"probe oracle --dir " + dir.string(), "probe cross-mode --dir " + dir.string(),
          "probe compare --ref " + dir.string() + " --cand " + dir.string(),
          "probe dump --mode cp1 --image x --case thd-short --world inproc:1 --out " + dir.string()}) {
      const auto r = run_cli(args);
      EXPECT_EQ(r.code, 3) << args << "\n" << r.out << r.err;
      EXPECT_TRUE(contains(r.err, "meta.json: " + message + ": not a meta.json written by a dump")) << args << "\n"
                                                                                                    << r.err;
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    }
  }
  fs::remove_all(dir);
}

TEST(ProbeCli, AGeometryWithACaseOrAnIllegalOneIsOneLineAndExitThree) {
  const auto dir = testing::temp_dir("probe_geometry_bad");
  const std::string dump_args = "probe dump --mode cp1 --image x --out " + dir.string();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {" --case thd-gva --lengths 8", "--case thd-gva and geometry options given: a probe case fixes the geometry"},
      {" --lengths 8 --lengths 4", "--lengths given 2 times: a dump is one micro-batch; give one --lengths list"},
      {" --num-key-heads 3", "is not a multiple of linear_num_key_heads = 3"},
      {" --format sbhd --batch 0", "--seq-len 64 --batch 0: SBHD needs at least one token"},
      {" --lengths 8,-2", "--lengths 8,-2: a sequence length is negative"},
  };
  for (const auto& [args, message] : cases) {
    const auto r = run_cli(dump_args + args);
    EXPECT_EQ(r.code, 3) << args << "\n" << r.out << r.err;
    EXPECT_TRUE(contains(r.err, message)) << args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  EXPECT_FALSE(fs::exists(dir / "inputs.safetensors"));
  fs::remove_all(dir);
}

// The device code path (gpu/'s kernels on host streams, collectives through the stream mover) dumps an
// image the cross-mode and oracle judgements pass, recorded as that backend's.
TEST(ProbeCli, TheEmulatedDeviceBackendDumpsAnImageThatPassesCrossModeAndOracle) {
  const auto dir = testing::temp_dir("probe_emu");
  dump(dir, "emu", kAllModes, "--backend emu --case thd-short --stages", 4);
  for (const std::string sub : {"cross-mode", "oracle"}) {
    const auto r = run_cli("probe " + sub + " --dir " + dir.string());
    EXPECT_EQ(r.code, 0) << sub << "\n" << r.out << r.err;
    EXPECT_TRUE(
        contains(r.out, "all_gather" + std::string(sub == "oracle" ? "" : " vs cp1") + ":stage_grad::conv: pass"))
        << r.out;
  }
  EXPECT_EQ(nlohmann::json::parse(read_file_text((dir / "meta.json").string()))["backend"], "emu");
  fs::remove_all(dir);
}

// Under mpirun each rank is a process; the sums are rank-ordered on every transport, so the dumps
// equal the in-process world's bit for bit.
TEST(ProbeCli, MpiDumpsEqualInProcessDumpsBitForBit) {
  testing::prepare_mpirun_env();
  for (int np : {2, 4}) {
    const auto root = testing::temp_dir("probe_mpi");
    const std::vector<std::string> modes = {"headwise", "chunkwise", "all_gather"};
    dump(root / "inproc", "x", modes, "--dtype bf16", np);
    dump(root / "inproc_stages", "x", modes, "--dtype bf16 --stages", np);
    for (const auto& m : modes)
      for (const std::string stages : {"", " --stages"}) {
        const std::string cmd = std::string(GDNV_MPIEXEC) + " --oversubscribe -np " + std::to_string(np) + " " +
                                GDNV_CLI + " probe dump --mode " + m + " --image x --dtype bf16 --out " +
                                (root / ("mpi" + std::string(stages.empty() ? "" : "_stages"))).string() + stages +
                                " >/dev/null 2>&1";
        ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
      }
    const auto r = run_cli("probe compare --policy bitwise --ref " + (root / "inproc").string() + " --cand " +
                           (root / "mpi").string());
    EXPECT_EQ(r.code, 0) << "np=" << np << "\n" << r.out << r.err;
    const int tensors = 3 * np * 9;  // 3 modes x np ranks x (out, grad_hidden, 7 parameter gradients)
    EXPECT_TRUE(contains(
        r.out, std::to_string(tensors) + " tensors compared, " + std::to_string(tensors) + " bitwise identical"))
        << r.out;
    // Every rank's stage pieces too, bit for bit.
    const std::string json = (root / "stages.json").string();
    const auto s = run_cli("probe compare --policy bitwise --ref " + (root / "inproc_stages").string() + " --cand " +
                           (root / "mpi_stages").string() + " --json " + json);
    EXPECT_EQ(s.code, 0) << "np=" << np << "\n" << s.out << s.err;
    const auto report = nlohmann::json::parse(read_file_text(json));
    EXPECT_GT(report["compared"].get<int>(), tensors);
    EXPECT_EQ(report["bitwise"], report["compared"]) << s.out;
    const auto meta = nlohmann::json::parse(read_file_text((root / "mpi" / "meta.json").string()));
    EXPECT_EQ(meta["modes"]["chunkwise"]["transport"], "mpi");
    EXPECT_EQ(meta["modes"]["chunkwise"]["world"], np);
    for (int rank = 0; rank < np; ++rank)  // rank 0's run id, broadcast to every process
      EXPECT_EQ(read_safetensors((root / "mpi" / ("chunkwise.rank" + std::to_string(rank) + ".safetensors")).string())
                    .metadata.at("run"),
                meta["modes"]["chunkwise"]["run"].get<std::string>());
    fs::remove_all(root);
  }
}

// The MPI world moves host memory: the emulated device backend under mpirun is bad input, before any
// rank runs (cuda runs there over NCCL).
TEST(ProbeCli, TheEmulatedBackendUnderMpirunIsBadInput) {
  testing::prepare_mpirun_env();
  const auto root = testing::temp_dir("probe_mpi_emu");
  const std::string err = (root / "err.txt").string();
  const std::string cmd = std::string(GDNV_MPIEXEC) + " --oversubscribe -np 2 " + GDNV_CLI +
                          " probe dump --mode headwise --image x --backend emu --out " + (root / "img").string() +
                          " >/dev/null 2>" + err;
  const int status = std::system(cmd.c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 3) << cmd << " status " << status;
  EXPECT_TRUE(contains(read_file_text(err),
                       "--backend emu needs --world inproc:W: the MPI world moves host memory; run without mpirun"))
      << read_file_text(err);
  EXPECT_FALSE(fs::exists(root / "img"));
  fs::remove_all(root);
}

}  // namespace
}  // namespace gdnv
