#pragma once
// The test suite of a gpu/ kernel backend (the host emulation or CUDA), included by each test
// executable with its own factory: every leaf op against the fp64 oracle on the same stored inputs
// (the harness of tests/cpu_backend_testing.hpp, whose tolerances carry their derivations), the data
// movement exactly, the chunked core against the CPU backend, and the three CP modes end to end
// through the unchanged mode code. The includer defines
//   std::unique_ptr<cp::Backend> suite_backend(DType storage);
//   std::string suite_skip_reason();  // "" to run; else every test skips with it
#include <cmath>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <tuple>

#include <gtest/gtest.h>

#include "core/half.hpp"
#include "core/metrics.hpp"
#include "cost/counting_backend.hpp"
#include "cpu/backend.hpp"
#include "faults/registry.hpp"
#include "harness/world.hpp"
#include "tests/cpu_backend_testing.hpp"
#include "tests/harness_testing.hpp"

namespace gdnv::cp {
using namespace harness;

std::unique_ptr<Backend> suite_backend(DType storage);
std::string suite_skip_reason();

namespace suite {

using gdnv::testing::matches;
using gdnv::testing::random_normal;
using gdnv::testing::stored;
using gdnv::testing::Tolerance;

using gdnv::testing::storage_name;

using gdnv::testing::around_one;
using gdnv::testing::index_buffer;

using gdnv::testing::expect_all;

#define GDNV_SUITE_SKIP_WITHOUT_BACKEND()                                \
  if (const std::string reason = suite_skip_reason(); !reason.empty()) { \
    GTEST_SKIP() << reason;                                              \
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
  gdnv::testing::expect_rows_move_exact_bytes(*be);
  gdnv::testing::expect_columns_move_exact_bytes(*be);
}

// The counter the zero-sync check of SuiteModes reads: it moves exactly where the host waits.
TEST_F(SuiteData, EachUploadAndDownloadIsOneHostSyncAndOpsAreNone) {
  const auto be = suite_backend(DType::F32);
  const auto accounting = std::make_shared<comm::Accounting>();
  be->count_host_syncs(accounting);
  const Buffer x = be->upload(Tensor(DType::F32, {4, 3}), DType::F32);
  EXPECT_EQ(accounting->counters().host_syncs, 1u);
  const Buffer y = be->gather_rows(be->linear(x, be->alloc(DType::F32, {2, 3})), index_buffer(*be, {3, 0}));
  EXPECT_EQ(accounting->counters().host_syncs, 2u);  // index_buffer's upload; the ops none
  (void)be->download(y);
  EXPECT_EQ(accounting->counters().host_syncs, 3u);  // the bytes and the index flag together
}

// As a GPU reports a kernel's fault: at the next host sync, naming the op; later ops are clean again.
TEST_F(SuiteData, AnIndexOutOfRangeIsAnErrorNamingTheRangeAtTheNextDownload) {
  const auto be = suite_backend(DType::F32);
  Buffer x = be->alloc(DType::F32, {5, 2});
  be->scatter_columns(be->alloc(DType::F32, {5, 1}), index_buffer(*be, {1}), x);  // in range: [0, 2)
  (void)be->gather_rows(x, index_buffer(*be, {0, 5}));
  try {
    (void)be->download(x);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "gather_rows: an index is outside [0, 5)");
  }
  EXPECT_EQ(be->download(be->gather_rows(x, index_buffer(*be, {4}))).numel(), 2);
}

TEST_F(SuiteData, AccumulateAddsElementwiseRoundingOnceToTheTargetDtype) {
  const auto be = suite_backend(DType::BF16);
  gdnv::testing::expect_bf16_accumulate_rounds_once(*be);
  const Tensor y32 = random_normal({5}, 9, "y32"), x64 = random_normal({5}, 9, "x64");
  Buffer acc = be->upload(y32, DType::F32);
  be->accumulate(acc, be->upload(x64, DType::F64));
  for (std::int64_t i = 0; i < 5; ++i)
    EXPECT_EQ(be->download(acc).get(i), static_cast<float>(y32.to(DType::F32).get(i)) + static_cast<float>(x64.get(i)));
}

// ---- argument errors: one check per op (cp/backend.cpp), so one message from every backend ---------------

// The backends a bad call must be rejected by with the same message: this suite's, the CPU backend, and
// each wrapped in the counting decorator (which checks once, by its own public op).
std::vector<std::unique_ptr<Backend>> every_fp32_backend() {
  std::vector<std::unique_ptr<Backend>> out;
  out.push_back(suite_backend(DType::F32));
  out.push_back(cpu::make_backend(DType::F32));
  out.push_back(std::make_unique<cost::CountingBackend>(suite_backend(DType::F32)));
  out.push_back(std::make_unique<cost::CountingBackend>(cpu::make_backend(DType::F32)));
  return out;
}

struct ErrorCase {
  const char* name;
  std::function<void(Backend&)> call;
  std::string message;
};

void PrintTo(const ErrorCase& c, std::ostream* os) { *os << c.name; }

Buffer f32(Backend& be, Shape shape) { return be.alloc(DType::F32, std::move(shape)); }

// Sequence offsets for one sequence of n tokens, where the backend computes too.
Varlen one_sequence(Backend& be, std::int64_t n) { return {{0, n}, upload_index(be, {0, n})}; }

std::vector<ErrorCase> error_cases() {
  return {
      {"gather_rows_index_dtype",
       [](Backend& be) {
         be.gather_rows(f32(be, {5, 2}), be.alloc(DType::I32, {2}));
       },
       "gather_rows: index is I32 [2]; expected I64 [M]"},
      {"scatter_rows_row_width",
       [](Backend& be) {
         Buffer out = f32(be, {4, 3});
         be.scatter_rows(f32(be, {2, 2}), index_buffer(be, {0, 1}), out);
       },
       "scatter_rows: x F32 [2, 2] does not match 2 rows of out F32 [4, 3]"},
      {"scatter_rows_no_rows_of_another_width",
       [](Backend& be) {
         Buffer out = f32(be, {4, 3});
         be.scatter_rows(f32(be, {0, 5}), be.alloc(DType::I64, {0}), out);
       },
       "scatter_rows: x F32 [0, 5] does not match 0 rows of out F32 [4, 3]"},
      {"gather_columns_rank",
       [](Backend& be) {
         be.gather_columns(f32(be, {2, 3, 4}), index_buffer(be, {0}));
       },
       "gather_columns: x has shape [2, 3, 4]; expected rank 2 [N, D]"},
      {"scatter_columns_width",
       [](Backend& be) {
         Buffer out = f32(be, {2, 6});
         be.scatter_columns(f32(be, {2, 3}), index_buffer(be, {0, 1}), out);
       },
       "scatter_columns: x is F32 [2, 3]; expected F32 [N, E] = [2, 2]"},
      {"accumulate_shape",
       [](Backend& be) {
         Buffer y = f32(be, {2, 3});
         be.accumulate(y, f32(be, {3, 2}));
       },
       "accumulate: y F32 [2, 3] and x F32 [3, 2] must be F64, F32 or BF16 of one shape"},
      {"rmsnorm_backward_rstd_dtype",
       [](Backend& be) {
         const Buffer x = f32(be, {3, 4});
         be.rmsnorm_backward(x, x, f32(be, {4}), be.alloc(DType::BF16, {3}));
       },
       "rmsnorm_backward: rstd is BF16 [3]; expected F32 [N] = [3]"},
      {"linear_backward_dy_shape",
       [](Backend& be) {
         be.linear_backward(f32(be, {3, 3}), f32(be, {3, 4}), f32(be, {2, 4}));
       },
       "linear_backward: dy is F32 [3, 3]; expected F32 [N, out] = [3, 2]"},
      {"conv1d_offsets",
       [](Backend& be) {
         const Buffer x = f32(be, {4, 3}), w = f32(be, {3, 4}), none;
         const Varlen seqs{{0, 3, 2, 4}, upload_index(be, {0, 3, 2, 4})};
         be.conv1d({x, w, nullptr, seqs, none});
       },
       "conv1d: sequence offsets [0,3,2,4] must start at 0, not decrease and end at the 4 local tokens"},
      {"gates_backward_dg_dtype",
       [](Backend& be) {
         const Buffer a = f32(be, {4, 2}), h = f32(be, {2});
         be.gates_backward(be.alloc(DType::BF16, {4, 2}), f32(be, {4, 2}), a, a, h, h);
       },
       "gates_backward: dg is BF16 [4, 2]; expected F32 [N, Hv] = [4, 2]"},
      {"gdr_gva",
       [](Backend& be) {
         const Buffer q = f32(be, {4, 2, 3}), v = f32(be, {4, 3, 2}), gate = f32(be, {4, 3}), none;
         be.gdr({q, q, v, gate, gate, one_sequence(be, 4), none, 1.0});
       },
       "gdr: 3 value heads cannot share 2 key heads; GVA needs Hv % Hk == 0"},
      {"gdr_first_backward_span_map_d_o_shape",
       [](Backend& be) {
         const Buffer q = f32(be, {4, 1, 3}), v = f32(be, {4, 2, 2}), gate = f32(be, {4, 2}), none;
         be.gdr_first_backward_span_map({q, q, v, gate, gate, one_sequence(be, 4), none, 1.0}, f32(be, {4, 2, 3}));
       },
       "gdr_first_backward_span_map: d_o is F32 [4, 2, 3]; expected F32 [N, Hv, dv] = [4, 2, 2]"},
      {"fold_span_maps_ranks",
       [](Backend& be) {
         be.fold_span_maps(f32(be, {2, 1, 2, 5}), 1, 3, FoldDirection::Forward);
       },
       "fold_span_maps: ranks [1, 3) of maps [2, 1, 2, 5]; expected 0 <= begin <= end <= cp and dv+dk > dk"},
      {"gated_norm_backward_rstd_shape",
       [](Backend& be) {
         const Buffer o = f32(be, {3, 2, 4});
         be.gated_norm_backward(o, o, o, f32(be, {4}), f32(be, {3, 4}), 1e-6);
       },
       "gated_norm_backward: rstd is F32 [3, 4]; expected F32 [N, Hv] = [3, 2]"},
  };
}

class SuiteErrors : public ::testing::TestWithParam<ErrorCase> {
 protected:
  void SetUp() override { GDNV_SUITE_SKIP_WITHOUT_BACKEND(); }
};

TEST_P(SuiteErrors, EveryBackendRejectsTheCallWithOneMessage) {
  for (const auto& be : every_fp32_backend()) {
    SCOPED_TRACE(be->name());
    try {
      GetParam().call(*be);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), GetParam().message);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Arguments, SuiteErrors, ::testing::ValuesIn(error_cases()),
                         [](const auto& p) { return std::string(p.param.name); });

// Scattering no rows (a rank that holds none of a sequence's tokens) leaves out as it was.
TEST_F(SuiteData, ScatteringNoRowsLeavesTheOutputAsItWasOnEveryBackend) {
  const Tensor before = random_normal({4, 3}, 13, "scatter_none").to(DType::F32);
  for (const auto& be : every_fp32_backend()) {
    SCOPED_TRACE(be->name());
    Buffer out = be->upload(before, DType::F32);
    be->scatter_rows(be->alloc(DType::F32, {0, 3}), be->alloc(DType::I64, {0}), out);
    EXPECT_TRUE(be->download(out).bitwise_equal(before));
  }
}

// ---- leaf ops against the oracle (tolerances: tests/cpu_backend_testing.hpp tolerance()) -------------

class SuiteOps : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    GDNV_SUITE_SKIP_WITHOUT_BACKEND();
    be = suite_backend(GetParam());
  }
  std::unique_ptr<Backend> be;
};

// Sizes past one 64-row block: the kernels' row sums (weight gradients) cross a block boundary.
TEST_P(SuiteOps, RmsNormForwardAndBackwardMatchTheOracle) { expect_all(gdnv::testing::compare_rmsnorm(*be, 70)); }

TEST_P(SuiteOps, LinearForwardAndBackwardMatchFp64Gemm) { expect_all(gdnv::testing::compare_linear(*be, 67)); }

TEST_P(SuiteOps, GatesForwardAndBackwardMatchTheOracle) { expect_all(gdnv::testing::compare_gates(*be, 70)); }

TEST_P(SuiteOps, GatedNormForwardAndBackwardMatchTheOracle) { expect_all(gdnv::testing::compare_gated_norm(*be, 30)); }

INSTANTIATE_TEST_SUITE_P(Storage, SuiteOps, ::testing::Values(DType::F32, DType::BF16),
                         [](const auto& p) { return storage_name(p.param); });

// ---- conv1d, gated delta rule and span maps: the CPU backend's fixed cases ---------------------------

using gdnv::testing::NamedConv;
using gdnv::testing::NamedGdr;
using gdnv::testing::test_name;

class SuiteConv : public ::testing::TestWithParam<std::tuple<DType, NamedConv>> {
 protected:
  void SetUp() override { GDNV_SUITE_SKIP_WITHOUT_BACKEND(); }
};

TEST_P(SuiteConv, MatchesTheOracleOnTheConcatenationWithTheHalo) {
  const auto be = suite_backend(std::get<0>(GetParam()));
  expect_all(gdnv::testing::compare_conv(*be, std::get<1>(GetParam()).c));
}

INSTANTIATE_TEST_SUITE_P(Shapes, SuiteConv,
                         ::testing::Combine(::testing::Values(DType::F32, DType::BF16),
                                            ::testing::ValuesIn(gdnv::testing::conv_cases())),
                         test_name<gdnv::testing::ConvCase>);

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
                                            ::testing::ValuesIn(gdnv::testing::gdr_cases())),
                         test_name<gdnv::testing::GdrCase>);

// ---- against the CPU backend on the same buffers' contents -----------------------------------------------
// Two fp32 implementations of the same chunked algorithm, each within the fp32 gate 1e-5 of the oracle
// (tests/cpu_backend_testing.hpp); they differ only in summation order, so their distance is bounded by
// the sum of their errors: 2e-5 relative RMS.
TEST(SuiteVsCpu, ChunkedCoreForwardAndBackwardAgreeWithTheCpuBackend) {
  GDNV_SUITE_SKIP_WITHOUT_BACKEND();
  const auto be = suite_backend(DType::F32), cpu = cpu::make_backend(DType::F32);
  const gdnv::testing::GdrCase c{{0, 70, 71, 200}, 2, 4, 6, 5, true, true, 51};
  const ref::GdrInputs in = gdnv::testing::stored_gdr_inputs(c, DType::F32, DType::F32);
  const Tensor h0 = random_normal({c.Hv, c.K, c.V}, 51, "h0", 0.5);
  const Tensor d_o = random_normal({200, c.Hv, c.V}, 51, "do");
  const auto run = [&](Backend& b) {
    const gdnv::testing::GdrBuffers bufs(b, in, c, b.upload(h0, DType::F32));
    const GdrOut out = b.gdr(bufs.args());
    const GdrGrads g = b.gdr_backward(bufs.args(), b.upload(d_o, DType::F32), Buffer());
    return std::vector<Tensor>{
        b.download(out.o), b.download(out.final_state), b.download(g.dq), b.download(g.dk), b.download(g.dv),
        b.download(g.dg),  b.download(g.dbeta),         b.download(g.dh0)};
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
  const auto be = suite_backend(DType::F32), cpu = cpu::make_backend(DType::F32);
  const Tensor a = random_normal({20, 3}, 61, "a"), b = random_normal({20, 3}, 61, "b");
  const Tensor A_log = random_normal({3}, 61, "A", 0.5), dt_bias = around_one(3, 61, "dt");
  const auto g_of = [&](Backend& x) {
    return x.download(x.gates(x.upload(a, DType::F32), x.upload(b, DType::F32), x.upload(A_log, DType::F32),
                              x.upload(dt_bias, DType::F32))
                          .g);
  };
  const Tensor correct = g_of(*be);
  const ScopedFault fault(Fault::GateSoftplusMissingDtBias);
  const Tensor faulted = g_of(*be);
  EXPECT_FALSE(gdnv::testing::close("g", faulted.to(DType::F64), correct.to(DType::F64), 1e-2));
  EXPECT_TRUE(gdnv::testing::close("g", faulted.to(DType::F64), g_of(*cpu).to(DType::F64), 1e-5));
}

// The planted naive softplus is honoured like the CPU backend's: log(1 + e^1000) overflows to inf in
// fp32, so g = -inf where the correct gate is -1000.
TEST(SuiteFaults, SoftplusOverflowsMakesTheGateInfiniteLikeTheCpuBackend) {
  GDNV_SUITE_SKIP_WITHOUT_BACKEND();
  const auto be = suite_backend(DType::F32), cpu = cpu::make_backend(DType::F32);
  const Tensor a = Tensor::from(std::vector<double>{1e3, -1e3}, {1, 2}), zeros(DType::F64, {2});
  const auto g_of = [&](Backend& x) {
    return x.download(x.gates(x.upload(a, DType::F32), x.upload(a, DType::F32), x.upload(zeros, DType::F32),
                              x.upload(zeros, DType::F32))
                          .g);
  };
  EXPECT_EQ(g_of(*be).get(0), -1e3);
  const ScopedFault fault(Fault::SoftplusOverflows);
  EXPECT_TRUE(std::isinf(g_of(*be).get(0)));
  EXPECT_TRUE(g_of(*be).bitwise_equal(g_of(*cpu)));
}

// The planted fast rsqrt is honoured like the CPU backend's: a row of mean square 1.002 falls mid-way
// in the table's first interval, where the chord lies ~1.4e-6 above 1 / sqrt (core/fast_rsqrt.hpp).
TEST(SuiteFaults, RmsnormFastRsqrtMovesRstdLikeTheCpuBackend) {
  GDNV_SUITE_SKIP_WITHOUT_BACKEND();
  const auto be = suite_backend(DType::F32), cpu = cpu::make_backend(DType::F32);
  const Tensor x = Tensor::from(std::vector<double>{1.0, std::sqrt(1.004)}, {1, 2});
  const Tensor w = Tensor::from(std::vector<double>{1.0, 1.0}, {2});
  const auto rstd_of = [&](Backend& b) {
    return b.download(b.rmsnorm(b.upload(x, DType::F32), b.upload(w, DType::F32), 1e-6).rstd);
  };
  const double exact = rstd_of(*be).get(0);
  const ScopedFault fault(Fault::RmsnormFastRsqrt);
  const double fast = rstd_of(*be).get(0);
  EXPECT_GT(fast / exact - 1, 1e-6);
  EXPECT_LT(fast / exact - 1, 1.5e-6);
  EXPECT_TRUE(rstd_of(*be).bitwise_equal(rstd_of(*cpu)));
}

// ---- the CP modes, unchanged, on this backend ---------------------------------------------------------------
// gdn-verify run's judgement: every tensor of the layer fwd+bwd against the fp64 oracle under the gate of
// harness::oracle_gates (derived there from the storage dtype and the layer's condition numbers).
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
  // Once the micro-batch is planned, the layer's forward and backward never block the host.
  for (const RankOutput& rank : runs[0].ranks) {
    EXPECT_EQ(rank.forward.host_syncs, 0u) << "forward of CP rank " << rank.cp_rank;
    EXPECT_EQ(rank.backward.host_syncs, 0u) << "backward of CP rank " << rank.cp_rank;
  }
}

INSTANTIATE_TEST_SUITE_P(AllModes, SuiteModes,
                         ::testing::Combine(::testing::Values(CpMode::Headwise, CpMode::Chunkwise, CpMode::AllGather),
                                            ::testing::Values(1, 2, 4), ::testing::Values(DType::F32, DType::BF16)),
                         [](const auto& p) {
                           return std::string(mode_name(std::get<0>(p.param))) + "_cp" +
                                  std::to_string(std::get<1>(p.param)) + "_" + storage_name(std::get<2>(p.param));
                         });

// The extreme input regime (harness/harness.hpp) in every mode, at CP=2 (lengths divisible by 2*cp) and at
// CP=1 with two one-token sequences, as the gate runs it (gate/cp_mode_matrix.cpp): every tensor within
// its oracle gate and none NaN or Inf.
class SuiteExtreme : public ::testing::TestWithParam<std::tuple<CpMode, int, DType>> {
 protected:
  void SetUp() override { GDNV_SUITE_SKIP_WITHOUT_BACKEND(); }
};

TEST_P(SuiteExtreme, LayerMatchesTheOracleWithoutNanOrInf) {
  const auto [mode, cp_size, dtype] = GetParam();
  RunSpec spec;
  spec.layer = {24, 4, 8, 6, 10, 4, 1e-6, false};
  spec.cp.mode = mode, spec.cp.cp = cp_size, spec.dtype = dtype, spec.format = Format::Thd;
  spec.lengths = cp_size == 1 ? std::vector<std::int64_t>{1, 1, 6} : std::vector<std::int64_t>{8, 4};
  spec.gates = GateRegime::Extreme;
  testing::expect_matches_oracle_without_nan_or_inf(spec, [](DType d) { return suite_backend(d); });
}

INSTANTIATE_TEST_SUITE_P(AllModes, SuiteExtreme,
                         ::testing::Combine(::testing::Values(CpMode::Headwise, CpMode::Chunkwise, CpMode::AllGather),
                                            ::testing::Values(1, 2), ::testing::Values(DType::F32, DType::BF16)),
                         [](const auto& p) {
                           return std::string(mode_name(std::get<0>(p.param))) + "_cp" +
                                  std::to_string(std::get<1>(p.param)) + "_" + storage_name(std::get<2>(p.param));
                         });

}  // namespace suite
}  // namespace gdnv::cp
