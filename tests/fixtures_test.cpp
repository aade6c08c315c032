// White-box tests of fixtures/: the catalog covers what docs/DESIGN.md §9 lists, the CP runs a case allows
// follow docs/DESIGN.md §3.1, the manifest round-trips and rejects paths outside its directory, and the
// committed catalog under fixtures/data is what the catalog generates (inputs) with non-trivial outputs.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include <gtest/gtest.h>

#include "core/file.hpp"
#include "fixtures/catalog.hpp"
#include "fixtures/cp_runs.hpp"
#include "fixtures/fixture_file.hpp"
#include "fixtures/fixtures.hpp"
#include "fixtures/manifest.hpp"

namespace gdnv::fixtures {
namespace {

namespace fs = std::filesystem;

FixtureCase named(const std::string& name) {
  auto c = find_case("default", name);
  if (!c) throw Error("no case " + name);
  return *c;
}

std::vector<std::string> labels(const std::vector<CpRun>& runs) {
  std::vector<std::string> out;
  for (const auto& r : runs) out.push_back(r.label());
  return out;
}

LayerFixture fixture_of(const FixtureCase& c) { return layer_fixture(case_inputs(c), c.name); }

TEST(FixturesCatalog, DefaultCoversTheDesignedVariety) {
  bool kernel = false, thd = false, sbhd = false, gva = false, short_seq = false, weak = false, strong = false,
       cp4 = false, tp2 = false, non_f64 = false;
  std::set<std::string> names, modes_at_cp_gt1;
  for (const auto& c : catalog("default")) {
    EXPECT_TRUE(names.insert(c.name).second) << "duplicate case " << c.name;
    if (c.kind == Kind::Kernel) {
      kernel = true;
      gva = gva || c.kernel.Hv > c.kernel.Hk;
      for (auto L : c.kernel.lengths) short_seq = short_seq || L < c.kernel.chunk_size;
      weak = weak || c.kernel.gates == KernelGates::Weak;
      strong = strong || c.kernel.gates == KernelGates::Strong;
      continue;
    }
    const harness::RunSpec& s = c.layer.run;
    (s.format == cp::Format::Thd ? thd : sbhd) = true;
    gva = gva || s.layer.linear_num_value_heads > s.layer.linear_num_key_heads;
    weak = weak || s.gates == harness::GateRegime::Weak;
    strong = strong || s.gates == harness::GateRegime::Strong;
    non_f64 = non_f64 || s.dtype != DType::F64;
    for (const auto& r : allowed_runs(fixture_of(c))) {
      if (r.cp > 1) modes_at_cp_gt1.insert(std::string(cp::mode_name(r.mode)));
      cp4 = cp4 || r.cp == 4;
      tp2 = tp2 || r.tp == 2;
    }
  }
  EXPECT_TRUE(kernel && thd && sbhd && gva && short_seq && weak && strong && cp4 && tp2 && non_f64);
  EXPECT_EQ(modes_at_cp_gt1, (std::set<std::string>{"headwise", "chunkwise", "all_gather"}));
  EXPECT_GT(catalog("full").size(), catalog("default").size());
}

TEST(FixturesCatalog, UnknownCatalogNamesTheChoices) {
  try {
    catalog("bogus");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "--catalog 'bogus' is unknown: use default or full");
  }
}

// SBHD with B=2 and Hk=2: headwise needs tp*cp | Hk, chunkwise needs B=1 once CP>1, all_gather needs
// THD once CP>1; CP=1 is legal under every mode; a dynamic run only where its static size is legal.
TEST(FixturesCpRuns, FollowTheIllegalCombinationMatrix) {
  const auto runs = allowed_runs(fixture_of(named("layer-sbhd-batch2-bf16")));
  EXPECT_EQ(labels(runs), (std::vector<std::string>{"headwise tp=1 cp=1", "headwise tp=1 cp=2",
                                                    "headwise tp=1 cp=2 micro-batches cp=1,2", "headwise tp=2 cp=1",
                                                    "chunkwise tp=1 cp=1", "chunkwise tp=2 cp=1",
                                                    "all_gather tp=1 cp=1", "all_gather tp=2 cp=1"}));
  // THD, Hk=2, lengths 8/24/16: headwise stops at tp*cp = 2 (so no dynamic run at cp=4); chunkwise and
  // all_gather run everywhere, each with a dynamic run per TP size.
  const auto thd = allowed_runs(fixture_of(named("layer-thd-varlen-short")));
  EXPECT_EQ(thd.size(), 3u + (6u + 2u) + (6u + 2u));
}

// Odd lengths (9, 5, 3) split nowhere at CP=1: every mode runs there, at both TP sizes.
TEST(FixturesCpRuns, OddLengthsRunEveryModeAtCp1) {
  const auto runs = allowed_runs(fixture_of(named("layer-thd-odd-lengths-cp1")));
  EXPECT_EQ(labels(runs),
            (std::vector<std::string>{"headwise tp=1 cp=1", "headwise tp=2 cp=1", "chunkwise tp=1 cp=1",
                                      "chunkwise tp=2 cp=1", "all_gather tp=1 cp=1", "all_gather tp=2 cp=1"}));
}

TEST(FixturesFile, InputsAreDeterministicAndOutputsSeparable) {
  const FixtureCase c = named("kernel-thd-varlen-gva");
  const auto a = serialize_safetensors(case_inputs(c)), b = serialize_safetensors(case_inputs(c));
  EXPECT_EQ(a, b);
  const TensorFile full = with_oracle(case_inputs(c), c.name);
  for (const char* out : {"o", "final_state", "dq", "dk", "dv", "dg", "dbeta", "dh0"})
    EXPECT_TRUE(full.has(out)) << out;
  EXPECT_EQ(serialize_safetensors(inputs_of(full)).size() < serialize_safetensors(full).size(), true);
  EXPECT_FALSE(inputs_of(full).has("o"));
  EXPECT_TRUE(inputs_of(full).has("q"));
  EXPECT_EQ(full.metadata.at("fixture_case"), c.name);
  EXPECT_EQ(full.metadata.at("seed"), "101");
  EXPECT_TRUE(full.metadata.count("oracle_version"));
}

TEST(FixturesManifest, RoundTripsAndRejectsPathsOutsideTheDirectory) {
  Manifest m{"default", "0.1.0", {{"a", "kernel", "a.safetensors", std::string(64, 'f'), "case a"}}};
  const std::string text = manifest_json(m);
  const Manifest back = parse_manifest(text, "M");
  ASSERT_EQ(back.cases.size(), 1u);
  EXPECT_EQ(back.cases[0].file, "a.safetensors");
  EXPECT_EQ(manifest_json(back), text);
  m.cases[0].file = "../a.safetensors";
  try {
    parse_manifest(manifest_json(m), "M");
    FAIL() << "no error";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("names file '../a.safetensors'; it must be a plain file name"),
              std::string::npos)
        << e.what();
  }
  try {
    parse_manifest("{", "M");
    FAIL() << "no error";
  } catch (const FormatError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("M: not valid JSON", 0), 0u) << e.what();
  }
}

// The committed files hold exactly the catalog's inputs (bit for bit: the inputs use IEEE arithmetic
// only), so an edit of the catalog that was not regenerated fails here.
TEST(FixturesCommitted, InputsAreTheCatalogs) {
  const std::string dir = committed_fixtures_dir();
  const Manifest m = parse_manifest(read_file_text(dir + "/" + kManifestName), kManifestName);
  const auto cases = catalog("default");
  ASSERT_EQ(m.catalog, "default");
  ASSERT_EQ(m.cases.size(), cases.size());
  for (std::size_t i = 0; i < cases.size(); ++i) {
    ASSERT_EQ(m.cases[i].name, cases[i].name);
    const TensorFile stored = inputs_of(read_safetensors(dir + "/" + m.cases[i].file));
    const TensorFile fresh = case_inputs(cases[i]);
    ASSERT_EQ(stored.tensors.size(), fresh.tensors.size()) << cases[i].name;
    for (const auto& [name, t] : fresh.tensors)
      EXPECT_TRUE(stored.has(name) && stored.tensors.at(name).bitwise_equal(t)) << cases[i].name << " " << name;
  }
}

// A stored answer that is zero, constant or non-finite would let a broken oracle or mode pass.
TEST(FixturesCommitted, OutputsAreNonTrivial) {
  const std::string dir = committed_fixtures_dir();
  std::uintmax_t bytes = 0;
  int outputs = 0;
  for (const auto& e : parse_manifest(read_file_text(dir + "/" + kManifestName), kManifestName).cases) {
    bytes += fs::file_size(dir + "/" + e.file);
    for (const auto& [name, t] : read_safetensors(dir + "/" + e.file).tensors) {
      if (!is_output(name)) continue;
      ++outputs;
      bool finite = true, varies = false;
      for (std::int64_t i = 0; i < t.numel(); ++i) {
        finite = finite && std::isfinite(t.get(i));
        varies = varies || t.get(i) != t.get(0);
      }
      EXPECT_TRUE(finite && varies) << e.name << " " << name;
    }
  }
  EXPECT_GT(outputs, 50);
  EXPECT_LT(bytes, 2u << 20) << "the committed catalog should stay under 2 MB";
}

}  // namespace
}  // namespace gdnv::fixtures
