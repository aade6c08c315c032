// The CPU backend (cpu/backend.hpp): data movement exactly, every leaf op forward and backward
// against the fp64 oracle of reference/ on the same stored inputs, for fp64, fp32 and bf16 storage.
#include <cmath>
#include <functional>
#include <iostream>

#include <gtest/gtest.h>

#include "core/half.hpp"
#include "cpu/backend.hpp"
#include "cpu/gdr_chunk.hpp"
#include "tests/cpu_backend_testing.hpp"

namespace gdnv::cp {
namespace {

using gdnv::testing::matches;
using gdnv::testing::random_normal;
using gdnv::testing::stored;
using gdnv::testing::Tolerance;

using gdnv::testing::around_one;
using gdnv::testing::expect_all;
using gdnv::testing::index_buffer;
using gdnv::testing::NamedConv;
using gdnv::testing::NamedGdr;
using gdnv::testing::storage_name;
using gdnv::testing::test_name;

// ---- factory ------------------------------------------------------------------------------------

TEST(CpuBackendFactory, NamesItsStorageAndStateDtypes) {
  const auto bf16 = cpu::make_backend(DType::BF16), fp64 = cpu::make_backend(DType::F64);
  EXPECT_EQ(bf16->name(), "cpu/bf16");
  EXPECT_EQ(bf16->dtype(), DType::BF16);
  EXPECT_EQ(bf16->state_dtype(), DType::F32);
  EXPECT_EQ(bf16->memory(), comm::Memory::Host);
  EXPECT_EQ(fp64->name(), "cpu/fp64");
  EXPECT_EQ(fp64->state_dtype(), DType::F64);
  EXPECT_EQ(cpu::make_backend(DType::F32)->state_dtype(), DType::F32);
}

TEST(CpuBackendFactory, RejectsNonFloatStorageWithItsMessage) {
  for (const DType d : {DType::F16, DType::I64}) {
    try {
      cpu::make_backend(d);
      ADD_FAILURE() << "no error for " << dtype_name(d);
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()), "the CPU backend stores F64, F32 or BF16, not " + std::string(dtype_name(d)) +
                                           "; choose --dtype fp64, fp32 or bf16");
    }
  }
}

// ---- buffers and data movement ------------------------------------------------------------------

TEST(CpuBackendData, AllocIsZeroFilledWithTheRequestedShape) {
  const auto be = cpu::make_backend(DType::F32);
  const Tensor t = be->download(be->alloc(DType::BF16, {3, 5}));
  EXPECT_TRUE(t.bitwise_equal(Tensor(DType::BF16, {3, 5})));
}

TEST(CpuBackendData, UploadRoundsToNearestEvenAndDownloadReturnsTheSameBytes) {
  const auto be = cpu::make_backend(DType::BF16);
  const Tensor t = random_normal({4, 7}, 5, "upload");
  for (const DType d : {DType::F64, DType::F32, DType::BF16})
    EXPECT_TRUE(be->download(be->upload(t, d)).bitwise_equal(t.to(d)));
  const Tensor ints = Tensor::from(std::vector<std::int32_t>{0, 3, -2}, {3});
  EXPECT_TRUE(be->download(be->upload(ints, DType::I64)).bitwise_equal(ints.to(DType::I64)));
}

TEST(CpuBackendData, GatherRowsPicksTheIndexedRowsAndScatterRowsPutsThemBack) {
  gdnv::testing::expect_rows_move_exact_bytes(*cpu::make_backend(DType::F32));
}

TEST(CpuBackendData, GatherColumnsPicksTheIndexedColumnsAndScatterColumnsPutsThemBack) {
  gdnv::testing::expect_columns_move_exact_bytes(*cpu::make_backend(DType::F64));
}

TEST(CpuBackendData, AccumulateAddsElementwiseRoundingOnceToTheTargetDtype) {
  const auto be = cpu::make_backend(DType::BF16);
  gdnv::testing::expect_bf16_accumulate_rounds_once(*be);
  const Tensor y64 = random_normal({5}, 9, "y64"), x64 = random_normal({5}, 9, "x64");
  Buffer acc = be->upload(y64, DType::F64);
  be->accumulate(acc, be->upload(x64, DType::F64));
  for (std::int64_t i = 0; i < 5; ++i) EXPECT_EQ(be->download(acc).get(i), y64.get(i) + x64.get(i));
}

// ---- leaf ops against the oracle ----------------------------------------------------------------

// The comparisons live in tests/cpu_backend_testing.hpp, shared with the gpu/ kernel-backend suite.
class CpuBackendOps : public ::testing::TestWithParam<DType> {
 protected:
  std::unique_ptr<Backend> be = cpu::make_backend(GetParam());
};

TEST_P(CpuBackendOps, RmsNormForwardAndBackwardMatchTheOracle) { expect_all(gdnv::testing::compare_rmsnorm(*be, 7)); }

TEST_P(CpuBackendOps, LinearForwardAndBackwardMatchFp64Gemm) { expect_all(gdnv::testing::compare_linear(*be, 9)); }

TEST_P(CpuBackendOps, GatesForwardAndBackwardMatchTheOracle) { expect_all(gdnv::testing::compare_gates(*be, 9)); }

TEST_P(CpuBackendOps, GatedNormForwardAndBackwardMatchTheOracle) {
  expect_all(gdnv::testing::compare_gated_norm(*be, 6));
}

INSTANTIATE_TEST_SUITE_P(Storage, CpuBackendOps, ::testing::Values(DType::F64, DType::F32, DType::BF16),
                         [](const auto& p) { return storage_name(p.param); });

// ---- conv1d ------------------------------------------------------------------------------------

class CpuBackendConv : public ::testing::TestWithParam<std::tuple<DType, NamedConv>> {};

TEST_P(CpuBackendConv, MatchesTheOracleOnTheConcatenationWithTheHalo) {
  const auto be = cpu::make_backend(std::get<0>(GetParam()));
  expect_all(gdnv::testing::compare_conv(*be, std::get<1>(GetParam()).c));
}

INSTANTIATE_TEST_SUITE_P(Shapes, CpuBackendConv,
                         ::testing::Combine(::testing::Values(DType::F64, DType::F32, DType::BF16),
                                            ::testing::ValuesIn(gdnv::testing::conv_cases())),
                         test_name<gdnv::testing::ConvCase>);

// ---- gated delta rule ---------------------------------------------------------------------------

class CpuBackendGdr : public ::testing::TestWithParam<std::tuple<DType, NamedGdr>> {};

TEST_P(CpuBackendGdr, ChunkedMatchesTheRecurrentOracle) {
  const auto be = cpu::make_backend(std::get<0>(GetParam()));
  expect_all(gdnv::testing::compare_gdr(*be, std::get<1>(GetParam()).c));
}

INSTANTIATE_TEST_SUITE_P(Shapes, CpuBackendGdr,
                         ::testing::Combine(::testing::Values(DType::F64, DType::F32, DType::BF16),
                                            ::testing::ValuesIn(gdnv::testing::gdr_cases())),
                         test_name<gdnv::testing::GdrCase>);

// The kernel runs (sequence, key head) tasks on several threads: the bits must not depend on the schedule.
TEST(CpuBackendGdrThreads, RepeatedRunsAreBitwiseIdentical) {
  const auto be = cpu::make_backend(DType::F32);
  const std::vector<std::int64_t> cu{0, 70, 71, 200};
  const std::int64_t N = 200, Hk = 2, Hv = 4, K = 6, V = 5;
  const Buffer q = be->upload(random_normal({N, Hk, K}, 51, "q"), DType::F32);
  const Buffer k = be->upload(random_normal({N, Hk, K}, 51, "k"), DType::F32);
  const Buffer v = be->upload(random_normal({N, Hv, V}, 51, "v"), DType::F32);
  Tensor g_t = random_normal({N, Hv}, 51, "g");
  for (std::int64_t i = 0; i < g_t.numel(); ++i) g_t.set(i, -std::abs(g_t.get(i)));
  const Buffer g = be->upload(g_t, DType::F32),
               beta = be->upload(around_one(N * Hv, 51, "b", 0.1).reshaped({N, Hv}), DType::F32);
  const Buffer d_o = be->upload(random_normal({N, Hv, V}, 51, "do"), DType::F32), none;
  const Varlen seqs{cu, be->upload(Tensor::from(cu, {4}), DType::I64)};
  const GdrArgs args{q, k, v, g, beta, seqs, none, 0.4};
  const auto run = [&] {
    const GdrGrads d = be->gdr_backward(args, d_o, none);
    return std::vector<Tensor>{be->download(be->gdr(args).o), be->download(d.dq), be->download(d.dk),
                               be->download(d.dg)};
  };
  const std::vector<Tensor> first = run();
  ASSERT_TRUE(gdnv::testing::nontrivial(first[1]));
  for (int rep = 0; rep < 5; ++rep) {
    const std::vector<Tensor> again = run();
    for (std::size_t i = 0; i < first.size(); ++i) EXPECT_TRUE(again[i].bitwise_equal(first[i])) << "output " << i;
  }
}

// bf16 storage is the fp32 kernel with each output rounded to nearest even: same bits as rounding
// the fp32 backend's outputs on the same stored inputs.
TEST(CpuBackendBf16, OutputsAreTheFp32ResultsRoundedToNearestEven) {
  const auto bf16 = cpu::make_backend(DType::BF16), fp32 = cpu::make_backend(DType::F32);
  const Tensor x = random_normal({24, 10}, 31, "x").to(DType::BF16),
               w = random_normal({10, 4}, 31, "w").to(DType::BF16);
  const std::vector<std::int64_t> cu{0, 7, 24};
  const auto conv = [&](Backend& be) {
    const Buffer xb = be.upload(x, be.dtype()), wb = be.upload(w, be.dtype()), none;
    const Varlen seqs{cu, be.upload(Tensor::from(cu, {3}), DType::I64)};
    return be.download(be.conv1d({xb, wb, nullptr, seqs, none}));
  };
  const Tensor y16 = conv(*bf16), y32 = conv(*fp32);
  ASSERT_TRUE(gdnv::testing::nontrivial(y32));
  EXPECT_TRUE(y16.bitwise_equal(y32.to(DType::BF16)));
  const Tensor lw = random_normal({5, 10}, 31, "lw").to(DType::BF16);
  const auto lin = [&](Backend& be) {
    return be.download(be.linear(be.upload(x, be.dtype()), be.upload(lw, be.dtype())));
  };
  EXPECT_TRUE(lin(*bf16).bitwise_equal(lin(*fp32).to(DType::BF16)));
}

// ---- chunk stages -------------------------------------------------------------------------------

// The chunk's span map (M, h_ext) reproduces its state update for any entering state S.
template <class C>
void expect_span_map_is_the_state_update(double tol) {
  using namespace cpu;
  const Eigen::Index c = 37, K = 5, V = 4;
  const auto rand = [](Eigen::Index r, Eigen::Index k, const char* s) {
    const Tensor t = random_normal({r, k}, 41, s);
    Mat<C> m(r, k);
    for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = static_cast<C>(t.get(i));
    return m;
  };
  Mat<C> q = rand(c, K, "q"), k = rand(c, K, "k"), v = rand(c, V, "v"), gb = rand(c, 2, "gb");
  k.rowwise().normalize();
  const Vec<C> g = -(gb.col(0).array().exp().log1p()) * C(0.02), beta = 1 / (1 + (-gb.col(1).array()).exp());
  const Chunk<C> x{ConstMatMap<C>(q.data(), c, K), ConstMatMap<C>(k.data(), c, K), ConstMatMap<C>(v.data(), c, V),
                   ConstVecMap<C>(g.data(), c), ConstVecMap<C>(beta.data(), c)};
  const Intra<C> in = ChunkStages<C>::intra(x);
  const SpanMap<C> map = ChunkStages<C>::span_map(in);
  Mat<C> S = rand(K, V, "S");
  const Mat<C> via_map = map.M * S + map.h_ext;
  ChunkStages<C>::advance(in, ChunkStages<C>::new_values(in, S), S);
  ASSERT_GT(in.e_C, 0.3);                                            // the state survives the chunk
  ASSERT_GT((map.M - in.e_C * Mat<C>::Identity(K, K)).norm(), 0.1);  // and the keys move it
  ASSERT_GT(map.h_ext.norm(), 0.1);
  EXPECT_LT((via_map - S).norm() / S.norm(), tol);
}

// fp64: a few roundings of O(1) terms over 37 tokens, ~1e-15; fp32 likewise ~1e-6.
TEST(CpuGdrChunk, SpanMapReproducesTheStateUpdateFp64) { expect_span_map_is_the_state_update<double>(1e-12); }
TEST(CpuGdrChunk, SpanMapReproducesTheStateUpdateFp32) { expect_span_map_is_the_state_update<float>(1e-5); }

// ---- argument errors ----------------------------------------------------------------------------
// The checks every backend shares run on the CPU backend too, in kernel_backend_suite.hpp's
// SuiteErrors; these are the CPU backend's own and those the suite does not repeat.

struct ErrorCase {
  const char* name;
  std::function<void(Backend&)> call;
  std::string message;
};

Buffer f32(Backend& be, Shape shape) { return be.alloc(DType::F32, std::move(shape)); }

std::vector<ErrorCase> error_cases() {
  return {
      {"gather_rows_index_out_of_range",
       [](Backend& be) {
         be.gather_rows(f32(be, {5, 2}), index_buffer(be, {0, 5}));
       },
       "gather_rows: index[1] = 5 is outside [0, 5)"},
      {"scatter_rows_row_mismatch",
       [](Backend& be) {
         Buffer out = f32(be, {4, 3});
         be.scatter_rows(f32(be, {2, 2}), index_buffer(be, {0, 1}), out);
       },
       "scatter_rows: x F32 [2, 2] does not match 2 rows of out F32 [4, 3]"},
      {"rmsnorm_weight_dtype",
       [](Backend& be) {
         be.rmsnorm(f32(be, {3, 4}), be.alloc(DType::BF16, {4}), 1e-6);
       },
       "rmsnorm: w is BF16 [4]; expected F32 [D] = [4]"},
      {"linear_empty_input",
       [](Backend& be) {
         be.linear(Buffer(), f32(be, {2, 3}));
       },
       "linear: x has shape (empty); expected rank 2 [N, in]"},
      {"conv_halo_rows",
       [](Backend& be) {
         const Buffer x = f32(be, {4, 3}), w = f32(be, {3, 4}), halo = f32(be, {2, 3});
         const Varlen seqs{{0, 4}, be.alloc(DType::I64, {2})};
         be.conv1d({x, w, nullptr, seqs, halo});
       },
       "conv1d: halo is F32 [2, 3]; expected F32 [W-1, D] = [3, 3]"},
      {"conv_offsets",
       [](Backend& be) {
         const Buffer x = f32(be, {4, 3}), w = f32(be, {3, 4}), none;
         const Varlen seqs{{0, 3, 2, 4}, be.alloc(DType::I64, {4})};
         be.conv1d({x, w, nullptr, seqs, none});
       },
       "conv1d: sequence offsets [0,3,2,4] must start at 0, not decrease and end at the 4 local tokens"},
      {"gdr_backward_dht_shape",
       [](Backend& be) {
         const Buffer q = f32(be, {4, 1, 3}), v = f32(be, {4, 2, 2}), gate = f32(be, {4, 2}), none;
         const Varlen seqs{{0, 4}, be.alloc(DType::I64, {2})};
         be.gdr_backward({q, q, v, gate, gate, seqs, none, 1.0}, v, f32(be, {2, 2, 3}));
       },
       "gdr_backward: dht is F32 [2, 2, 3]; expected F32 [Hv, dk, dv] = [2, 3, 2]"},
  };
}

void PrintTo(const ErrorCase& c, std::ostream* os) { *os << c.name; }

class CpuBackendErrors : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(CpuBackendErrors, RejectsTheArgumentWithItsMessage) {
  const auto be = cpu::make_backend(DType::F32);
  try {
    GetParam().call(*be);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), GetParam().message);
  }
}

INSTANTIATE_TEST_SUITE_P(Arguments, CpuBackendErrors, ::testing::ValuesIn(error_cases()),
                         [](const auto& p) { return std::string(p.param.name); });

}  // namespace
}  // namespace gdnv::cp
