#pragma once
// The test suite of a gpu/ kernel backend (the host emulation or CUDA), included by each test
// executable with its own factory: every leaf op against the fp64 oracle on the same stored inputs
// (the harness of tests/cpu_backend_testing.hpp, whose tolerances carry their derivations), the data
// movement exactly, the chunked core against the CPU backend, and the three CP modes end to end
// through the unchanged mode code. The includer defines
//   std::unique_ptr<cp::Backend> suite_backend(DType storage);
//   std::string suite_skip_reason();  // "" to run; else every test skips with it
#include <iostream>
#include <memory>
#include <string>
#include <tuple>

#include <gtest/gtest.h>

#include "core/half.hpp"
#include "cp/cpu_backend.hpp"
#include "cp/faults.hpp"
#include "cp/harness.hpp"
#include "core/metrics.hpp"
#include "reference/gates.hpp"
#include "reference/norms.hpp"
#include "tests/cpu_backend_testing.hpp"

namespace gdnv::cp {

std::unique_ptr<Backend> suite_backend(DType storage);
std::string suite_skip_reason();

namespace suite {

using gdnv::testing::matches;
using gdnv::testing::random_normal;
using gdnv::testing::stored;
using gdnv::testing::Tolerance;

inline std::string storage_name(DType d) { return d == DType::F32 ? "fp32" : "bf16"; }

// 1 + scale * N(0, 1): a norm weight.
inline Tensor around_one(std::int64_t n, std::uint64_t seed, const std::string& stream, double scale = 0.3) {
  Tensor w = random_normal({n}, seed, stream, scale);
  for (std::int64_t i = 0; i < n; ++i) w.set(i, 1 + w.get(i));
  return w;
}

inline Buffer index_buffer(Backend& be, const std::vector<std::int64_t>& idx) {
  return be.upload(Tensor::from(idx, {static_cast<std::int64_t>(idx.size())}), DType::I64);
}

// Logs every comparison (name, relative RMS, max abs) and fails on any miss.
inline void expect_all(const gdnv::testing::Results& results) {
  for (const auto& r : results) {
    std::cout << "  " << r.message() << "\n";
    EXPECT_TRUE(r);
  }
}

#define GDNV_SUITE_SKIP_WITHOUT_BACKEND()                                       \
  if (const std::string reason = suite_skip_reason(); !reason.empty()) {       \
    GTEST_SKIP() << reason;                                                    \
  }

class SuiteData : public ::testing::Test {
 protected:
  void SetUp() override { GDNV_SUITE_SKIP_WITHOUT_BACKEND(); }
};

TEST_F(SuiteData, UploadDownloadAndAllocKeepTheBytes) {
  const auto be = suite_backend(DType::F32);
  const Tensor t = random_normal({4, 7}, 5, "upload");
  for (const DType d : {DType::F64, DType::F32, DType::BF16})
    EXPECT_TRUE(be->download(be->upload(t, d)).bitwise_equal(t.to(d)));
  EXPECT_TRUE(be->download(be->alloc(DType::BF16, {3, 5})).bitwise_equal(Tensor(DType::BF16, {3, 5})));
}

TEST_F(SuiteData, GatherAndScatterRowsAndColumnsMoveExactBytes) {
  const auto be = suite_backend(DType::BF16);
  const Tensor x = random_normal({5, 2, 3}, 7, "rows").to(DType::BF16);
  const std::vector<std::int64_t> perm{3, 0, 4, 1, 2};
  const Tensor got = be->download(be->gather_rows(be->upload(x, DType::BF16), index_buffer(*be, perm)));
  ASSERT_EQ(got.shape(), (Shape{5, 2, 3}));
  for (std::int64_t i = 0; i < 5; ++i)
    for (std::int64_t j = 0; j < 6; ++j) EXPECT_EQ(got.get(i * 6 + j), x.get(perm[i] * 6 + j));
  Buffer back = be->alloc(DType::BF16, {5, 2, 3});
  be->scatter_rows(be->upload(got, DType::BF16), index_buffer(*be, perm), back);
  EXPECT_TRUE(be->download(back).bitwise_equal(x));

  const Tensor y = random_normal({3, 6}, 8, "cols");
  const std::vector<std::int64_t> cols{5, 1, 2};
  const Tensor picked = be->download(be->gather_columns(be->upload(y, DType::F64), index_buffer(*be, cols)));
  for (std::int64_t r = 0; r < 3; ++r)
    for (std::int64_t j = 0; j < 3; ++j) EXPECT_EQ(picked.get(r * 3 + j), y.get(r * 6 + cols[j]));
  Buffer out = be->alloc(DType::F64, {3, 6});
  be->scatter_columns(be->upload(picked, DType::F64), index_buffer(*be, cols), out);
  const Tensor spread = be->download(out);
  for (std::int64_t r = 0; r < 3; ++r)
    for (std::int64_t c = 0; c < 6; ++c)
      EXPECT_EQ(spread.get(r * 6 + c), (c == 5 || c == 1 || c == 2) ? y.get(r * 6 + c) : 0.0) << r << "," << c;
}

TEST_F(SuiteData, AnIndexOutOfRangeIsAnErrorNamingTheRange) {
  const auto be = suite_backend(DType::F32);
  try {
    be->gather_rows(be->alloc(DType::F32, {5, 2}), index_buffer(*be, {0, 5}));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "gather_rows: an index is outside [0, 5)");
  }
}

TEST_F(SuiteData, AccumulateAddsElementwiseRoundingOnceToTheTargetDtype) {
  const auto be = suite_backend(DType::BF16);
  const Tensor y = random_normal({4, 3}, 9, "y").to(DType::BF16), x = random_normal({4, 3}, 9, "x").to(DType::BF16);
  Buffer yb = be->upload(y, DType::BF16);
  be->accumulate(yb, be->upload(x, DType::BF16));
  const Tensor sum = be->download(yb);
  for (std::int64_t i = 0; i < 12; ++i)
    EXPECT_EQ(sum.get(i), round_bf16(static_cast<float>(y.get(i)) + static_cast<float>(x.get(i))));
  const Tensor y32 = random_normal({5}, 9, "y32"), x64 = random_normal({5}, 9, "x64");
  Buffer acc = be->upload(y32, DType::F32);
  be->accumulate(acc, be->upload(x64, DType::F64));
  for (std::int64_t i = 0; i < 5; ++i)
    EXPECT_EQ(be->download(acc).get(i), static_cast<float>(y32.to(DType::F32).get(i)) + static_cast<float>(x64.get(i)));
}

// ---- leaf ops against the oracle (tolerances: tests/cpu_backend_testing.hpp tolerance()) -------------

class SuiteOps : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    GDNV_SUITE_SKIP_WITHOUT_BACKEND();
    be = suite_backend(GetParam());
    act = be->dtype(), st = be->state_dtype(), tol = gdnv::testing::tolerance(act);
  }
  std::unique_ptr<Backend> be;
  DType act = DType::F32, st = DType::F32;
  Tolerance tol{};

  Buffer up(const Tensor& t) { return be->upload(t, act); }
  Buffer up_state(const Tensor& t) { return be->upload(t, st); }
  Tensor down(const Buffer& b) { return be->download(b); }
};

TEST_P(SuiteOps, RmsNormForwardAndBackwardMatchTheOracle) {
  // 70 rows: the weight gradient's row sum crosses a 64-row block.
  const Tensor x = stored(random_normal({70, 13}, 3, "x"), act), w = stored(around_one(13, 3, "w"), act);
  const Tensor dy = stored(random_normal({70, 13}, 3, "dy"), act);
  const RmsNormOut fwd = be->rmsnorm(up(x), up(w), 1e-6);
  const ref::RmsNorm want = ref::rmsnorm_forward(x, w, 1e-6);
  EXPECT_TRUE(matches("y", down(fwd.y), want.y, tol.act));
  EXPECT_TRUE(matches("rstd", down(fwd.rstd), want.rstd, tol.state));
  const RmsNormGrads g = be->rmsnorm_backward(up(dy), up(x), up(w), fwd.rstd);
  const ref::RmsNormGrads g_want = ref::rmsnorm_backward(x, w, want.rstd, dy);
  EXPECT_TRUE(matches("dx", down(g.dx), g_want.dx, tol.act));
  EXPECT_TRUE(matches("dw", down(g.dw), g_want.dw, tol.state));
}

TEST_P(SuiteOps, LinearForwardAndBackwardMatchFp64Gemm) {
  const std::int64_t N = 67, in = 11, out = 6;
  const Tensor x = stored(random_normal({N, in}, 4, "x"), act), w = stored(random_normal({out, in}, 4, "w", 0.3), act);
  const Tensor dy = stored(random_normal({N, out}, 4, "dy"), act);
  Tensor y(DType::F64, {N, out}), dx(DType::F64, {N, in}), dw(DType::F64, {out, in});
  for (std::int64_t r = 0; r < N; ++r)
    for (std::int64_t o = 0; o < out; ++o)
      for (std::int64_t i = 0; i < in; ++i) {
        y.set(r * out + o, y.get(r * out + o) + x.get(r * in + i) * w.get(o * in + i));
        dx.set(r * in + i, dx.get(r * in + i) + dy.get(r * out + o) * w.get(o * in + i));
        dw.set(o * in + i, dw.get(o * in + i) + dy.get(r * out + o) * x.get(r * in + i));
      }
  EXPECT_TRUE(matches("y", down(be->linear(up(x), up(w))), y, tol.act));
  const LinearGrads g = be->linear_backward(up(dy), up(x), up(w));
  EXPECT_TRUE(matches("dx", down(g.dx), dx, tol.act));
  EXPECT_TRUE(matches("dw", down(g.dw), dw, tol.state));
}

TEST_P(SuiteOps, GatesForwardAndBackwardMatchTheOracle) {
  const std::int64_t N = 70, Hv = 5;
  const Tensor a = stored(random_normal({N, Hv}, 5, "a", 2), act), b = stored(random_normal({N, Hv}, 5, "b", 2), act);
  Tensor A_log(DType::F64, {Hv});
  const Rng u(5, "A");
  for (std::int64_t h = 0; h < Hv; ++h) A_log.set(h, std::log(u.uniform(static_cast<std::uint64_t>(h), 1, 16)));
  A_log = stored(A_log, act);
  const Tensor dt_bias = stored(around_one(Hv, 5, "dt", 0.1), act);
  const Tensor dg = stored(random_normal({N, Hv}, 5, "dg"), st), dbeta = stored(random_normal({N, Hv}, 5, "dbeta"), st);
  const Gates fwd = be->gates(up(a), up(b), up(A_log), up(dt_bias));
  const ref::Gates want = ref::gates_forward(a, b, A_log, dt_bias);
  EXPECT_TRUE(matches("g", down(fwd.g), want.g, tol.state));
  EXPECT_TRUE(matches("beta", down(fwd.beta), want.beta, tol.state));
  const GateGrads g = be->gates_backward(up_state(dg), up_state(dbeta), up(a), up(b), up(A_log), up(dt_bias));
  const ref::GateGrads g_want = ref::gates_backward(a, b, A_log, dt_bias, dg, dbeta);
  EXPECT_TRUE(matches("da", down(g.da), g_want.da, tol.act));
  EXPECT_TRUE(matches("db", down(g.db), g_want.db, tol.act));
  EXPECT_TRUE(matches("dA_log", down(g.dA_log), g_want.dA_log, tol.state));
  EXPECT_TRUE(matches("ddt_bias", down(g.ddt_bias), g_want.ddt_bias, tol.state));
}

TEST_P(SuiteOps, GatedNormForwardAndBackwardMatchTheOracle) {
  const Shape shape{30, 3, 10};
  const Tensor o = stored(random_normal(shape, 6, "o"), act), z = stored(random_normal(shape, 6, "z", 2), act);
  const Tensor w = stored(around_one(10, 6, "w"), act), dy = stored(random_normal(shape, 6, "dy"), act);
  const GatedNormOut fwd = be->gated_norm(up(o), up(z), up(w), 1e-6);
  const ref::GatedNorm want = ref::gated_rmsnorm_forward(o, z, w, 1e-6);
  EXPECT_TRUE(matches("y", down(fwd.y), want.y, tol.act));
  EXPECT_TRUE(matches("rstd", down(fwd.rstd), want.rstd, tol.state));
  const GatedNormGrads g = be->gated_norm_backward(up(dy), up(o), up(z), up(w), fwd.rstd, 1e-6);
  const ref::GatedNormGrads g_want = ref::gated_rmsnorm_backward(o, z, w, want.rstd, dy);
  EXPECT_TRUE(matches("d_o", down(g.d_o), g_want.d_o, tol.act));
  EXPECT_TRUE(matches("dz", down(g.dz), g_want.dz, tol.act));
  EXPECT_TRUE(matches("dw", down(g.dw), g_want.dw, tol.state));
}

INSTANTIATE_TEST_SUITE_P(Storage, SuiteOps, ::testing::Values(DType::F32, DType::BF16),
                         [](const auto& p) { return storage_name(p.param); });

// ---- conv1d, gated delta rule and span maps: the CPU backend's fixed cases ---------------------------

template <class Case>
struct Named {
  const char* name;
  Case c;
};
template <class Case>
void PrintTo(const Named<Case>& n, std::ostream* os) {
  *os << n.name;
}
template <class Case>
std::string test_name(const ::testing::TestParamInfo<std::tuple<DType, Named<Case>>>& p) {
  return storage_name(std::get<0>(p.param)) + "_" + std::get<1>(p.param).name;
}
using NamedConv = Named<gdnv::testing::ConvCase>;
using NamedGdr = Named<gdnv::testing::GdrCase>;

class SuiteConv : public ::testing::TestWithParam<std::tuple<DType, NamedConv>> {
 protected:
  void SetUp() override { GDNV_SUITE_SKIP_WITHOUT_BACKEND(); }
};

TEST_P(SuiteConv, MatchesTheOracleOnTheConcatenationWithTheHalo) {
  const auto be = suite_backend(std::get<0>(GetParam()));
  expect_all(gdnv::testing::compare_conv(*be, std::get<1>(GetParam()).c));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SuiteConv,
    ::testing::Combine(::testing::Values(DType::F32, DType::BF16),
                       ::testing::Values(NamedConv{"packed_with_length_1", {{0, 1, 6, 23, 24}, 10, 4, true, false, 11}},
                                         NamedConv{"no_bias_width_3", {{0, 9, 17}, 7, 3, false, false, 12}},
                                         NamedConv{"halo", {{0, 5, 12}, 6, 4, true, true, 13}},
                                         NamedConv{"halo_first_shorter_than_width", {{0, 2, 9}, 5, 4, true, true, 14}},
                                         NamedConv{"halo_single_token", {{0, 1}, 3, 4, false, true, 15}},
                                         NamedConv{"halo_width_2", {{0, 3, 4}, 4, 2, true, true, 16}},
                                         NamedConv{"rows_past_one_block", {{0, 50, 130}, 6, 4, true, true, 17}})),
    test_name<gdnv::testing::ConvCase>);

inline std::vector<NamedGdr> gdr_cases() {
  return {NamedGdr{"T1", {{0, 1}, 1, 3, 8, 6, true, true, 21}},
          NamedGdr{"T63", {{0, 63}, 1, 2, 5, 7, true, true, 22}},
          NamedGdr{"T64", {{0, 64}, 1, 1, 8, 6, true, true, 23}},
          NamedGdr{"T65", {{0, 65}, 2, 2, 6, 5, true, true, 24}},
          NamedGdr{"packed_gva2", {{0, 1, 66, 129, 193}, 2, 4, 12, 10, true, true, 25}},
          NamedGdr{"packed_gva4", {{0, 70, 71, 135}, 1, 4, 7, 9, true, true, 26}},
          NamedGdr{"packed_gva1_3heads", {{0, 30, 100}, 3, 3, 6, 5, true, true, 27}},
          NamedGdr{"no_h0_no_dht", {{0, 20, 90}, 1, 2, 9, 3, false, false, 28}},
          NamedGdr{"strong_decay", {{0, 64}, 1, 4, 2, 1, false, false, 0, gdnv::testing::Gates::LogSigmoidTau01}},
          NamedGdr{"strongly_negative_gates",
                   {{0, 40, 130}, 2, 4, 10, 6, true, true, 29, gdnv::testing::Gates::StronglyNegative}}};
}

class SuiteGdr : public ::testing::TestWithParam<std::tuple<DType, NamedGdr>> {
 protected:
  void SetUp() override { GDNV_SUITE_SKIP_WITHOUT_BACKEND(); }
};

TEST_P(SuiteGdr, ChunkedMatchesTheRecurrentOracle) {
  const auto be = suite_backend(std::get<0>(GetParam()));
  expect_all(gdnv::testing::compare_gdr(*be, std::get<1>(GetParam()).c));
}

TEST_P(SuiteGdr, SpanMapsAndFoldsMatchTheOracle) {
  const auto be = suite_backend(std::get<0>(GetParam()));
  expect_all(gdnv::testing::compare_span_maps(*be, std::get<1>(GetParam()).c));
}

INSTANTIATE_TEST_SUITE_P(Shapes, SuiteGdr,
                         ::testing::Combine(::testing::Values(DType::F32, DType::BF16),
                                            ::testing::ValuesIn(gdr_cases())),
                         test_name<gdnv::testing::GdrCase>);

// ---- against the CPU backend on the same buffers' contents -----------------------------------------------
// Two fp32 implementations of the same chunked algorithm, each within the fp32 gate 1e-5 of the oracle
// (tests/cpu_backend_testing.hpp); they differ only in summation order, so their distance is bounded by
// the sum of their errors: 2e-5 relative RMS.
TEST(SuiteVsCpu, ChunkedCoreForwardAndBackwardAgreeWithTheCpuBackend) {
  GDNV_SUITE_SKIP_WITHOUT_BACKEND();
  const auto be = suite_backend(DType::F32), cpu = make_cpu_backend(DType::F32);
  const gdnv::testing::GdrCase c{{0, 70, 71, 200}, 2, 4, 6, 5, true, true, 51};
  const ref::GdrInputs in = gdnv::testing::stored_gdr_inputs(c, DType::F32, DType::F32);
  const Tensor h0 = random_normal({c.Hv, c.K, c.V}, 51, "h0", 0.5);
  const Tensor d_o = random_normal({200, c.Hv, c.V}, 51, "do");
  const auto run = [&](Backend& b) {
    const gdnv::testing::GdrBuffers bufs(b, in, c, b.upload(h0, DType::F32));
    const GdrOut out = b.gdr(bufs.args());
    const GdrGrads g = b.gdr_backward(bufs.args(), b.upload(d_o, DType::F32), Buffer());
    return std::vector<Tensor>{b.download(out.o), b.download(out.final_state), b.download(g.dq), b.download(g.dk),
                               b.download(g.dv), b.download(g.dg), b.download(g.dbeta), b.download(g.dh0)};
  };
  const std::vector<Tensor> got = run(*be), want = run(*cpu);
  const char* names[] = {"o", "final_state", "dq", "dk", "dv", "dg", "dbeta", "dh0"};
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(gdnv::testing::close(names[i], got[i].to(DType::F64), want[i].to(DType::F64), 2e-5));
}

// The planted fault that drops dt_bias is honoured like the CPU backend's: the gates then equal the
// CPU backend's faulted gates (fp32 gate 1e-5) and differ from the correct ones. Dropping a bias of ~1
// moves softplus(a + 1) to softplus(a), a relative change ~0.5: a relative RMS under 1e-2 would mean
// the bias was kept.
TEST(SuiteFaults, GateSoftplusMissingDtBiasDropsTheBiasLikeTheCpuBackend) {
  GDNV_SUITE_SKIP_WITHOUT_BACKEND();
  const auto be = suite_backend(DType::F32), cpu = make_cpu_backend(DType::F32);
  const Tensor a = random_normal({20, 3}, 61, "a"), b = random_normal({20, 3}, 61, "b");
  const Tensor A_log = random_normal({3}, 61, "A", 0.5), dt_bias = around_one(3, 61, "dt");
  const auto g_of = [&](Backend& x) {
    return x.download(x.gates(x.upload(a, DType::F32), x.upload(b, DType::F32), x.upload(A_log, DType::F32),
                              x.upload(dt_bias, DType::F32)).g);
  };
  const Tensor correct = g_of(*be);
  const ScopedFault fault(Fault::GateSoftplusMissingDtBias);
  const Tensor faulted = g_of(*be);
  EXPECT_FALSE(gdnv::testing::close("g", faulted.to(DType::F64), correct.to(DType::F64), 1e-2));
  EXPECT_TRUE(gdnv::testing::close("g", faulted.to(DType::F64), g_of(*cpu).to(DType::F64), 1e-5));
}

// ---- the CP modes, unchanged, on this backend ---------------------------------------------------------------
// gdn-verify run's judgement: every tensor of the layer fwd+bwd against the fp64 oracle under the gate of
// cp::oracle_gates (derived there from the storage dtype and the layer's condition numbers).
class SuiteModes : public ::testing::TestWithParam<std::tuple<CpMode, int, DType>> {
 protected:
  void SetUp() override { GDNV_SUITE_SKIP_WITHOUT_BACKEND(); }
};

TEST_P(SuiteModes, LayerMatchesTheOracleUnderEveryGate) {
  const auto [mode, cp_size, dtype] = GetParam();
  RunSpec spec;
  // 4 key and value heads: headwise needs Hk % cp == 0 up to cp = 4.
  spec.layer.hidden_size = 32, spec.layer.linear_num_key_heads = 4, spec.layer.linear_num_value_heads = 4;
  spec.layer.linear_key_head_dim = 8, spec.layer.linear_value_head_dim = 8, spec.layer.linear_conv_kernel_dim = 4;
  spec.cp.mode = mode, spec.cp.cp = cp_size, spec.dtype = dtype, spec.format = Format::Thd;
  spec.lengths = {96, 40};
  spec.seed = 7;
  const Case k = make_case(spec);
  const Answer oracle = oracle_answer(k);
  const auto gates = oracle_gates(k, oracle, dtype);
  const auto runs = run_in_process(spec, k, [](DType d) { return suite_backend(d); });
  ASSERT_EQ(runs.size(), 1u);
  const auto check = [&](const std::string& name, const Tensor& want, const Tensor& got) {
    ASSERT_TRUE(gdnv::testing::nontrivial(want)) << name;
    const Metrics m = compare(want, got);
    EXPECT_TRUE(m.rel_rms < gates.at(name) && m.nan_cand == 0 && m.inf_cand == 0)
        << name << ": rel RMS " << m.rel_rms << " gate " << gates.at(name);
  };
  check("out", oracle.out, runs[0].answer.out);
  check("grad_hidden", oracle.grad_hidden, runs[0].answer.grad_hidden);
  for (const auto& [name, t] : oracle.grads) check("grad::" + name, t, runs[0].answer.grads.at(name));
}

INSTANTIATE_TEST_SUITE_P(AllModes, SuiteModes,
                         ::testing::Combine(::testing::Values(CpMode::Headwise, CpMode::Chunkwise, CpMode::AllGather),
                                            ::testing::Values(1, 2, 4), ::testing::Values(DType::F32, DType::BF16)),
                         [](const auto& p) {
                           return std::string(mode_name(std::get<0>(p.param))) + "_cp" +
                                  std::to_string(std::get<1>(p.param)) + "_" + storage_name(std::get<2>(p.param));
                         });

}  // namespace suite
}  // namespace gdnv::cp
