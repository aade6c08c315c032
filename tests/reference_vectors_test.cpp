// The oracle reproduces the external reference vectors (tests/data/vectors, produced by FLA's
// naive_recurrent_gated_delta_rule and torch conv1d in float64): every output and gradient, both forms.
#include <gtest/gtest.h>

#include "core/safetensors.hpp"
#include "core/vectors.hpp"
#include "reference/conv1d.hpp"
#include "reference/kernel_io.hpp"
#include "reference_testing.hpp"

namespace gdnv {
namespace {

using testing::close;

// Both sides are fp64 evaluations of the same recurrence over <= 40 tokens of contracting maps
// (unit-norm k, beta in (0, 1), g <= 0): rounding differences of a few hundred eps = 1.1e-16 each,
// far below the 1e-12 the vectors' README asks for.
constexpr double kTol = 1e-12;

struct GdrVectorCase {
  const char* file;
  ref::GdrForm form;
  int chunk_size;
};

class GdrVectors : public ::testing::TestWithParam<GdrVectorCase> {};

TEST_P(GdrVectors, EveryOutputAndGradientMatchesFla) {
  const auto& p = GetParam();
  const std::string path = vector_path(p.file);
  TensorFile want = read_safetensors(path);
  TensorFile inputs = want;
  ref::GdrCase c = ref::take_gdr_case(inputs, path);
  ASSERT_TRUE(c.d_o && c.dht && c.in.initial_state) << "the vector carries do, dht and initial_state";
  c.chunk_size = p.chunk_size;
  const TensorFile got = ref::run_gdr_case(c, p.form);
  for (const char* name : {"o", "final_state", "dq", "dk", "dv", "dg", "dbeta", "dh0"})
    EXPECT_TRUE(close(name, got.at(name, "oracle"), want.at(name, path), kTol));
}

INSTANTIATE_TEST_SUITE_P(
    ReferenceVectors, GdrVectors,
    ::testing::Values(GdrVectorCase{"gdr_batched_h0.safetensors", ref::GdrForm::Recurrent, 64},
                      GdrVectorCase{"gdr_batched_h0.safetensors", ref::GdrForm::Chunked, 64},
                      GdrVectorCase{"gdr_batched_h0.safetensors", ref::GdrForm::Chunked, 16},
                      GdrVectorCase{"gdr_varlen_gva_scale.safetensors", ref::GdrForm::Recurrent, 64},
                      GdrVectorCase{"gdr_varlen_gva_scale.safetensors", ref::GdrForm::Chunked, 64},
                      GdrVectorCase{"gdr_varlen_gva_scale.safetensors", ref::GdrForm::Chunked, 16}),
    [](const auto& tp) {
      const std::string file = tp.param.file;
      return file.substr(0, file.find('.')) + (tp.param.form == ref::GdrForm::Recurrent
                                                   ? std::string("_recurrent")
                                                   : "_chunked" + std::to_string(tp.param.chunk_size));
    });

TEST(Conv1dVectors, SiluBiasOutputAndGradientsMatchTorch) {
  const std::string path = vector_path("conv1d_silu_bias.safetensors");
  const TensorFile want = read_safetensors(path);
  ASSERT_EQ(want.metadata.at("activation"), "silu");
  const ref::Conv1dInputs in{want.at("x", path), want.at("weight", path), want.at("bias", path), std::nullopt,
                             std::nullopt,       ref::Activation::Silu};
  EXPECT_TRUE(close("y", ref::conv1d_forward(in), want.at("y", path), kTol));
  const ref::Conv1dGrads d = ref::conv1d_backward(in, want.at("dy", path));
  EXPECT_TRUE(close("dx", d.dx, want.at("dx", path), kTol));
  EXPECT_TRUE(close("dweight", d.dweight, want.at("dweight", path), kTol));
  ASSERT_TRUE(d.dbias.has_value());
  EXPECT_TRUE(close("dbias", *d.dbias, want.at("dbias", path), kTol));
}

}  // namespace
}  // namespace gdnv
