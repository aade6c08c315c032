// Properties of the CPU backend over generated geometry, for each storage dtype: the chunked gated
// delta rule and the conv (with and without a halo) match the fp64 oracle on the same stored inputs
// within the tolerances of tests/cpu_backend_testing.hpp, and row gather/scatter round-trips exactly.
#include <numeric>

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "cpu/backend.hpp"
#include "tests/cpu_backend_testing.hpp"

namespace gdnv::cp {
namespace {

using gdnv::testing::Gates;

rc::Gen<DType> gen_storage() { return rc::gen::element(DType::F64, DType::F32, DType::BF16); }

// Packed sequence offsets; lengths biased to the chunk boundaries of C = 64 and to 1.
rc::Gen<std::vector<std::int64_t>> gen_offsets(std::int64_t max_len) {
  return rc::gen::exec([max_len] {
    const auto n = *rc::gen::inRange(1, 4);
    std::vector<std::int64_t> cu{0};
    for (int i = 0; i < n; ++i)
      cu.push_back(cu.back() + *rc::gen::oneOf(rc::gen::element<std::int64_t>(1, 63, 64, 65),
                                               rc::gen::inRange<std::int64_t>(1, max_len + 1)));
    return cu;
  });
}

void assert_all(const gdnv::testing::Results& results) {
  for (const auto& r : results) {
    RC_LOG() << r.message() << "\n";
    if (!r) RC_FAIL(r.message());
  }
}

RC_GTEST_PROP(CpuBackendProperties, GdrMatchesTheRecurrentOracleOnRandomPackedSequences, ()) {
  gdnv::testing::GdrCase c;
  const DType storage = *gen_storage();
  c.cu = *gen_offsets(140);
  c.Hk = *rc::gen::inRange<std::int64_t>(1, 4);
  c.Hv = c.Hk * *rc::gen::element<std::int64_t>(1, 2, 4);
  // K >= 2: for K = 1 the L2 norm maps q to sign(q) and dq is a cancellation of O(1) terms to O(eps).
  c.K = *rc::gen::inRange<std::int64_t>(2, 18);
  c.V = *rc::gen::inRange<std::int64_t>(1, 18);
  c.h0 = *rc::gen::arbitrary<bool>();
  c.dht = *rc::gen::arbitrary<bool>();
  c.gates = *rc::gen::element(Gates::LogSigmoidTau01, Gates::LogSigmoidTau1, Gates::LogSigmoidTau10, Gates::Zero,
                              Gates::StronglyNegative);
  c.seed = *rc::gen::inRange<std::uint64_t>(0, 1000000);
  RC_PRE(c.cu.back() * c.Hv >= 2);  // dg and dbeta of one element would be constant: nothing to compare
  // Every sequence one token long from a zero state: no state to decay, dg is exactly zero.
  RC_PRE(c.h0 || c.cu.back() > static_cast<std::int64_t>(c.cu.size()) - 1);
  RC_LOG() << dtype_name(storage) << " N=" << c.cu.back() << " Hk=" << c.Hk << " Hv=" << c.Hv << " K=" << c.K
           << " V=" << c.V << "\n";
  assert_all(gdnv::testing::compare_gdr(*cpu::make_backend(storage), c));
}

RC_GTEST_PROP(CpuBackendProperties, SpanMapsAndTheirFoldsMatchTheOracle, ()) {
  gdnv::testing::GdrCase c;
  const DType storage = *gen_storage();
  c.cu = *gen_offsets(140);
  c.Hk = *rc::gen::inRange<std::int64_t>(1, 3);
  c.Hv = c.Hk * *rc::gen::element<std::int64_t>(1, 2);
  c.K = *rc::gen::inRange<std::int64_t>(2, 12);
  c.V = *rc::gen::inRange<std::int64_t>(1, 12);
  c.gates = *rc::gen::element(Gates::LogSigmoidTau01, Gates::LogSigmoidTau1, Gates::Zero, Gates::StronglyNegative);
  c.seed = *rc::gen::inRange<std::uint64_t>(0, 1000000);
  RC_LOG() << dtype_name(storage) << " cu.size=" << c.cu.size() << " N=" << c.cu.back() << " Hv=" << c.Hv
           << " K=" << c.K << " V=" << c.V << "\n";
  assert_all(gdnv::testing::compare_span_maps(*cpu::make_backend(storage), c));
}

RC_GTEST_PROP(CpuBackendProperties, ConvMatchesTheOracleOfTheConcatenationWithTheHalo, ()) {
  gdnv::testing::ConvCase c;
  const DType storage = *gen_storage();
  c.cu = *gen_offsets(20);
  c.D = *rc::gen::inRange<std::int64_t>(2, 13);  // D >= 2: a single-channel dbias would be constant
  c.W = *rc::gen::inRange<std::int64_t>(1, 6);
  c.bias = *rc::gen::arbitrary<bool>();
  c.halo = c.W >= 2 && *rc::gen::arbitrary<bool>();  // W = 1 reads no earlier token: no halo
  c.seed = *rc::gen::inRange<std::uint64_t>(0, 1000000);
  assert_all(gdnv::testing::compare_conv(*cpu::make_backend(storage), c));
}

RC_GTEST_PROP(CpuBackendProperties, ScatterRowsUndoesGatherRowsOfAPermutation, ()) {
  const auto be = cpu::make_backend(DType::F32);
  const auto rows = *rc::gen::inRange<std::int64_t>(1, 40), width = *rc::gen::inRange<std::int64_t>(1, 9);
  const DType dtype = *rc::gen::element(DType::F64, DType::F32, DType::BF16, DType::I64);
  std::vector<std::int64_t> perm(static_cast<std::size_t>(rows));
  std::iota(perm.begin(), perm.end(), 0);
  for (std::int64_t i = rows - 1; i > 0; --i)  // Fisher-Yates
    std::swap(perm[static_cast<std::size_t>(i)],
              perm[static_cast<std::size_t>(*rc::gen::inRange<std::int64_t>(0, i + 1))]);
  const Tensor x = gdnv::testing::random_normal({rows, width}, static_cast<std::uint64_t>(rows), "x").to(dtype);
  const Buffer index = be->upload(Tensor::from(perm, {rows}), DType::I64);
  const Buffer gathered = be->gather_rows(be->upload(x, dtype), index);
  Buffer back = be->alloc(dtype, {rows, width});
  be->scatter_rows(gathered, index, back);
  RC_ASSERT(be->download(back).bitwise_equal(x));
  RC_ASSERT(be->download(gathered).get(0) == x.get(perm[0] * width));
}

}  // namespace
}  // namespace gdnv::cp
