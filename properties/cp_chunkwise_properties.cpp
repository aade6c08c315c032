// Chunkwise CP's hard cases against the fp64 oracle: contiguous spans shorter than the conv halo (the
// halo reaches several ranks back, which FLA does not handle), and long span-map folds (W = 8, weak
// gates: the fp32 (M, h_ext) fold carries the state over every rank).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>

#include "faults/registry.hpp"
#include "properties/cp_testing.hpp"

namespace gdnv::cp {
using namespace harness;
namespace {

using namespace gdnv::cp::testing;

// One or two sequences of 2W tokens: spans of 2 or 4 tokens against a halo of 3 or 4.
void check_short_spans() {
  Geometry g = *gen_geometry(false);
  g.W = *rc::gen::element(2, 3, 4, 8);
  g.Hk = g.tp * *rc::gen::element<std::int64_t>(1, 2);  // chunkwise needs Hk % tp == 0 only
  g.conv = *rc::gen::element<std::int64_t>(4, 5);
  g.lengths.assign(static_cast<std::size_t>(*rc::gen::inRange(1, 3)), 2 * g.W);
  const DType dtype = *rc::gen::element(DType::F64, DType::F32);
  const auto seed = *rc::gen::inRange<std::uint64_t>(0, 1000);
  RC_LOG() << g << " " << dtype_name(dtype) << " seed=" << seed << "\n";
  const RunSpec spec = spec_of(g, CpMode::Chunkwise, dtype, seed);
  run_and_check(Judge(spec), spec);
}

RC_GTEST_PROP(Chunkwise, SpansShorterThanTheConvHaloMatchOracle, ()) { check_short_spans(); }

// W = 8 with weak gates: the state entering rank 7 is the fold of seven maps.
RC_GTEST_PROP(Chunkwise, LongFp32SpanMapFoldsStayWithin4xHeadwise, ()) {
  Geometry g = *gen_geometry(false);
  g.W = 8;
  g.tp = 1;
  g.Hk = 8;  // headwise, the reference deviation, needs Hk % 8 == 0
  g.group = 1;
  g.gates = GateRegime::Weak;
  g.lengths = {16 * *rc::gen::inRange<std::int64_t>(2, 7)};
  if (*rc::gen::arbitrary<bool>()) g.lengths.push_back(16 * *rc::gen::inRange<std::int64_t>(1, 4));
  const auto seed = *rc::gen::inRange<std::uint64_t>(0, 1000);
  RC_LOG() << g << " seed=" << seed << "\n";
  const Judge judge(spec_of(g, CpMode::Headwise, DType::F32, seed));
  std::vector<std::map<std::string, double>> chunk, head;
  run_and_check(judge, spec_of(g, CpMode::Chunkwise, DType::F32, seed), &chunk);
  run_and_check(judge, spec_of(g, CpMode::Headwise, DType::F32, seed), &head);
  for (const auto& [name, rel] : chunk.front()) RC_ASSERT(rel <= 4.0 * std::max(head.front().at(name), 1e-6));
}

TEST(ChunkwiseMutants, ShortSpanSuiteFailsUnderEachChunkwiseFault) {
  for (Fault f :
       {Fault::ChunkwiseBf16StateChain, Fault::ConvHaloWrongRank, Fault::ConvHaloOneRank, Fault::RouteOffByOne}) {
    const ScopedFault planted(f);
    EXPECT_FALSE(rc::check("chunkwise short spans match the oracle under a planted fault", [] { check_short_spans(); }))
        << fault_name(f) << " not caught";
  }
}

}  // namespace
}  // namespace gdnv::cp
