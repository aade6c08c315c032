// The real `gdn-verify reference` binary on layer-level files: writes what the in-process oracle
// computes, and rejects a bad file with one line and exit 3, writing nothing.
#include <filesystem>

#include <gtest/gtest.h>

#include "cli_testing.hpp"
#include "core/safetensors.hpp"
#include "layer_testing.hpp"
#include "reference/case_params.hpp"
#include "reference/layer_io.hpp"

namespace gdnv {
namespace {

using testing::run_cli;

class LayerCli : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::temp_dir("layer_cli"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // A small packed THD case with GVA, conv bias and grad_output.
  static TensorFile valid_file() {
    const ref::LayerConfig config({.hidden_size = 8,
                                   .linear_num_key_heads = 2,
                                   .linear_num_value_heads = 4,
                                   .linear_key_head_dim = 4,
                                   .linear_value_head_dim = 3,
                                   .conv_bias = true});
    return ref::write_layer_case(
        {config, ref::case_params(config, 1), ref::seeded_normal(1, "hidden_states", {10, 1, 8}),
         std::vector<std::int64_t>{0, 4, 10}, ref::seeded_normal(1, "grad_output", {10, 1, 8})});
  }

  testing::CliResult run(const std::string& extra = "") const {
    return run_cli("reference --in " + path("in.safetensors") + " --out " + path("out.safetensors") + extra);
  }

  std::filesystem::path dir_;
};

TEST_F(LayerCli, WritesWhatTheOracleComputesWithBothForms) {
  const TensorFile in = valid_file();
  write_safetensors(path("in.safetensors"), in);
  for (const auto form : {ref::CoreForm::Chunked, ref::CoreForm::Recurrent}) {
    const bool chunked = form == ref::CoreForm::Chunked;
    const auto r = run(chunked ? "" : " --form recurrent");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("GatedDeltaNet layer"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("  grad::in_proj.weight [48, 8]"), std::string::npos) << r.out;
    const TensorFile got = read_safetensors(path("out.safetensors"));
    const TensorFile want = ref::run_layer_file(in, "in", form);
    testing::expect_nontrivial(want.at("out", "want"), "out");
    ASSERT_EQ(got.tensors.size(), want.tensors.size());
    EXPECT_EQ(got.tensors.size(), 2u + 8u) << "out, grad_hidden and 8 parameter gradients";
    for (const auto& [name, t] : want.tensors) EXPECT_TRUE(got.at(name, "got").bitwise_equal(t)) << name;
    EXPECT_EQ(got.metadata.at("form"), chunked ? "chunked" : "recurrent");
    EXPECT_EQ(got.metadata.at("hidden_size"), "8");
  }
}

TEST_F(LayerCli, BadLayerFileIsOneLineExitThreeAndNoOutput) {
  TensorFile f = valid_file();
  f.tensors.erase("in_proj.layer_norm_weight");
  write_safetensors(path("in.safetensors"), f);
  const auto r = run();
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.err, "error: " + path("in.safetensors") +
                       ": parameter 'in_proj.layer_norm_weight' [8] is missing from the layer file\n");
  EXPECT_FALSE(std::filesystem::exists(path("out.safetensors"))) << "nothing half-written";
}

TEST_F(LayerCli, HelpDescribesLayerFiles) {
  const auto r = run_cli("reference --help");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("hidden_states"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("grad::<param>"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace gdnv
