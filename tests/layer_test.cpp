// The GatedDeltaNet layer oracle (docs/DESIGN.md §1.3): gradients against finite differences, THD vs SBHD,
// packed sequences vs each alone (and no leakage between them), chunked vs recurrent core, TP shards
// vs the unsharded layer, input errors.
#include <cmath>

#include <gtest/gtest.h>

#include "layer_testing.hpp"
#include "reference/layer.hpp"
#include "reference/tp_sharding.hpp"

namespace gdnv::ref {
namespace {

using testing::diff;
using testing::dot;
using testing::error_of;
using testing::expect_nontrivial;
using testing::fd_gradient;

// GVA (Hv/Hk = 2), dk != dv, conv width 4.
LayerConfig small_config(bool conv_bias) {
  return LayerConfig({.hidden_size = 8,
                      .linear_num_key_heads = 2,
                      .linear_num_value_heads = 4,
                      .linear_key_head_dim = 4,
                      .linear_value_head_dim = 3,
                      .linear_conv_kernel_dim = 4,
                      .layernorm_epsilon = 1e-6,
                      .conv_bias = conv_bias});
}

// Megatron's init plus noise of std 0.2 on every parameter: the RMSNorm weights and dt_bias stop
// being exactly 1 (where a backward that forgets them would still pass) and the projections carry
// O(0.5) values, so every stage is exercised away from its linear regime.
LayerParams test_params(const LayerConfig& config, std::uint64_t seed) {
  LayerParams p = init_params(config, seed);
  for (auto& [name, t] : p) {
    const Tensor noise = seeded_normal(seed, "noise:" + name, t.shape(), 0.2);
    for (std::int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] += noise.get(i);
  }
  return p;
}

// Several packed sequences: one shorter than the conv width, one of length 1, two spanning several
// chunks of 4 with a remainder.
const std::vector<std::int64_t> kPacked = {0, 3, 4, 13, 22};
constexpr int kChunk = 4;

double max_abs_of(const Tensor& t) {
  double m = 0;
  for (std::int64_t i = 0; i < t.numel(); ++i) m = std::max(m, std::abs(t.get(i)));
  return m;
}

// Rows [begin, end) of the leading dimension of t [S, B, F].
Tensor rows(const Tensor& t, std::int64_t begin, std::int64_t end) {
  const std::int64_t per_row = t.numel() / t.dim(0);
  Tensor out(DType::F64, {end - begin, t.dim(1), t.dim(2)});
  std::copy_n(t.data<double>() + begin * per_row, (end - begin) * per_row, out.data<double>());
  return out;
}

// One forward and backward.
struct LayerRun {
  LayerForward fwd;
  LayerGrads grads;
};
LayerRun run_layer(const LayerConfig& config, const LayerParams& params, const Tensor& hidden, const Tensor& dout,
                   const CuSeqlens& cu_seqlens, const LayerOptions& options = {CoreForm::Chunked, kChunk}) {
  LayerForward fwd = layer_forward(config, params, hidden, cu_seqlens, options);
  LayerGrads grads = layer_backward(config, params, fwd, dout);
  return {std::move(fwd), std::move(grads)};
}

// out, grad_hidden and every parameter gradient bit-identical.
void expect_bitwise_equal(const LayerRun& a, const LayerRun& b, const std::string& what) {
  expect_nontrivial(b.fwd.out, "out");
  EXPECT_TRUE(a.fwd.out.bitwise_equal(b.fwd.out)) << what << ": out";
  EXPECT_TRUE(a.grads.grad_hidden.bitwise_equal(b.grads.grad_hidden)) << what << ": grad_hidden";
  for (const auto& [name, g] : b.grads.params)
    EXPECT_TRUE(a.grads.params.at(name).bitwise_equal(g)) << what << ": grad::" << name;
}

// ---- gradients against central differences -----------------------------------------------------

// Relative error (whole tensor) < 1e-6, docs/DESIGN.md §4's bound. With h = 6e-6 the central difference is
// off by ~h^2 |f'''| + 1e-16 |L| / h ~ 1e-10 relative for this O(1) layer; 1e-6 is the margin for
// the conditioning of the chain (L2 norm, gates, RMSNorms).
constexpr double kFdRelTol = 1e-6;

void check_all_gradients(const LayerConfig& config, LayerParams params, Tensor hidden, const CuSeqlens& cu_seqlens) {
  const LayerOptions options{CoreForm::Chunked, kChunk};
  const Tensor grad_output = seeded_normal(9, "grad_output", hidden.shape());
  const LayerForward fwd = layer_forward(config, params, hidden, cu_seqlens, options);
  const LayerGrads grads = layer_backward(config, params, fwd, grad_output);
  expect_nontrivial(fwd.out, "out");
  const auto loss = [&] { return dot(grad_output, layer_forward(config, params, hidden, cu_seqlens, options).out); };
  const auto check = [&](const Tensor& analytic, Tensor& x, const std::string& name) {
    expect_nontrivial(analytic, name);
    const auto d = diff(analytic, fd_gradient(x, loss));
    EXPECT_LT(d.rel_rms, kFdRelTol) << name << ": max abs " << d.max_abs;
  };
  check(grads.grad_hidden, hidden, "grad_hidden");
  ASSERT_EQ(grads.params.size(), params.size());
  for (auto& [name, p] : params) check(grads.params.at(name), p, "grad::" + name);
}

TEST(LayerGradients, MatchFiniteDifferencesThdPackedWithGva) {
  const LayerConfig config = small_config(true);
  check_all_gradients(config, test_params(config, 1), seeded_normal(1, "hidden_states", {22, 1, 8}), kPacked);
}

TEST(LayerGradients, MatchFiniteDifferencesSbhd) {
  const LayerConfig config = small_config(false);
  check_all_gradients(config, test_params(config, 2), seeded_normal(2, "hidden_states", {9, 2, 8}), std::nullopt);
}

// ---- layouts and packing ---------------------------------------------------------------------------

TEST(Layer, ThdWithOneSequenceEqualsSbhdWithBatchOne) {
  const LayerConfig config = small_config(true);
  const LayerParams params = test_params(config, 3);
  const Tensor hidden = seeded_normal(3, "hidden_states", {11, 1, 8}), dout = seeded_normal(3, "dout", {11, 1, 8});
  expect_bitwise_equal(run_layer(config, params, hidden, dout, std::vector<std::int64_t>{0, 11}),
                       run_layer(config, params, hidden, dout, std::nullopt), "THD vs SBHD");
}

TEST(Layer, PackedThdEqualsEachSequenceAlone) {
  const LayerConfig config = small_config(true);
  const LayerParams params = test_params(config, 4);
  const Tensor hidden = seeded_normal(4, "hidden_states", {22, 1, 8}), dout = seeded_normal(4, "dout", {22, 1, 8});
  const LayerRun packed = run_layer(config, params, hidden, dout, kPacked);
  LayerParams g_sum;
  for (std::size_t i = 0; i + 1 < kPacked.size(); ++i) {
    const std::int64_t b = kPacked[i], e = kPacked[i + 1];
    const LayerRun alone = run_layer(config, params, rows(hidden, b, e), rows(dout, b, e), std::nullopt);
    // Same operations per token; only the GEMM blocking of a shorter T may reassociate dot
    // products of length <= 48 (in_proj rows): <= 48 * 2^-53 ~ 5e-15 relative per stage.
    EXPECT_LT(diff(rows(packed.fwd.out, b, e), alone.fwd.out).rel_rms, 1e-13) << "sequence " << i;
    EXPECT_LT(diff(rows(packed.grads.grad_hidden, b, e), alone.grads.grad_hidden).rel_rms, 1e-13) << "sequence " << i;
    for (const auto& [name, t] : alone.grads.params) {
      if (!g_sum.count(name)) g_sum[name] = Tensor(DType::F64, t.shape());
      for (std::int64_t j = 0; j < t.numel(); ++j) g_sum[name].data<double>()[j] += t.get(j);
    }
  }
  // Parameter gradients of the packed batch are the sums over its sequences.
  for (const auto& [name, t] : packed.grads.params) {
    expect_nontrivial(t, name);
    EXPECT_LT(diff(g_sum.at(name), t).rel_rms, 1e-13) << name;
  }
}

TEST(Layer, PerturbingOnePackedSequenceChangesNoOtherExactly) {
  const LayerConfig config = small_config(true);
  const LayerParams params = test_params(config, 5);
  const Tensor hidden = seeded_normal(5, "hidden_states", {22, 1, 8}), dout = seeded_normal(5, "dout", {22, 1, 8});
  const LayerRun base = run_layer(config, params, hidden, dout, kPacked);
  for (std::size_t i = 0; i + 1 < kPacked.size(); ++i) {
    Tensor h = hidden, d = dout;
    for (std::int64_t t = kPacked[i]; t < kPacked[i + 1]; ++t)
      for (std::int64_t c = 0; c < 8; ++c) {
        h.data<double>()[t * 8 + c] += 0.5;
        d.data<double>()[t * 8 + c] -= 0.5;
      }
    const LayerRun perturbed = run_layer(config, params, h, d, kPacked);
    for (std::size_t j = 0; j + 1 < kPacked.size(); ++j) {
      const std::int64_t b = kPacked[j], e = kPacked[j + 1];
      const bool same_out = rows(perturbed.fwd.out, b, e).bitwise_equal(rows(base.fwd.out, b, e));
      const bool same_grad = rows(perturbed.grads.grad_hidden, b, e).bitwise_equal(rows(base.grads.grad_hidden, b, e));
      EXPECT_EQ(same_out, i != j) << "perturbed sequence " << i << ", out of sequence " << j;
      EXPECT_EQ(same_grad, i != j) << "perturbed sequence " << i << ", grad_hidden of sequence " << j;
    }
  }
}

TEST(Layer, ZeroLengthPlaceholderSequencesChangeNothing) {
  const LayerConfig config = small_config(false);
  const LayerParams params = test_params(config, 6);
  const Tensor hidden = seeded_normal(6, "hidden_states", {22, 1, 8});
  const LayerOptions options{CoreForm::Chunked, kChunk};
  const Tensor out = layer_forward(config, params, hidden, kPacked, options).out;
  const std::vector<std::int64_t> with_placeholders = {0, 3, 3, 4, 13, 22, 22};
  EXPECT_TRUE(layer_forward(config, params, hidden, with_placeholders, options).out.bitwise_equal(out));
}

// ---- chunked core == recurrent core ------------------------------------------------------------

// docs/DESIGN.md §1.1's bound: the two core forms agree to ~1e-13 (different association of the same sums
// over <= 22 tokens); every other stage runs the same operations, so the layer inherits that bound
// times the O(1) conditioning of the gated norm and out_proj. Measured relative to max |ref|.
constexpr double kFormTol = 1e-12;

void expect_forms_agree(const Tensor& chunked, const Tensor& recurrent, const std::string& what) {
  expect_nontrivial(recurrent, what);
  EXPECT_LE(diff(chunked, recurrent).max_abs, kFormTol * max_abs_of(recurrent)) << what;
}

TEST(Layer, ChunkedCoreEqualsRecurrentCore) {
  const LayerConfig config = small_config(true);
  const LayerParams params = test_params(config, 7);
  struct Case {
    Shape shape;
    CuSeqlens cu;
  };
  // Lengths around the chunk size (C-1, C, C+1, 3C+2), SBHD with B=2, and the packed case.
  const std::vector<Case> cases = {{{kChunk - 1, 2, 8}, std::nullopt},
                                   {{kChunk, 2, 8}, std::nullopt},
                                   {{kChunk + 1, 2, 8}, std::nullopt},
                                   {{3 * kChunk + 2, 1, 8}, std::nullopt},
                                   {{22, 1, 8}, kPacked}};
  for (const auto& c : cases) {
    const std::string what = "shape " + shape_str(c.shape) + (c.cu ? " packed" : "");
    const Tensor hidden = seeded_normal(7, "hidden_states", c.shape), dout = seeded_normal(7, "dout", c.shape);
    const LayerRun chunked = run_layer(config, params, hidden, dout, c.cu, {CoreForm::Chunked, kChunk});
    const LayerRun recurrent = run_layer(config, params, hidden, dout, c.cu, {CoreForm::Recurrent, kChunk});
    expect_forms_agree(chunked.fwd.out, recurrent.fwd.out, what + " out");
    expect_forms_agree(chunked.grads.grad_hidden, recurrent.grads.grad_hidden, what + " grad_hidden");
    for (const auto& [name, g] : recurrent.grads.params)
      expect_forms_agree(chunked.grads.params.at(name), g, what + " grad::" + name);
  }
}

// ---- threads -------------------------------------------------------------------------------------

TEST(Layer, ResultsAreBitIdenticalForAnyThreadCount) {
  const LayerConfig config = small_config(true);
  const LayerParams params = test_params(config, 10);
  // 600 tokens: five of the GEMM's 144-row blocks; two key heads, split across threads by the core.
  const Tensor hidden = seeded_normal(10, "hidden_states", {300, 2, 8}), dout = seeded_normal(10, "dout", {300, 2, 8});
  const LayerRun one = run_layer(config, params, hidden, dout, std::nullopt, {CoreForm::Chunked, 64, 1});
  for (int threads : {2, 3})
    expect_bitwise_equal(run_layer(config, params, hidden, dout, std::nullopt, {CoreForm::Chunked, 64, threads}), one,
                         std::to_string(threads) + " threads");
}

// ---- memory ------------------------------------------------------------------------------------

// The freeing backward (what `gdn-verify reference` runs) computes the same bits, with and without
// stages, while it releases the mixer's activations and grad_output.
TEST(Layer, FreeingBackwardGivesTheSameBitsAndUsesUpTheMixer) {
  const LayerConfig config = small_config(true);
  const LayerParams params = test_params(config, 11);
  const Tensor hidden = seeded_normal(11, "hidden_states", {22, 1, 8}), dout = seeded_normal(11, "dout", {22, 1, 8});
  const LayerRun kept = run_layer(config, params, hidden, dout, kPacked);
  StageTensors kept_stages;
  layer_backward(config, params, kept.fwd, dout, &kept_stages);
  for (const bool with_stages : {false, true}) {
    LayerForward fwd = layer_forward(config, params, hidden, kPacked, {CoreForm::Chunked, kChunk});
    Tensor grad_output = dout;
    StageTensors stages;
    LayerGrads grads = layer_backward_freeing(config, params, fwd, grad_output, with_stages ? &stages : nullptr);
    EXPECT_EQ(grad_output.numel(), 0);
    EXPECT_EQ(fwd.mixer.o.numel(), 0);
    EXPECT_EQ(fwd.mixer.conv_in.x.numel(), 0);
    expect_bitwise_equal({std::move(fwd), std::move(grads)}, kept, with_stages ? "with stages" : "without stages");
    for (const auto& [name, t] : stages) EXPECT_TRUE(t.bitwise_equal(kept_stages.at(name))) << name;
    EXPECT_EQ(stages.size(), with_stages ? kept_stages.size() : 0);
  }
}

// The grouped run (what `gdn-verify reference` runs without stages) computes the whole layer's bits
// for any number of GVA groups: out's chains continue over the groups' columns of W_out, dP W_in runs
// once, and out_norm.weight's gradient sums over (token, head) in the layer's order. THD packed with
// conv bias and SBHD with batch 2, chunked and recurrent cores.
TEST(Layer, GroupedRunGivesTheWholeLayersBits) {
  const LayerConfig config = small_config(true);
  const LayerParams params = test_params(config, 12);
  struct Input {
    Shape shape;
    CuSeqlens cu;
  };
  // 2100 x 2 tokens: the end's blocks of 2048 rows (dP read back from the scratch file) two and a part.
  for (const Input& in :
       {Input{{22, 1, 8}, kPacked}, Input{{11, 2, 8}, std::nullopt}, Input{{2100, 2, 8}, std::nullopt}})
    for (const CoreForm form : {CoreForm::Chunked, CoreForm::Recurrent}) {
      const Tensor hidden = seeded_normal(12, "hidden_states", in.shape), dout = seeded_normal(12, "dout", in.shape);
      const LayerRun whole = run_layer(config, params, hidden, dout, in.cu, {form, kChunk});
      for (const std::int64_t groups : {1, 2}) {
        GroupedRun run = layer_run_grouped(config, params, hidden, dout, in.cu, {form, kChunk}, groups);
        LayerForward fwd;
        fwd.out = std::move(run.out);
        expect_bitwise_equal({std::move(fwd), std::move(run.grads)}, whole,
                             shape_str(in.shape) + ", " + std::to_string(groups) + " groups");
      }
    }
}

TEST(Layer, GroupedRunRefusesAnEmptyRowBlock) {
  const LayerConfig config = small_config(true);
  const LayerParams params = test_params(config, 12);
  const Tensor hidden = seeded_normal(12, "hidden_states", {11, 2, 8});
  try {
    layer_run_grouped(config, params, hidden, hidden, std::nullopt, {}, 2, 0);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "layer_run_grouped: row_block must be at least 1, got 0");
  }
}

// ---- tensor parallelism ------------------------------------------------------------------------

TEST(Layer, TensorParallelShardsSumToTheUnshardedLayer) {
  const LayerConfig config = small_config(true);
  const LayerParams params = test_params(config, 8);
  const Tensor hidden = seeded_normal(8, "hidden_states", {22, 1, 8}), dout = seeded_normal(8, "dout", {22, 1, 8});
  const LayerRun full = run_layer(config, params, hidden, dout, kPacked);
  for (std::int64_t t : {1, 2}) {
    const LayerConfig local = tp_local_config(config, t);
    std::vector<Tensor> outs, grad_hiddens;
    std::vector<LayerParams> grads;
    for (std::int64_t r = 0; r < t; ++r) {
      LayerRun rank = run_layer(local, tp_shard(config, params, t, r), hidden, dout, kPacked);
      outs.push_back(rank.fwd.out);
      grad_hiddens.push_back(rank.grads.grad_hidden);
      grads.push_back(std::move(rank.grads.params));
    }
    // The TP sums split out_proj's and in_proj's dot products of length Hv*dv = 12 into t partial
    // sums: the same terms reassociated, <= 12 * 2^-53 ~ 1.3e-15 relative.
    const std::string tp = "TP=" + std::to_string(t);
    EXPECT_LT(diff(tp_sum(outs), full.fwd.out).rel_rms, 1e-14) << tp;
    EXPECT_LT(diff(tp_sum(grad_hiddens), full.grads.grad_hidden).rel_rms, 1e-14) << tp;
    const LayerParams reduced = tp_reduce_grads(config, grads);
    for (const auto& [name, g] : full.grads.params)
      EXPECT_LT(diff(reduced.at(name), g).rel_rms, 1e-14) << tp << " " << name;
  }
}

// ---- input errors ------------------------------------------------------------------------------

TEST(Layer, RejectsInputsThatDoNotFitTheConfig) {
  const LayerConfig config = small_config(false);
  const LayerParams params = test_params(config, 9);
  const auto error_for = [&](Shape shape, CuSeqlens cu) {
    return error_of([&] { layer_forward(config, params, seeded_normal(1, "h", shape), cu); });
  };
  EXPECT_EQ(error_for({5, 1, 7}, std::nullopt),
            "hidden_states has shape [5, 1, 7]; expected [S, B, 8] (SBHD) or [T, 1, 8] with cu_seqlens (THD), the "
            "last dimension being hidden_size");
  EXPECT_EQ(error_for({5, 2, 8}, std::vector<std::int64_t>{0, 5}),
            "hidden_states [5, 2, 8] has batch 2 with cu_seqlens; THD input is [T, 1, hidden] with the sequences "
            "packed along T");
  EXPECT_EQ(error_for({5, 1, 8}, std::vector<std::int64_t>{0, 4}),
            "cu_seqlens ends at 4 but the packed length T is 5; the last offset must equal T");
  LayerParams missing = params;
  missing.erase(kDtBias);
  EXPECT_EQ(error_of([&] {
              layer_forward(config, missing, seeded_normal(1, "h", {5, 1, 8}), std::nullopt);
            }),
            "parameter 'dt_bias' [4] is missing");
  const LayerForward f = layer_forward(config, params, seeded_normal(1, "h", {5, 1, 8}), std::nullopt);
  EXPECT_EQ(error_of([&] {
              layer_backward(config, params, f, seeded_normal(1, "d", {5, 2, 8}));
            }),
            "grad_output is F64 [5, 2, 8]; expected F64 [5, 1, 8], the shape of out");
}

}  // namespace
}  // namespace gdnv::ref
