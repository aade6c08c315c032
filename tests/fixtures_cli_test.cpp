// gdn-verify fixtures generate | verify, run as a user runs them. The committed catalog must verify
// (so a change that moves the oracle or any CP mode fails here); each manifest problem is reported by
// file name with exit 2, a moved value by case and tensor with exit 1, bad input with exit 3.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <regex>
#include <set>

#include <gtest/gtest.h>

#include "cli_testing.hpp"
#include "core/file.hpp"
#include "core/safetensors.hpp"
#include "core/sha256.hpp"
#include "faults/registry.hpp"
#include "fixtures/fixtures.hpp"
#include "fixtures/manifest.hpp"

namespace gdnv::testing {
namespace {

namespace fs = std::filesystem;
using fixtures::kManifestName;

// The line of `text` that starts with `prefix` ("" when none).
std::string line_of(const std::string& text, const std::string& prefix) {
  std::size_t at = text.rfind("\n" + prefix);
  at = text.rfind(prefix, 0) == 0 ? 0 : at == std::string::npos ? at : at + 1;
  return at == std::string::npos ? "" : text.substr(at, text.find('\n', at) - at);
}

std::string committed() { return fixtures::committed_fixtures_dir(); }

// A copy of the committed catalog, whose files and manifest a test may then break: the manifest must
// list the whole catalog, so a copy is whole (its verify takes about a second).
fs::path committed_copy(const std::string& tag) {
  const fs::path dir = temp_dir(tag);
  fs::copy(committed(), dir);
  return dir;
}

fixtures::Manifest manifest_of(const fs::path& dir) {
  return fixtures::parse_manifest(read_file_text((dir / kManifestName).string()), kManifestName);
}
void write_manifest(const fs::path& dir, const fixtures::Manifest& m) {
  write_file_atomic((dir / kManifestName).string(), fixtures::manifest_json(m));
}

// The manifest's sha256 of `file` set to the file's: what an edit that also updates the manifest leaves.
void update_sha(const fs::path& dir, const std::string& file) {
  fixtures::Manifest m = manifest_of(dir);
  for (auto& e : m.cases)
    if (e.file == file) e.sha256 = sha256_hex(read_file_bytes((dir / file).string()));
  write_manifest(dir, m);
}

// Rewrites one value of a stored tensor and the manifest's sha256 to match: what a fixture looks like
// to a build whose oracle (or mode) moved that value.
void move_value(const fs::path& dir, const std::string& file, const std::string& tensor, double factor) {
  TensorFile f = read_safetensors((dir / file).string());
  Tensor& t = f.tensors.at(tensor);
  t.set(0, t.get(0) * factor + 1e-3);
  write_safetensors((dir / file).string(), f);
  update_sha(dir, file);
}

TEST(FixturesCli, CommittedCatalogVerifies) {
  const CliResult r = run_cli("fixtures verify --dir " + committed());
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "[ 1/11] kernel-thd-varlen-gva")) << r.out;
  EXPECT_TRUE(contains(r.out, "[ 9/11] layer-thd-wide-conv-bias")) << r.out;
  EXPECT_TRUE(contains(r.out, "[10/11] layer-thd-odd-lengths-cp1")) << r.out;
  EXPECT_TRUE(contains(r.out, "[11/11] layer-thd-extreme-fp32")) << r.out;
  EXPECT_TRUE(
      contains(r.out, "11 cases (0 failed), 91 CP runs (0 failed), 0 tensor failures, 0 manifest/structure problems"))
      << r.out;
  EXPECT_TRUE(contains(r.out, "\nPASS\n")) << r.out;
}

// --case verifies one case alone, as the gate's fixture step prints it to reproduce a failure.
TEST(FixturesCli, CaseVerifiesThatCaseAlone) {
  const CliResult r = run_cli("fixtures verify --dir " + committed() + " --case layer-thd-varlen-short");
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "] layer-thd-varlen-short")) << r.out;
  EXPECT_FALSE(contains(r.out, "] kernel-thd-varlen-gva")) << r.out;
  EXPECT_TRUE(contains(r.out, "1 cases (0 failed)")) << r.out;
  const CliResult unknown = run_cli("fixtures verify --dir " + committed() + " --case no-such-case");
  EXPECT_EQ(unknown.code, 3);
  EXPECT_TRUE(contains(unknown.err, "error: fixtures verify --case 'no-such-case' is not a case of ")) << unknown.err;
  EXPECT_TRUE(contains(unknown.err, ": use one of kernel-thd-varlen-gva, kernel-batch-weak")) << unknown.err;
}

// Every planted fault of the CP implementation (faults/registry.hpp) moves some CP run of the committed
// catalog outside its gate: the catalog is strong enough to catch each of them. Except the faults that
// stay inside every absolute gate by design, which the gate's "precision regression" step catches
// against its baseline (tests/precision_regression_test.cpp).
TEST(FixturesCli, CommittedCatalogCatchesEveryPlantedFault) {
  // Faults of a class the fixtures do not hold, each caught by its own gate step (docs/DESIGN.md §10):
  // an error inside every absolute gate (precision regression), plans of two packings at one CP size
  // (dynamic CP in the CP mode matrix), spans of several chunks (adjoint dot-products, CP mode matrix),
  // a bf16 rounding of the gates or of the gradient sum below every layer gate and the collectives' bits
  // and bytes (precision rules, communicator semantics), a gpu/ kernel's bug (the emu matrix; fixtures
  // run the CPU backend).
  const std::vector<std::string> caught_elsewhere = {
      "rmsnorm_fast_rsqrt", "dynamic_cp_reuses_plan", "backward_span_map_untransposed", "gate_bf16_before_exp",
      "reduce_rounds_per_hop", "reduce_own_rank_first", "grad_allreduce_bf16", "halo_gathers_whole_span",
      "gpu_conv_bleeds_across_sequences",
      // Training-only bugs: a single layer's fixture has no loss, padding or sub-group gradient sum.
      "loss_normalized_per_rank", "padding_counted_in_loss", "dynamic_cp_grads_over_static_world",
      "dynamic_cp_grads_not_combined", "dynamic_cp_grads_root_rank_zero",
      // The MPI transport (fixtures run in-process) and gpu/'s kernels (fixtures run the CPU backend).
      "mpi_all_reduce_drops_remainder", "gpu_linear_dx_accumulates", "gpu_conv_halo_grad_past_first_sequence"};
  for (const auto& fault : all_faults()) {
    if (std::find(caught_elsewhere.begin(), caught_elsewhere.end(), fault.name) != caught_elsewhere.end()) continue;
    ::setenv("GDNV_FAULT", std::string(fault.name).c_str(), 1);
    const CliResult r = run_cli("fixtures verify --dir " + committed());
    ::unsetenv("GDNV_FAULT");
    EXPECT_EQ(r.code, 1) << fault.name << "\n" << r.out << r.err;
    EXPECT_TRUE(contains(r.out, "\nFAIL\n")) << fault.name;
  }
}

TEST(FixturesCli, GenerateTwiceIsByteIdentical) {
  const fs::path a = temp_dir("fixtures_a"), b = temp_dir("fixtures_b");
  const CliResult ra = run_cli("fixtures generate --dir " + a.string());
  const CliResult rb = run_cli("fixtures generate --dir " + b.string() + " --catalog default");
  ASSERT_EQ(ra.code, 0) << ra.err;
  ASSERT_EQ(rb.code, 0) << rb.err;
  EXPECT_TRUE(contains(ra.out, "wrote 11 fixtures")) << ra.out;
  int files = 0;
  for (const auto& entry : fs::directory_iterator(a)) {
    ++files;
    const std::string name = entry.path().filename().string();
    EXPECT_EQ(read_file_bytes(entry.path().string()), read_file_bytes((b / name).string())) << name;
  }
  EXPECT_EQ(files, 12);  // 11 cases and the manifest
  fs::remove_all(a);
  fs::remove_all(b);
}

// A user's `fixtures generate` reproduces the committed catalog byte for byte: a change that moves any
// oracle bit (or the catalog) without regenerating fixtures/data fails here, naming the recipe.
TEST(FixturesCli, GenerateReproducesTheCommittedCatalogByteForByte) {
  const fs::path dir = temp_dir("fixtures_regen");
  const CliResult r = run_cli("fixtures generate --dir " + dir.string());
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string recipe =
      " differs from the committed fixtures/data. If the oracle changed on purpose: bump kOracleVersion "
      "(reference/oracle_version.hpp), run 'gdn-verify fixtures verify --dir fixtures/data' to review how far "
      "each case moved, then 'gdn-verify fixtures generate --dir fixtures/data' and commit (docs/fixtures.md)";
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.insert(entry.path().filename().string());
  for (const auto& entry : fs::directory_iterator(committed())) names.insert(entry.path().filename().string());
  for (const auto& name : names) {
    const fs::path fresh = dir / name, stored = fs::path(committed()) / name;
    ASSERT_TRUE(fs::exists(fresh) && fs::exists(stored)) << name << recipe;
    EXPECT_TRUE(read_file_bytes(fresh.string()) == read_file_bytes(stored.string())) << name << recipe;
  }
  EXPECT_EQ(names.size(), 12u);  // 11 cases and the manifest
  fs::remove_all(dir);
}

TEST(FixturesCli, CorruptedFileIsNamed) {
  const fs::path dir = committed_copy("fixtures_corrupt");
  std::vector<std::uint8_t> bytes = read_file_bytes((dir / "kernel-strong.safetensors").string());
  bytes[bytes.size() - 3] ^= 0x40;
  write_file_atomic((dir / "kernel-strong.safetensors").string(), bytes);
  const CliResult r = run_cli("fixtures verify --dir " + dir.string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "PROBLEM kernel-strong.safetensors: corrupted: sha256 ")) << r.out;
  EXPECT_TRUE(contains(line_of(r.out, "[ 1/11] kernel-thd-varlen-gva"), " pass ")) << r.out;
  EXPECT_TRUE(contains(line_of(r.out, "[ 3/11] kernel-strong"), " FAIL ")) << r.out;
  fs::remove_all(dir);
}

TEST(FixturesCli, MissingFileIsNamed) {
  const fs::path dir = committed_copy("fixtures_missing");
  fs::remove(dir / "kernel-strong.safetensors");
  const CliResult r = run_cli("fixtures verify --dir " + dir.string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "PROBLEM kernel-strong.safetensors: missing (case kernel-strong)")) << r.out;
  fs::remove_all(dir);
}

TEST(FixturesCli, ExtraFileIsNamed) {
  const fs::path dir = committed_copy("fixtures_extra");
  fs::copy_file(dir / "kernel-strong.safetensors", dir / "stray.safetensors");
  const CliResult r = run_cli("fixtures verify --dir " + dir.string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "PROBLEM stray.safetensors: extra file, not in MANIFEST.json")) << r.out;
  fs::remove_all(dir);
}

TEST(FixturesCli, MissingManifestIsStructural) {
  const fs::path dir = temp_dir("fixtures_nomanifest");
  const CliResult r = run_cli("fixtures verify --dir " + dir.string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "PROBLEM MANIFEST.json: missing; generate the fixtures with")) << r.out;
  fs::remove_all(dir);
}

TEST(FixturesCli, MovedKernelValueNamesCaseAndTensor) {
  const fs::path dir = committed_copy("fixtures_moved");
  move_value(dir, "kernel-strong.safetensors", "dk", 1.001);
  const CliResult r = run_cli("fixtures verify --dir " + dir.string());
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(contains(r.out, "FAIL kernel-strong: oracle tensor 'dk' moved: rel_rms ")) << r.out;
  EXPECT_TRUE(contains(r.out, "11 cases (1 failed), 91 CP runs (0 failed), 1 tensor failures")) << r.out;
  fs::remove_all(dir);
}

// A moved layer output fails the oracle check and every CP run, which are judged against the stored
// answer.
TEST(FixturesCli, MovedLayerValueFailsOracleAndCpRuns) {
  const fs::path dir = committed_copy("fixtures_moved_layer");
  move_value(dir, "layer-sbhd-strong.safetensors", "grad::A_log", 1.5);
  const CliResult r = run_cli("fixtures verify --dir " + dir.string() + " --case layer-sbhd-strong");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(contains(r.out, "FAIL layer-sbhd-strong: oracle tensor 'grad::A_log' moved")) << r.out;
  EXPECT_TRUE(contains(r.out, "FAIL layer-sbhd-strong: chunkwise tp=1 cp=4: tensor 'grad::A_log' rel_rms")) << r.out;
  const std::regex counts(R"(1 cases \(1 failed\), (\d+) CP runs \((\d+) failed\))");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, counts)) << r.out;
  EXPECT_EQ(m[1], m[2]) << "every CP run is judged against the moved answer: " << m[0];
  fs::remove_all(dir);
}

TEST(FixturesCli, UpdateRewritesThenVerifyPasses) {
  const fs::path dir = committed_copy("fixtures_update");
  move_value(dir, "kernel-strong.safetensors", "dk", 1.001);
  fs::remove(dir / "kernel-thd-varlen-gva.safetensors");
  const CliResult up = run_cli("fixtures verify --update --dir " + dir.string());
  EXPECT_EQ(up.code, 0) << up.out;
  EXPECT_TRUE(contains(up.out, "updated kernel-thd-varlen-gva.safetensors: missing; regenerated from catalog default"))
      << up.out;
  EXPECT_TRUE(contains(up.out, "updated kernel-strong.safetensors: oracle tensor 'dk' moved")) << up.out;
  EXPECT_TRUE(contains(up.out, "updated MANIFEST.json")) << up.out;
  const CliResult again = run_cli("fixtures verify --dir " + dir.string());
  EXPECT_EQ(again.code, 0) << again.out;
  EXPECT_TRUE(contains(again.out, "0 files updated")) << again.out;
  // The rewritten answer is the oracle's again.
  const Tensor want = read_safetensors(committed() + "/kernel-strong.safetensors").tensors.at("dk");
  EXPECT_EQ(read_safetensors((dir / "kernel-strong.safetensors").string()).tensors.at("dk").get(0), want.get(0));
  fs::remove_all(dir);
}

TEST(FixturesCli, ManifestPointingOutsideTheDirectoryIsRejected) {
  const fs::path dir = committed_copy("fixtures_escape");
  std::string text = read_file_text((dir / kManifestName).string());
  text.replace(text.find("\"kernel-strong.safetensors\""), 27, "\"../kernel-strong.safetensors\"");
  write_file_atomic((dir / kManifestName).string(), text);
  const CliResult r = run_cli("fixtures verify --dir " + dir.string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "names file '../kernel-strong.safetensors'; it must be a plain file name")) << r.out;
  fs::remove_all(dir);
}

// The catalog in the source pins what a fixture directory holds: a manifest that lists no case, a case
// twice, a case the catalog lacks or not every case of it is a structural problem, never a PASS.
TEST(FixturesCli, TheManifestMustListItsWholeCatalogOnce) {
  const fs::path dir = committed_copy("fixtures_catalog");
  const fixtures::Manifest whole = manifest_of(dir);
  const auto verify = [&](const std::function<void(fixtures::Manifest&)>& edit, const std::string& problem) {
    fixtures::Manifest m = whole;
    edit(m);
    write_manifest(dir, m);
    const CliResult r = run_cli("fixtures verify --dir " + dir.string());
    EXPECT_EQ(r.code, 2) << problem << "\n" << r.out;
    EXPECT_TRUE(contains(r.out, "PROBLEM MANIFEST.json: " + problem)) << r.out;
    EXPECT_TRUE(contains(r.out, "\nFAIL\n")) << r.out;
    return r;
  };
  for (const auto& e : whole.cases) fs::remove(dir / e.file);
  verify([](auto& m) { m.cases.clear(); }, "lists no cases; regenerate the directory with");
  fs::remove_all(dir);
  fs::copy(committed(), dir);
  const CliResult twice =
      verify([](auto& m) { m.cases.push_back(m.cases[2]); }, "case 'kernel-strong' is listed twice");
  EXPECT_TRUE(contains(twice.out, "11 cases (0 failed)")) << "verified once\n" << twice.out;
  verify([](auto& m) { m.cases.erase(m.cases.begin() + 1); },
         "catalog default's case 'kernel-batch-weak' is not listed");
  verify([](auto& m) { m.catalog = "full"; }, "catalog full's case ");
  fs::remove_all(dir);
}

// A fixture relabelled to a looser dtype, with its sha256 updated to match, is not its catalog case:
// every CP run of it would otherwise be judged at bf16 gates.
TEST(FixturesCli, AFixtureRelabelledToAnotherDtypeFails) {
  const fs::path dir = committed_copy("fixtures_relabel");
  const std::string file = "layer-thd-extreme-fp32.safetensors";
  TensorFile f = read_safetensors((dir / file).string());
  f.metadata["dtype"] = "bf16";
  write_safetensors((dir / file).string(), f);
  update_sha(dir, file);
  const CliResult r = run_cli("fixtures verify --dir " + dir.string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "PROBLEM " + file + ": metadata 'dtype' is 'bf16', catalog default says 'fp32'"))
      << r.out;
  const CliResult up = run_cli("fixtures verify --update --dir " + dir.string());
  EXPECT_EQ(up.code, 0) << up.out;
  EXPECT_EQ(read_file_bytes((dir / file).string()), read_file_bytes(committed() + "/" + file)) << "the catalog's again";
  fs::remove_all(dir);
}

TEST(FixturesCli, BadInputIsOneLineAndExit3) {
  const fs::path dir = temp_dir("fixtures_bad") / "not-created";
  struct Case {
    std::string args, message;
  };
  const std::vector<Case> cases = {
      {"fixtures generate --dir " + dir.string() + " --catalog bogus",
       "error: --catalog 'bogus' is unknown: use default or full\n"},
      {"fixtures generate",
       "error: gdn-verify fixtures generate: the option '--dir' is required but missing; see "
       "'gdn-verify fixtures generate --help'\n"},
      {"fixtures verify",
       "error: gdn-verify fixtures verify: the option '--dir' is required but missing; see "
       "'gdn-verify fixtures verify --help'\n"},
      {"fixtures verify --dir " + dir.string(),
       "error: fixtures verify: --dir '" + dir.string() +
           "' is not a directory: pass a directory written by 'gdn-verify fixtures generate --dir DIR'\n"},
      {"fixtures",
       "error: fixtures: missing subcommand: use 'gdn-verify fixtures generate --dir DIR' or "
       "'gdn-verify fixtures verify --dir DIR'\n"},
      {"fixtures regenerate",
       "error: unknown fixtures subcommand 'regenerate': use generate, verify or precision-baseline\n"},
  };
  for (const auto& c : cases) {
    const CliResult r = run_cli(c.args);
    EXPECT_EQ(r.code, 3) << c.args;
    EXPECT_EQ(r.err, c.message) << c.args;
    EXPECT_EQ(r.out, "") << c.args;
  }
  EXPECT_FALSE(fs::exists(dir)) << "a failed generate must write nothing";
  fs::remove_all(dir.parent_path());
}

}  // namespace
}  // namespace gdnv::testing
