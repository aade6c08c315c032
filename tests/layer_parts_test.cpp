// White-box tests of the GatedDeltaNet layer's parts that do not involve the core op or conv:
// config validation, parameter names and init, the two RMSNorms, the gates, TP sharding.
#include <atomic>
#include <cmath>

#include <gtest/gtest.h>

#include "core/error.hpp"
#include "core/parallel.hpp"
#include "layer_testing.hpp"
#include "reference/case_params.hpp"
#include "reference/gates.hpp"
#include "reference/layer_config.hpp"
#include "reference/layer_params.hpp"
#include "reference/norms.hpp"
#include "reference/tp_sharding.hpp"

namespace gdnv::ref {
namespace {

using testing::diff;
using testing::dot;
using testing::error_of;
using testing::expect_nontrivial;
using testing::fd_gradient;

LayerConfig::Values small_values() {
  return {.hidden_size = 6,
          .linear_num_key_heads = 4,
          .linear_num_value_heads = 8,
          .linear_key_head_dim = 2,
          .linear_value_head_dim = 3,
          .linear_conv_kernel_dim = 4,
          .layernorm_epsilon = 1e-6,
          .conv_bias = true};
}

// ---- config ---------------------------------------------------------------------------------

TEST(LayerConfig, RejectsValueHeadsNotMultipleOfKeyHeads) {
  auto v = small_values();
  v.linear_num_key_heads = 3;
  EXPECT_EQ(error_of([&] { LayerConfig c(v); }),
            "layer config: linear_num_value_heads = 8 is not a multiple of linear_num_key_heads = 3; GVA maps "
            "Hv/Hk value heads onto each key head, so choose Hv divisible by Hk");
}

TEST(LayerConfig, RejectsEveryZeroDimensionByName) {
  const std::pair<const char*, std::int64_t LayerConfig::Values::*> fields[] = {
      {"hidden_size", &LayerConfig::Values::hidden_size},
      {"linear_num_key_heads", &LayerConfig::Values::linear_num_key_heads},
      {"linear_num_value_heads", &LayerConfig::Values::linear_num_value_heads},
      {"linear_key_head_dim", &LayerConfig::Values::linear_key_head_dim},
      {"linear_value_head_dim", &LayerConfig::Values::linear_value_head_dim},
      {"linear_conv_kernel_dim", &LayerConfig::Values::linear_conv_kernel_dim}};
  for (const auto& [name, field] : fields) {
    auto v = small_values();
    v.*field = 0;
    EXPECT_EQ(error_of([&] { LayerConfig c(v); }),
              "layer config: " + std::string(name) + " = 0 must be a positive integer");
  }
}

TEST(LayerConfig, RejectsNonPositiveEpsilon) {
  auto v = small_values();
  v.layernorm_epsilon = 0;
  EXPECT_EQ(error_of([&] { LayerConfig c(v); }),
            "layer config: layernorm_epsilon = 0 must be a finite positive number such as 1e-06");
}

TEST(LayerConfig, SizesFollowTheDesignTable) {
  const LayerConfig c(small_values());
  // docs/DESIGN.md §1.3: in_proj rows 2*Hk*dk + 2*Hv*dv + 2*Hv = 16 + 48 + 16; conv channels 2*Hk*dk + Hv*dv.
  EXPECT_EQ(c.in_proj_dim(), 80);
  EXPECT_EQ(c.conv_dim(), 40);
}

TEST(LayerConfig, MetadataRoundTripsUnderMegatronNames) {
  auto v = small_values();
  v.layernorm_epsilon = 3.5e-5;
  Metadata m;
  write_layer_config(LayerConfig(v), m);
  EXPECT_EQ(m.at("linear_num_value_heads"), "8");
  EXPECT_EQ(m.at("layernorm_epsilon"), "3.5e-05");
  const LayerConfig back = layer_config_from_metadata(m, true, "x.safetensors");
  EXPECT_EQ(back.values().hidden_size, v.hidden_size);
  EXPECT_EQ(back.Hk(), v.linear_num_key_heads);
  EXPECT_EQ(back.Hv(), v.linear_num_value_heads);
  EXPECT_EQ(back.dk(), v.linear_key_head_dim);
  EXPECT_EQ(back.dv(), v.linear_value_head_dim);
  EXPECT_EQ(back.W(), v.linear_conv_kernel_dim);
  EXPECT_EQ(back.eps(), v.layernorm_epsilon);
}

TEST(LayerConfig, MetadataErrorsNameFileAndKey) {
  Metadata m;
  write_layer_config(LayerConfig(small_values()), m);
  m.erase("linear_key_head_dim");
  EXPECT_EQ(error_of([&] { layer_config_from_metadata(m, false, "x.safetensors"); }),
            "x.safetensors: metadata 'linear_key_head_dim' is missing; a layer file carries its config under "
            "Megatron's names (docs/DESIGN.md §5)");
  write_layer_config(LayerConfig(small_values()), m);
  m.insert_or_assign("linear_num_key_heads", std::string("3"));
  EXPECT_NE(error_of([&] {
              layer_config_from_metadata(m, false, "x.safetensors");
            }).find("x.safetensors: layer config: linear_num_value_heads = 8 is not a multiple"),
            std::string::npos);
}

// ---- parameters and init --------------------------------------------------------------------

TEST(LayerParams, ValidateNamesWrongShapeMissingAndUnexpected) {
  const LayerConfig c(small_values());
  LayerParams p = init_params(c, 1);
  p[kInProj] = Tensor(DType::F64, {79, 6});
  EXPECT_EQ(error_of([&] { validate_params(c, p); }),
            "parameter 'in_proj.weight' has shape [79, 6], expected [80, 6] for hidden_size=6 Hk=4 Hv=8 dk=2 dv=3 W=4");
  p = init_params(c, 1);
  p.erase(kConvBias);
  EXPECT_EQ(error_of([&] { validate_params(c, p); }),
            "parameter 'conv1d.bias' [40] is missing (the config has conv_bias = true)");
  p = init_params(c, 1);
  p["conv1d.biases"] = Tensor(DType::F64, {40});
  EXPECT_EQ(error_of([&] { validate_params(c, p); }),
            "unexpected parameter 'conv1d.biases'; GatedDeltaNet parameters are those of docs/DESIGN.md §1.3");
  p = init_params(c, 1);
  p[kALog] = p[kALog].to(DType::F32);
  EXPECT_EQ(error_of([&] { validate_params(c, p); }),
            "parameter 'A_log' has dtype F32; the oracle computes in fp64: convert it with Tensor::to(DType::F64)");
}

TEST(LayerParams, InitIsBitIdenticalForASeedAndDiffersAcrossSeeds) {
  const LayerConfig c(small_values());
  const LayerParams a = init_params(c, 7), b = init_params(c, 7), other = init_params(c, 8);
  validate_params(c, a);
  for (const auto& [name, t] : a) {
    EXPECT_TRUE(t.bitwise_equal(b.at(name))) << name;
    if (name != kInProjNorm && name != kOutNorm && name != kDtBias) {  // constants by design
      EXPECT_FALSE(t.bitwise_equal(other.at(name))) << name;
    }
  }
}

TEST(LayerParams, AddingAParameterShiftsNoOther) {
  auto v = small_values();
  const LayerParams with_bias = init_params(LayerConfig(v), 3);
  v.conv_bias = false;
  const LayerParams without = init_params(LayerConfig(v), 3);
  EXPECT_EQ(with_bias.size(), without.size() + 1);
  for (const auto& [name, t] : without) EXPECT_TRUE(t.bitwise_equal(with_bias.at(name))) << name;
}

double mean_of(const Tensor& t) {
  double s = 0;
  for (std::int64_t i = 0; i < t.numel(); ++i) s += t.get(i);
  return s / static_cast<double>(t.numel());
}
double variance_of(const Tensor& t) {
  const double m = mean_of(t);
  double s = 0;
  for (std::int64_t i = 0; i < t.numel(); ++i) s += (t.get(i) - m) * (t.get(i) - m);
  return s / static_cast<double>(t.numel());
}

TEST(LayerParams, InitFollowsMegatron) {
  const LayerConfig c({.hidden_size = 64,
                       .linear_num_key_heads = 2,
                       .linear_num_value_heads = 4,
                       .linear_key_head_dim = 16,
                       .linear_value_head_dim = 16,
                       .conv_bias = true});
  const LayerParams p = init_params(c, 11);
  for (const char* ones : {kInProjNorm, kOutNorm, kDtBias})
    for (std::int64_t i = 0; i < p.at(ones).numel(); ++i) ASSERT_EQ(p.at(ones).get(i), 1.0) << ones;
  for (std::int64_t i = 0; i < c.Hv(); ++i) {
    const double A = std::exp(p.at(kALog).get(i));
    EXPECT_TRUE(A >= 1.0 - 1e-12 && A < 16.0) << "A = exp(A_log) = " << A;
  }
  expect_nontrivial(p.at(kALog), "A_log");
  // Sample variance of n iid draws has relative standard deviation sqrt(2/n) (normal) or
  // sqrt(0.8/n) (uniform); 6 of them bound a correct init with probability > 1 - 1e-8.
  const auto expect_variance = [](const Tensor& t, double var, double rel_sd_per_sqrt_n, const char* name) {
    const double tol = 6 * rel_sd_per_sqrt_n / std::sqrt(static_cast<double>(t.numel()));
    EXPECT_NEAR(variance_of(t) / var, 1.0, tol) << name;
  };
  expect_variance(p.at(kInProj), 0.02 * 0.02, std::sqrt(2.0), "in_proj.weight");
  expect_variance(p.at(kOutProj), 0.02 * 0.02 / 2, std::sqrt(2.0), "out_proj.weight");
  expect_variance(p.at(kConvWeight), 1.0 / (3 * c.W()), std::sqrt(0.8), "conv1d.weight");
  for (std::int64_t i = 0; i < p.at(kConvWeight).numel(); ++i)
    ASSERT_LE(std::abs(p.at(kConvWeight).get(i)), 1.0 / std::sqrt(static_cast<double>(c.W())));
}

// docs/DESIGN.md §1.3 "Test-case parameters": each parameter Megatron sets to a constant, and the conv
// bias and A_log, in its drawn range (outside the band around 1, away from 0), the conv bias of both
// signs; the projections and conv1d.weight Megatron's bits.
TEST(LayerParams, CaseParamsDrawEveryParameterAwayFromZeroAndOne) {
  const LayerConfig c({.hidden_size = 64,
                       .linear_num_key_heads = 2,
                       .linear_num_value_heads = 8,
                       .linear_key_head_dim = 16,
                       .linear_value_head_dim = 16,
                       .conv_bias = true});
  const LayerParams p = case_params(c, 11), init = init_params(c, 11);
  validate_params(c, p);
  const auto in_bands = [](double m) { return (m >= 0.5 && m < 0.8) || (m >= 1.2 && m < 1.5); };
  for (const char* name : {kInProjNorm, kOutNorm, kDtBias}) {
    const Tensor& t = p.at(name);
    int below = 0;
    for (std::int64_t i = 0; i < t.numel(); ++i) {
      EXPECT_TRUE(in_bands(t.get(i))) << name << "[" << i << "] = " << t.get(i);
      below += t.get(i) < 1.0;
    }
    EXPECT_TRUE(below > 0 && below < t.numel()) << name << ": " << below << " of " << t.numel() << " below 1";
    expect_nontrivial(t, name);
  }
  const double bound = 1.0 / std::sqrt(static_cast<double>(c.W()));
  const Tensor& bias = p.at(kConvBias);
  int negative = 0;
  for (std::int64_t i = 0; i < bias.numel(); ++i) {
    const double m = std::abs(bias.get(i));
    EXPECT_TRUE(m >= 0.25 * bound && m < bound) << "conv1d.bias[" << i << "] = " << bias.get(i);
    negative += bias.get(i) < 0;
  }
  EXPECT_TRUE(negative > 0 && negative < bias.numel()) << negative << " negative conv biases";
  for (std::int64_t h = 0; h < c.Hv(); ++h) {
    const double A = std::exp(p.at(kALog).get(h));
    EXPECT_TRUE(A >= 2.0 - 1e-12 && A < 16.0) << "A = exp(A_log) = " << A;
  }
  expect_nontrivial(p.at(kALog), "A_log");
  for (const char* name : {kInProj, kConvWeight, kOutProj})
    EXPECT_TRUE(p.at(name).bitwise_equal(init.at(name))) << name;
  const LayerParams again = case_params(c, 11), other = case_params(c, 12);
  for (const auto& [name, t] : p) {
    EXPECT_TRUE(t.bitwise_equal(again.at(name))) << name;
    EXPECT_FALSE(t.bitwise_equal(other.at(name))) << name;
  }
}

TEST(LayerParams, SeededNormalIsAFunctionOfSeedNameAndIndex) {
  const Tensor big = seeded_normal(5, "hidden_states", {6, 1, 4}), small = seeded_normal(5, "hidden_states", {2, 1, 4});
  for (std::int64_t i = 0; i < small.numel(); ++i) ASSERT_EQ(small.get(i), big.get(i)) << i;
  EXPECT_NE(seeded_normal(5, "grad_output", {2, 1, 4}).get(0), small.get(0));
  expect_nontrivial(big, "hidden_states");
}

// ---- norms and gates: gradients against central differences ---------------------------------

// Gradient checks: relative error (whole tensor) < 1e-6. With h = 6e-6 and O(1) values, the
// central-difference error is ~h^2 + 1e-16/h ~ 1e-10, so 1e-6 leaves four orders for conditioning.
constexpr double kFdRelTol = 1e-6;

void expect_gradient(const Tensor& analytic, const Tensor& fd, const std::string& name) {
  expect_nontrivial(analytic, name);
  const auto d = diff(analytic, fd);
  EXPECT_LT(d.rel_rms, kFdRelTol) << name << " max abs " << d.max_abs;
}

TEST(Norms, RmsNormGradientsMatchFiniteDifferences) {
  Tensor x = seeded_normal(1, "x", {3, 5, 8}), w = seeded_normal(1, "w", {8}, 0.5);
  const Tensor dy = seeded_normal(1, "dy", {3, 5, 8});
  const double eps = 1e-3;  // large enough to matter in the gradient
  const auto loss = [&] { return dot(dy, rmsnorm_forward(x, w, eps).y); };
  const RmsNorm f = rmsnorm_forward(x, w, eps);
  const RmsNormGrads g = rmsnorm_backward(x, w, f.rstd, dy);
  expect_gradient(g.dx, fd_gradient(x, loss), "dx");
  expect_gradient(g.dw, fd_gradient(w, loss), "dw");
}

TEST(Norms, RmsNormGivesUnitRmsRows) {
  const Tensor x = seeded_normal(2, "x", {4, 16}, 3.0);
  Tensor ones(DType::F64, {16});
  std::fill_n(ones.data<double>(), 16, 1.0);
  const double eps = 1e-6;
  const RmsNorm f = rmsnorm_forward(x, ones, eps);
  for (std::int64_t r = 0; r < 4; ++r) {
    double ms_x = 0, ms_y = 0;
    for (std::int64_t i = 0; i < 16; ++i) {
      ms_x += x.get(r * 16 + i) * x.get(r * 16 + i) / 16;
      ms_y += f.y.get(r * 16 + i) * f.y.get(r * 16 + i) / 16;
    }
    EXPECT_NEAR(ms_y, ms_x / (ms_x + eps), 1e-14) << "row " << r;
  }
}

TEST(Norms, GatedRmsNormGradientsMatchFiniteDifferences) {
  Tensor o = seeded_normal(3, "o", {2, 3, 4, 5}), z = seeded_normal(3, "z", {2, 3, 20}, 2.0),
         w = seeded_normal(3, "w", {5});
  const Tensor dy = seeded_normal(3, "dy", {2, 3, 4, 5});
  const double eps = 1e-3;
  const auto loss = [&] { return dot(dy, gated_rmsnorm_forward(o, z, w, eps).y); };
  const GatedNorm f = gated_rmsnorm_forward(o, z, w, eps);
  const GatedNormGrads g = gated_rmsnorm_backward(o, z, w, f.rstd, dy);
  expect_gradient(g.d_o, fd_gradient(o, loss), "d_o");
  expect_gradient(g.dz, fd_gradient(z, loss), "dz");
  expect_gradient(g.dw, fd_gradient(w, loss), "dw");
}

// The rows (and dw's columns) split between threads: the same bits for every count, dw the sum of the
// rows' terms in row order.
TEST(Norms, BothNormsGiveTheSameBitsOnAnyThreadCount) {
  const Tensor x = seeded_normal(5, "x", {37, 24}), w = seeded_normal(5, "w", {24}, 0.5);
  const Tensor dy = seeded_normal(5, "dy", {37, 24}), z = seeded_normal(5, "z", {37, 24});
  const RmsNorm f1 = rmsnorm_forward(x, w, 1e-3);
  const RmsNormGrads g1 = rmsnorm_backward(x, w, f1.rstd, dy);
  const GatedNorm n1 = gated_rmsnorm_forward(x, z, w, 1e-3);
  Tensor terms;
  const GatedNormGrads d1 = gated_rmsnorm_backward(x, z, w, n1.rstd, dy, &terms);
  Tensor dw_in_order(DType::F64, {24});
  for (std::int64_t r = 0; r < 37; ++r)
    for (std::int64_t i = 0; i < 24; ++i) dw_in_order.set(i, dw_in_order.get(i) + terms.get(r * 24 + i));
  EXPECT_TRUE(d1.dw.bitwise_equal(dw_in_order));
  for (const int threads : {2, 3, 0}) {
    const RmsNorm f = rmsnorm_forward(x, w, 1e-3, threads);
    const RmsNormGrads g = rmsnorm_backward(x, w, f.rstd, dy, threads);
    const GatedNorm n = gated_rmsnorm_forward(x, z, w, 1e-3, threads);
    Tensor t;
    const GatedNormGrads d = gated_rmsnorm_backward(x, z, w, n.rstd, dy, &t, threads);
    EXPECT_TRUE(f.y.bitwise_equal(f1.y) && f.rstd.bitwise_equal(f1.rstd)) << threads << " threads";
    EXPECT_TRUE(g.dx.bitwise_equal(g1.dx) && g.dw.bitwise_equal(g1.dw)) << threads << " threads";
    EXPECT_TRUE(n.y.bitwise_equal(n1.y) && n.rstd.bitwise_equal(n1.rstd)) << threads << " threads";
    EXPECT_TRUE(d.d_o.bitwise_equal(d1.d_o) && d.dz.bitwise_equal(d1.dz) && d.dw.bitwise_equal(d1.dw) &&
                t.bitwise_equal(terms))
        << threads << " threads";
  }
}

TEST(Norms, RowsOfAnRmsNormAreTheWholeNormsRows) {
  const Tensor x = seeded_normal(6, "x", {10, 8}), w = seeded_normal(6, "w", {8});
  const RmsNorm whole = rmsnorm_forward(x, w, 1e-6);
  const RmsNorm rows = rmsnorm_forward_rows(x, 3, 5, w, 1e-6, 2);
  ASSERT_EQ(rows.y.shape(), (Shape{5, 8}));
  for (std::int64_t i = 0; i < 5 * 8; ++i) EXPECT_EQ(rows.y.get(i), whole.y.get(3 * 8 + i)) << i;
  for (std::int64_t r = 0; r < 5; ++r) EXPECT_EQ(rows.rstd.get(r), whole.rstd.get(3 + r)) << r;
  EXPECT_THROW(rmsnorm_forward_rows(x, 6, 5, w, 1e-6), Error);
}

TEST(Gates, FollowTheDefinition) {
  // A_log = log 3 and a = -dt_bias: g = -3 softplus(0) = -3 log 2; b = 0: beta = 1/2.
  const Tensor A_log = Tensor::from(std::vector<double>{std::log(3.0)}, {1});
  const Tensor dt_bias = Tensor::from(std::vector<double>{0.25}, {1});
  const Gates f = gates_forward(Tensor::from(std::vector<double>{-0.25}, {1, 1}),
                                Tensor::from(std::vector<double>{0.0}, {1, 1}), A_log, dt_bias);
  EXPECT_NEAR(f.g.get(0), -3 * std::log(2.0), 1e-15);
  EXPECT_EQ(f.beta.get(0), 0.5);
  EXPECT_EQ(softplus(800.0), 800.0);  // no overflow
  EXPECT_EQ(softplus(-800.0), 0.0);
}

TEST(Gates, GradientsMatchFiniteDifferences) {
  Tensor a = seeded_normal(4, "a", {2, 5, 3}, 2.0), b = seeded_normal(4, "b", {2, 5, 3}, 2.0),
         A_log = seeded_normal(4, "A_log", {3}, 0.5), dt_bias = seeded_normal(4, "dt_bias", {3});
  const Tensor wg = seeded_normal(4, "wg", {2, 5, 3}), wb = seeded_normal(4, "wb", {2, 5, 3});
  const auto loss = [&] {
    const Gates f = gates_forward(a, b, A_log, dt_bias);
    return dot(wg, f.g) + dot(wb, f.beta);
  };
  const GateGrads g = gates_backward(a, b, A_log, dt_bias, wg, wb);
  expect_gradient(g.da, fd_gradient(a, loss), "da");
  expect_gradient(g.db, fd_gradient(b, loss), "db");
  expect_gradient(g.dA_log, fd_gradient(A_log, loss), "dA_log");
  expect_gradient(g.ddt_bias, fd_gradient(dt_bias, loss), "ddt_bias");
}

// ---- parallel_for ----------------------------------------------------------------------------

TEST(ParallelFor, RunsEveryIndexExactlyOnce) {
  for (int threads : {0, 1, 3}) {
    std::vector<std::atomic<int>> hits(37);
    parallel_for(37, threads, [&](std::int64_t i) { ++hits[static_cast<std::size_t>(i)]; });
    for (std::size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i].load(), 1) << i << ", threads " << threads;
  }
}

TEST(ParallelFor, RethrowsATaskException) {
  EXPECT_EQ(error_of([] {
              parallel_for(8, 2, [](std::int64_t i) {
                if (i == 5) throw ConfigError("task 5 failed");
              });
            }),
            "task 5 failed");
}

// ---- tensor-parallel sharding ---------------------------------------------------------------

TEST(TpSharding, ShardThenUnshardIsIdentity) {
  const LayerConfig c(small_values());
  const LayerParams p = case_params(c, 5);
  for (std::int64_t t : {1, 2, 4}) {
    std::vector<LayerParams> shards;
    for (std::int64_t r = 0; r < t; ++r) shards.push_back(tp_shard(c, p, t, r));
    const LayerParams back = tp_unshard(c, shards);
    for (const auto& [name, full] : p) EXPECT_TRUE(back.at(name).bitwise_equal(full)) << name << " t=" << t;
  }
}

TEST(TpSharding, ShardHoldsItsOwnHeads) {
  const LayerConfig c(small_values());
  const LayerParams p = case_params(c, 5);
  const std::int64_t t = 4, r = 2, hv_local = c.Hv() / t, hk_local = c.Hk() / t, H = c.hidden();
  const LayerParams s = tp_shard(c, p, t, r);
  for (std::int64_t j = 0; j < hv_local; ++j) {
    EXPECT_EQ(s.at(kALog).get(j), p.at(kALog).get(r * hv_local + j));
    EXPECT_EQ(s.at(kDtBias).get(j), p.at(kDtBias).get(r * hv_local + j));
    // z row of local value head j, element d: full row conv_dim + global head * dv + d.
    for (std::int64_t d = 0; d < c.dv(); ++d) {
      const std::int64_t local_row = 2 * hk_local * c.dk() + hv_local * c.dv() + j * c.dv() + d;
      const std::int64_t full_row = c.conv_dim() + (r * hv_local + j) * c.dv() + d;
      EXPECT_EQ(s.at(kInProj).get(local_row * H), p.at(kInProj).get(full_row * H));
      // out_proj column of the same head and element, in every output row.
      for (std::int64_t o = 0; o < H; ++o)
        EXPECT_EQ(s.at(kOutProj).get(o * hv_local * c.dv() + j * c.dv() + d),
                  p.at(kOutProj).get(o * c.v_dim() + full_row - c.conv_dim()));
    }
  }
  // k channel of local key head 0, tap 3.
  const std::int64_t local_k = hk_local * c.dk(), full_k = c.qk_dim() + r * hk_local * c.dk();
  EXPECT_EQ(s.at(kConvWeight).get(local_k * c.W() + 3), p.at(kConvWeight).get(full_k * c.W() + 3));
  EXPECT_EQ(s.at(kConvBias).get(local_k), p.at(kConvBias).get(full_k));
  EXPECT_TRUE(s.at(kOutNorm).bitwise_equal(p.at(kOutNorm)));
}

TEST(TpSharding, RejectsSizesThatSplitAHeadAndRanksOutOfRange) {
  const LayerConfig c(small_values());
  const LayerParams p = case_params(c, 5);
  EXPECT_EQ(error_of([&] { tp_shard(c, p, 3, 0); }),
            "tensor parallel size 3 does not divide linear_num_key_heads = 4 and linear_num_value_heads = 8; "
            "TP shards whole heads, so choose a TP size dividing both");
  EXPECT_EQ(error_of([&] { tp_shard(c, p, 2, 2); }), "tensor parallel rank 2 is outside [0, 2)");
  EXPECT_EQ(error_of([&] { tp_shard(c, p, 0, 0); }), "tensor parallel size 0 must be at least 1");
}

TEST(TpSharding, UnshardRejectsDivergentReplicas) {
  const LayerConfig c(small_values());
  const LayerParams p = case_params(c, 5);
  std::vector<LayerParams> shards = {tp_shard(c, p, 2, 0), tp_shard(c, p, 2, 1)};
  shards[1][kOutNorm].set(0, 2.0);
  EXPECT_EQ(error_of([&] { tp_unshard(c, shards); }),
            "replicated parameter 'out_norm.weight' differs between TP rank 0 and rank 1; every rank must hold the "
            "same copy");
}

TEST(TpSharding, ReduceGradsSumsReplicatedAndAssemblesSharded) {
  const LayerConfig c(small_values());
  std::vector<LayerParams> grads;
  for (std::int64_t r = 0; r < 2; ++r) grads.push_back(tp_shard(c, case_params(c, 20 + r), 2, r));
  for (std::int64_t r = 0; r < 2; ++r)  // make the replicated gradients differ per rank
    grads[r][kInProjNorm] = seeded_normal(30 + r, kInProjNorm, {c.hidden()});
  const LayerParams full = tp_reduce_grads(c, grads);
  for (std::int64_t i = 0; i < c.hidden(); ++i)
    EXPECT_EQ(full.at(kInProjNorm).get(i), grads[0][kInProjNorm].get(i) + grads[1][kInProjNorm].get(i));
  for (std::int64_t r = 0; r < 2; ++r)
    EXPECT_TRUE(tp_shard(c, full, 2, r).at(kInProj).bitwise_equal(grads[r][kInProj])) << "rank " << r;
}

}  // namespace
}  // namespace gdnv::ref
