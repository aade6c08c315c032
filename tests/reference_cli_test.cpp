// The real `gdn-verify reference` binary: reproduces the FLA vectors from the command line, upcasts
// other float dtypes, and rejects bad input with one line and exit 3, writing nothing.
#include <filesystem>

#include <gtest/gtest.h>

#include "cli_testing.hpp"
#include "core/safetensors.hpp"
#include "core/vectors.hpp"
#include "reference/case_params.hpp"
#include "reference/kernel_io.hpp"
#include "reference/layer_io.hpp"
#include "reference/layer_params.hpp"
#include "reference_testing.hpp"

namespace gdnv {
namespace {

using testing::close;
using testing::run_cli;

int count_lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

class ReferenceCli : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::temp_dir("reference"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // A small valid kernel-level file: packed varlen, GVA, initial state, do and dht.
  TensorFile valid_file() const {
    const testing::GdrSpec s{
        .T = 10, .Hk = 1, .Hv = 2, .K = 4, .V = 3, .cu_seqlens = std::vector<std::int64_t>{0, 3, 10}};
    const ref::GdrInputs in = testing::random_gdr(s);
    TensorFile f;
    for (auto [name, t] : {std::pair{"q", &in.q}, {"k", &in.k}, {"v", &in.v}, {"g", &in.g}, {"beta", &in.beta}})
      f.tensors.emplace(name, *t);
    f.tensors.emplace("initial_state", *in.initial_state);
    f.tensors.emplace("cu_seqlens", Tensor::from(*s.cu_seqlens, {3}));
    f.tensors.emplace("do", testing::random_normal({1, 10, 2, 3}, 5, "do"));
    f.tensors.emplace("dht", testing::random_normal({2, 2, 4, 3}, 5, "dht"));
    return f;
  }

  // A small layer-level file: SBHD S = 6, B = 2 (natural rows s*B + b differ from batch-major ones), GVA,
  // dk != dv, grad_output unless `forward_only`.
  static TensorFile layer_file(bool forward_only = false) {
    const ref::LayerConfig config({.hidden_size = 8,
                                   .linear_num_key_heads = 2,
                                   .linear_num_value_heads = 4,
                                   .linear_key_head_dim = 4,
                                   .linear_value_head_dim = 3});
    std::optional<Tensor> grad_output;
    if (!forward_only) grad_output = ref::seeded_normal(2, "grad_output", {6, 2, 8});
    return ref::write_layer_case({config, ref::case_params(config, 2),
                                  ref::seeded_normal(2, "hidden_states", {6, 2, 8}), std::nullopt, grad_output});
  }

  // Writes `f`, runs the CLI on it and expects exit 3 with `message` as the one error line, no output.
  void expect_rejected(const TensorFile& f, const std::string& message) {
    write_safetensors(path("in.safetensors"), f);
    const auto r = run_cli("reference --in " + path("in.safetensors") + " --out " + path("out.safetensors"));
    EXPECT_EQ(r.code, 3) << r.out << r.err;
    EXPECT_EQ(r.err, "error: " + path("in.safetensors") + ": " + message + "\n");
    EXPECT_EQ(count_lines(r.err), 1) << r.err;
    EXPECT_FALSE(std::filesystem::exists(path("out.safetensors"))) << "nothing half-written";
  }

  std::filesystem::path dir_;
};

TEST_F(ReferenceCli, HelpNamesTheCommand) {
  const auto r = run_cli("reference --help");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("usage: gdn-verify reference --in IN.safetensors --out OUT.safetensors"), std::string::npos);
}

TEST_F(ReferenceCli, ReproducesFlaVectorWithBothForms) {
  const std::string vec = vector_path("gdr_varlen_gva_scale.safetensors");
  const TensorFile want = read_safetensors(vec);
  for (const char* form : {"chunked", "recurrent"}) {
    SCOPED_TRACE(form);
    const auto r = run_cli("reference --in " + vec + " --out " + path("out.safetensors") + " --form " + form);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("wrote " + path("out.safetensors")), std::string::npos) << r.out;
    const TensorFile got = read_safetensors(path("out.safetensors"));
    EXPECT_EQ(got.tensors.size(), 8u);
    // The vector's README bound: both sides fp64 over <= 21 tokens, rounding ~1e-15.
    for (const char* name : {"o", "final_state", "dq", "dk", "dv", "dg", "dbeta", "dh0"}) {
      EXPECT_EQ(got.at(name, "out").dtype(), DType::F64) << name;
      EXPECT_TRUE(close(name, got.at(name, "out"), want.at(name, vec), 1e-12));
    }
    EXPECT_FALSE(got.metadata.at("oracle_version").empty());
    EXPECT_EQ(got.metadata.at("form"), form);
    EXPECT_EQ(got.metadata.at("scale"), "0.37");
    EXPECT_EQ(got.metadata.at("use_qk_l2norm"), "false");
  }
}

TEST_F(ReferenceCli, UpcastsF32InputsAndWritesOnlyForwardWithoutDo) {
  TensorFile f = valid_file();
  f.tensors.erase("do");
  f.tensors.erase("dht");
  for (auto& [name, t] : f.tensors)
    if (is_float(t.dtype())) t = t.to(DType::F32);
  f.metadata["use_qk_l2norm"] = "true";
  f.metadata["chunk_size"] = "4";
  write_safetensors(path("in.safetensors"), f);
  const auto r = run_cli("reference --in " + path("in.safetensors") + " --out " + path("out.safetensors"));
  ASSERT_EQ(r.code, 0) << r.err;
  const TensorFile got = read_safetensors(path("out.safetensors"));
  EXPECT_EQ(got.tensors.size(), 2u) << "o and final_state only";
  EXPECT_EQ(got.metadata.at("chunk_size"), "4");
  // The same F32 values upcast in-process give bit-identical outputs.
  TensorFile again = f;
  const TensorFile want = ref::run_gdr_case(ref::take_gdr_case(again, "in"), ref::GdrForm::Chunked);
  EXPECT_TRUE(got.at("o", "out").bitwise_equal(want.at("o", "want")));
  EXPECT_TRUE(got.at("final_state", "out").bitwise_equal(want.at("final_state", "want")));
  EXPECT_TRUE(testing::nontrivial(want.at("o", "want")));
}

// A conv1d kernel-level file (x and weight): y, final_state and the gradients, as the oracle computes them.
TEST_F(ReferenceCli, ConvFileGivesTheConvOracleWithFinalState) {
  TensorFile f;
  f.tensors.emplace("x", testing::random_normal({1, 7, 3}, 6, "x").to(DType::F32));
  f.tensors.emplace("weight", testing::random_normal({3, 4}, 6, "w"));
  f.tensors.emplace("initial_state", testing::random_normal({2, 3, 4}, 6, "h0"));
  f.tensors.emplace("cu_seqlens", Tensor::from(std::vector<std::int64_t>{0, 2, 7}, {3}));
  f.tensors.emplace("dy", testing::random_normal({1, 7, 3}, 6, "dy"));
  f.tensors.emplace("dht", testing::random_normal({2, 3, 4}, 6, "dht"));
  write_safetensors(path("in.safetensors"), f);
  const auto r = run_cli("reference --in " + path("in.safetensors") + " --out " + path("out.safetensors"));
  ASSERT_EQ(r.code, 0) << r.err;
  const TensorFile got = read_safetensors(path("out.safetensors"));
  EXPECT_EQ(got.tensors.size(), 5u) << "y final_state dx dweight dh0 (no bias)";
  TensorFile again = f;
  const ref::ConvCase c = ref::take_conv_case(again, "in");
  const ref::Conv1dGrads d = ref::conv1d_backward(c.in, *c.dy, c.dht);
  EXPECT_TRUE(got.at("y", "out").bitwise_equal(ref::conv1d_forward(c.in)));
  EXPECT_TRUE(got.at("final_state", "out").bitwise_equal(ref::conv1d_final_state(c.in)));
  EXPECT_TRUE(got.at("dx", "out").bitwise_equal(d.dx));
  EXPECT_TRUE(got.at("dh0", "out").bitwise_equal(*d.dh0));
  EXPECT_TRUE(testing::nontrivial(d.dx));
  EXPECT_EQ(got.metadata.at("activation"), "silu");
}

TEST_F(ReferenceCli, BadConvFilesAreRejected) {
  TensorFile f;
  f.tensors.emplace("x", testing::random_normal({1, 7, 3}, 6, "x"));
  f.tensors.emplace("weight", testing::random_normal({3, 4}, 6, "w"));
  f.tensors.emplace("dht", testing::random_normal({1, 3, 4}, 6, "dht"));
  expect_rejected(f, "tensor 'dht' is given without 'dy'; add dy to get gradients");
  f.tensors.emplace("dy", testing::random_normal({1, 7, 3}, 6, "dy"));
  f.tensors.insert_or_assign("dht", testing::random_normal({1, 3, 3}, 6, "dht"));
  expect_rejected(f, "dht has shape [1, 3, 3], expected [N, D, W] (the shape of the final state) = [1, 3, 4]");
  f.tensors.erase("dht");
  f.metadata["activation"] = "relu";
  expect_rejected(f, "metadata 'activation' = 'relu'; it must be silu (or swish) or none");
}

TEST_F(ReferenceCli, MissingTensorIsRejected) {
  TensorFile f = valid_file();
  f.tensors.erase("beta");
  expect_rejected(f, "tensor 'beta' is missing; a kernel-level input needs q k v g beta (docs/DESIGN.md §5)");
}

TEST_F(ReferenceCli, ShapeMismatchIsRejected) {
  TensorFile f = valid_file();
  f.tensors.insert_or_assign("k", Tensor(DType::F64, {1, 10, 1, 5}));
  expect_rejected(f, "k has shape [1, 10, 1, 5], expected [B, T, Hk, K] (the shape of q) = [1, 10, 1, 4]");
  f = valid_file();
  f.tensors.insert_or_assign("do", Tensor(DType::F64, {1, 10, 2, 4}));
  expect_rejected(f, "do has shape [1, 10, 2, 4], expected [B, T, Hv, V] (the shape of o) = [1, 10, 2, 3]");
}

TEST_F(ReferenceCli, IntegerDtypeIsRejected) {
  TensorFile f = valid_file();
  f.tensors.insert_or_assign("g", f.tensors.at("g").to(DType::I32));
  expect_rejected(f, "tensor 'g' has dtype I32; it must be a float dtype (F64, F32, BF16 or F16)");
  f = valid_file();
  f.tensors.insert_or_assign("cu_seqlens", Tensor::from(std::vector<double>{0, 3, 10}, {3}));
  expect_rejected(f, "tensor 'cu_seqlens' is F64 [3]; it must be a 1-d I32 or I64 tensor [N + 1]");
}

TEST_F(ReferenceCli, HeadsNotDividingAreRejected) {
  TensorFile f = valid_file();
  for (const char* name : {"q", "k"}) f.tensors.insert_or_assign(name, Tensor(DType::F64, {1, 10, 3, 4}));
  f.tensors.erase("initial_state");
  f.tensors.erase("dht");
  expect_rejected(f, "Hv % Hk != 0 (Hv = 2, Hk = 3): the value heads must be a multiple of the key heads (GVA)");
}

TEST_F(ReferenceCli, BadCuSeqlensAreRejected) {
  TensorFile f = valid_file();
  f.tensors.insert_or_assign("cu_seqlens", Tensor::from(std::vector<std::int32_t>{2, 3, 10}, {3}));
  expect_rejected(f, "cu_seqlens must start at 0 (got 2)");
  f.tensors.insert_or_assign("cu_seqlens", Tensor::from(std::vector<std::int32_t>{0, 7, 5}, {3}));
  expect_rejected(f, "cu_seqlens decreases at index 2 (7 -> 5); offsets must be non-decreasing");
  f.tensors.insert_or_assign("cu_seqlens", Tensor::from(std::vector<std::int32_t>{0, 3, 9}, {3}));
  expect_rejected(f, "cu_seqlens ends at 9 but the packed length T is 10; the last offset must equal T");
  f = valid_file();
  for (const char* name : {"q", "k"}) f.tensors.insert_or_assign(name, Tensor(DType::F64, {2, 5, 1, 4}));
  f.tensors.insert_or_assign("v", Tensor(DType::F64, {2, 5, 2, 3}));
  for (const char* name : {"g", "beta"}) f.tensors.insert_or_assign(name, Tensor(DType::F64, {2, 5, 2}));
  expect_rejected(f, "cu_seqlens needs B == 1 (got B = 2): pack the sequences along T into one batch row");
}

TEST_F(ReferenceCli, NaNInInputIsRejected) {
  TensorFile f = valid_file();
  f.tensors.at("q").set(7, std::nan(""));
  expect_rejected(f, "q holds NaN at flat index 7; the oracle needs finite inputs");
  f = valid_file();
  f.tensors.at("dht").set(1, std::nan(""));
  expect_rejected(f, "dht holds NaN at flat index 1; the oracle needs finite inputs");
}

TEST_F(ReferenceCli, BadMetadataIsRejected) {
  TensorFile f = valid_file();
  f.metadata["scale"] = "big";
  expect_rejected(f, "metadata 'scale' = 'big' is not a finite decimal number");
  f = valid_file();
  f.metadata["chunk_size"] = "0";
  expect_rejected(f, "metadata 'chunk_size' = 0; it must be a positive number of tokens (FLA uses 64)");
  f = valid_file();
  f.tensors.erase("do");
  expect_rejected(f, "tensor 'dht' is given without 'do'; add do to get gradients");
}

TEST_F(ReferenceCli, StagesOfALayerFileAreTheOraclesWithTheirShapes) {
  const TensorFile in = layer_file();
  write_safetensors(path("in.safetensors"), in);
  const auto r = run_cli("reference --stages --in " + path("in.safetensors") + " --out " + path("out.safetensors"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("  stage::conv [12, 28]"), std::string::npos) << r.out;
  const TensorFile got = read_safetensors(path("out.safetensors"));
  // The oracle in-process, its stages named as the harness and the probes name them.
  const ref::LayerCase c = ref::read_layer_case(in, "in");
  const ref::LayerForward fwd = ref::layer_forward(c.config, c.params, c.hidden_states, c.cu_seqlens);
  ref::StageTensors want = ref::forward_stages(c.config, fwd);
  (void)ref::layer_backward(c.config, c.params, fwd, *c.grad_output, &want);
  ASSERT_EQ(want.size(), 20u) << "10 stages and their gradients";
  for (const auto& [name, t] : want) {
    ASSERT_TRUE(got.has(name)) << name;
    EXPECT_EQ(got.at(name, "got").shape(), ref::stage_shape(c.config, name, 12)) << name;
    EXPECT_TRUE(got.at(name, "got").bitwise_equal(t)) << name;
  }
  EXPECT_TRUE(testing::nontrivial(want.at("stage::conv")));
  EXPECT_TRUE(testing::nontrivial(want.at("stage_grad::conv")));
  EXPECT_EQ(got.tensors.size(), want.size() + 2u + c.params.size()) << "the outputs and gradients as well";
}

TEST_F(ReferenceCli, StagesOfAForwardOnlyLayerFileAreTheForwardOnes) {
  write_safetensors(path("in.safetensors"), layer_file(/*forward_only=*/true));
  const auto r = run_cli("reference --stages --in " + path("in.safetensors") + " --out " + path("out.safetensors"));
  ASSERT_EQ(r.code, 0) << r.err;
  const TensorFile got = read_safetensors(path("out.safetensors"));
  EXPECT_EQ(got.tensors.size(), 11u) << "out and the 10 forward stages";
  EXPECT_TRUE(got.has("stage::gated_norm"));
  EXPECT_FALSE(got.has("stage_grad::conv"));
}

TEST_F(ReferenceCli, WithoutStagesNoStageIsWritten) {
  write_safetensors(path("in.safetensors"), layer_file());
  const auto r = run_cli("reference --in " + path("in.safetensors") + " --out " + path("out.safetensors"));
  ASSERT_EQ(r.code, 0) << r.err;
  const TensorFile got = read_safetensors(path("out.safetensors"));
  for (const auto& [name, t] : got.tensors) EXPECT_FALSE(name.starts_with("stage")) << name;
  EXPECT_EQ(got.tensors.size(), 2u + 7u) << "out, grad_hidden and 7 parameter gradients (no conv bias)";
}

TEST_F(ReferenceCli, StagesOfAKernelFileAreRejected) {
  write_safetensors(path("in.safetensors"), valid_file());
  const auto r = run_cli("reference --stages --in " + path("in.safetensors") + " --out " + path("out.safetensors"));
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.err, "error: " + path("in.safetensors") +
                       ": --stages names the layer's stages and needs a layer-level input (with hidden_states); "
                       "drop --stages for a kernel-level file\n");
  EXPECT_FALSE(std::filesystem::exists(path("out.safetensors")));
}

TEST_F(ReferenceCli, UnknownFormIsRejected) {
  write_safetensors(path("in.safetensors"), valid_file());
  const auto r =
      run_cli("reference --in " + path("in.safetensors") + " --out " + path("out.safetensors") + " --form fast");
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.err, "error: gdn-verify reference: --form 'fast' is not one of chunked, recurrent\n");
  EXPECT_FALSE(std::filesystem::exists(path("out.safetensors")));
}

}  // namespace
}  // namespace gdnv
