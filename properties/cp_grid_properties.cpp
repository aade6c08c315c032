// GdnCpLayer on the TP x CP grid and with dynamic CP: micro-batches of CP sizes 1, 2 and 4 inside a
// static group of 4 match the oracle in every mode (a CP=1 micro-batch takes the plain path and does
// no collective), on one packing and each on its own packing padded for its own CP size only, and
// TP-sharded runs reproduce tp=1 in every mode.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "faults/registry.hpp"
#include "properties/cp_testing.hpp"

namespace gdnv::cp {
using namespace harness;
namespace {

using namespace gdnv::cp::testing;

void check_dynamic_cp() {
  Geometry g = *gen_geometry(false);
  g.W = 4;
  g.Hk = 4 * g.tp;
  g.lengths = gen_lengths(4, 3);  // multiples of 8: divisible by 2c for every c in {1, 2, 4}
  const std::vector<int> sizes =
      *rc::gen::element(std::vector<int>{1, 2, 4}, std::vector<int>{4, 1, 2}, std::vector<int>{2, 4, 1});
  const auto seed = *rc::gen::inRange<std::uint64_t>(0, 1000);
  RC_LOG() << g << " seed=" << seed << "\n";
  const Judge judge(spec_of(g, CpMode::Headwise, DType::F64, seed));
  for (CpMode mode : kModes) {
    RunSpec spec = spec_of(g, mode, DType::F64, seed);
    spec.cp.dynamic_cp = {1, 2};
    spec.micro_batches = sizes;
    for (const auto& run : run_and_check(judge, spec))
      if (run.cp_size == 1 && g.tp == 1) RC_ASSERT(run.forward.calls() + run.backward.calls() == 0u);
  }
}

RC_GTEST_PROP(CpGrid, DynamicCpMicroBatchesMatchOracleInEveryMode, ()) { check_dynamic_cp(); }

// Micro-batch c's own lengths, legal at CP size c but not at the static 4 when c < 4: odd multiples of
// 2c (c = 2: 4, 12, 20, 28), odd lengths from 3 at c = 1 (gen_lengths says why not 1); multiples of 8 at
// c = 4.
std::vector<std::int64_t> gen_own_packing(int c) {
  if (c == 4) return gen_lengths(4, 3);
  std::vector<std::int64_t> lengths(static_cast<std::size_t>(*rc::gen::inRange(1, 4)));
  for (auto& L : lengths) {
    const std::int64_t odd = 2 * *rc::gen::inRange<std::int64_t>(0, 4) + 1;  // 1, 3, 5, 7
    L = c == 1 ? odd + 2 : 2 * c * odd;
  }
  return lengths;
}

// Each micro-batch on its own inputs and packing, validated and judged at its own CP size.
void check_dynamic_cp_own_packings() {
  Geometry g = *gen_geometry(false);
  g.W = 4;
  g.Hk = 4 * g.tp;
  const std::vector<int> sizes =
      *rc::gen::element(std::vector<int>{4, 2, 1}, std::vector<int>{1, 4, 2}, std::vector<int>{2, 1, 4});
  const auto seed = *rc::gen::inRange<std::uint64_t>(0, 1000);
  RunSpec base = spec_of(g, CpMode::Headwise, DType::F64, seed);
  base.micro_batches = sizes;
  for (int c : sizes) base.micro_batch_lengths.push_back(gen_own_packing(c));
  RC_LOG() << g << " seed=" << seed << " packings:";
  for (const auto& lengths : base.micro_batch_lengths) {
    for (auto L : lengths) RC_LOG() << " " << L;
    RC_LOG() << " |";
  }
  RC_LOG() << "\n";
  const std::vector<Case> cases = make_cases(base);
  std::vector<Judge> judges;
  for (const Case& k : cases) judges.emplace_back(k, DType::F64);
  for (CpMode mode : kModes) {
    RunSpec spec = base;
    spec.cp.mode = mode;
    spec.cp.dynamic_cp = {1, 2};
    validate_run(spec);
    const auto runs = run_in_process(spec, cases, cpu::make_backend);
    RC_ASSERT(runs.size() == cases.size());
    for (std::size_t m = 0; m < runs.size(); ++m)
      judges[m].check(runs[m].answer, std::string(mode_name(mode)) + " micro-batch " + std::to_string(m + 1) +
                                          " cp=" + std::to_string(runs[m].cp_size));
  }
}

RC_GTEST_PROP(CpGrid, DynamicCpMicroBatchesOnTheirOwnPackingsMatchOracleInEveryMode, ()) {
  check_dynamic_cp_own_packings();
}

// fp64 sums reordered by the TP all-reduces: each differs by a few ulps of its largest term, eps =
// 1.1e-16 times a condition <= 1e3 (the A_log and dt_bias gradients are sums over every token with
// cancellation) ~ 1e-13 relative; 1e-12 leaves a margin and still sees any real sharding bug.
RC_GTEST_PROP(CpGrid, TpShardsReproduceTp1InEveryMode, ()) {
  Geometry g = *gen_geometry(true);
  g.tp = 2;
  g.Hk = 2 * g.W * *rc::gen::element<std::int64_t>(1, 2);
  const auto seed = *rc::gen::inRange<std::uint64_t>(0, 1000);
  RC_LOG() << g << " seed=" << seed << "\n";
  for (CpMode mode : kModes) {
    if (!legal(g, mode)) continue;
    const RunSpec tp2 = spec_of(g, mode, DType::F64, seed);
    RunSpec tp1 = tp2;
    tp1.cp.tp = 1;
    const Case k = make_case(tp2);
    const Answer a2 = run_in_process(tp2, k, cpu::make_backend).front().answer;
    const Answer a1 = run_in_process(tp1, k, cpu::make_backend).front().answer;
    for (const auto& [name, one, two] : pairs(a1, a2)) {
      const double rel = compare(one, two).rel_rms;
      if (!(rel < 1e-12))
        RC_FAIL(std::string(mode_name(mode)) + " tp=2 vs tp=1, " + name + ": rel_rms " + std::to_string(rel));
    }
  }
}

TEST(CpGridMutants, DynamicCpSuiteFailsWhenMicroBatchesUseTheStaticGroup) {
  const ScopedFault planted(Fault::DynamicCpUsesStaticGroup);
  EXPECT_FALSE(rc::check("dynamic CP matches the oracle", [] { check_dynamic_cp(); }));
  EXPECT_FALSE(rc::check("dynamic CP on own packings matches the oracle", [] { check_dynamic_cp_own_packings(); }));
}

}  // namespace
}  // namespace gdnv::cp
