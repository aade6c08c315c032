// The gate's "precision rules" and "communicator semantics" steps (gate/precision_rules.cpp,
// gate/communicator_semantics.cpp): each passes on the implementation as it is, and each planted fault of their class
// fails its step, in the case that names the rule it breaks, while that case passes without the fault.
#include <gtest/gtest.h>

#include "faults/registry.hpp"
#include "gate/steps.hpp"

namespace gdnv::gate {
namespace {

TEST(PrecisionRulesStep, PassesOnTheCpuAndEmulatedBackendsAtFp32AndBf16) {
  const StepResult r = precision_rules.run({});
  EXPECT_TRUE(r.skip_reason.empty()) << r.skip_reason;
  EXPECT_GE(r.cases, 21);  // cpu and emu x fp32, bf16 x 5 rules, the emu kernels (cuda's too where usable)
  EXPECT_EQ(r.failed, 0) << r.detail;
}

TEST(CommunicatorSemanticsStep, PassesEverySumAndEveryRanksBytes) {
  const StepResult r = communicator_semantics.run({});
  // W 2..8 x dtypes x (3 sums + determinism); W 2..8 x 5 partitions; modes x W x dtypes
  EXPECT_EQ(r.cases, 7 * 3 * 4 + 7 * 5 + 3 * 2 * 2);
  EXPECT_EQ(r.failed, 0) << r.detail;
}

struct Planted {
  Fault fault;
  const Step* step;
  const char* label;  // a case of the step that the fault must fail
};

void PrintTo(const Planted& p, std::ostream* os) { *os << fault_name(p.fault) << " / " << p.label; }

class StepUnderFault : public ::testing::TestWithParam<Planted> {};

TEST_P(StepUnderFault, QuickStepFails) {
  const ScopedFault fault(GetParam().fault);
  const StepResult r = GetParam().step->run({true, ""});
  EXPECT_GT(r.failed, 0) << "no case failed of " << r.cases;
}

TEST_P(StepUnderFault, TheRulesCaseFailsUnderTheFaultAndPassesWithout) {
  const StepOptions only{false, GetParam().label};
  const StepResult clean = GetParam().step->run(only);
  ASSERT_EQ(clean.cases, 1) << "no case '" << GetParam().label << "'";
  EXPECT_EQ(clean.failed, 0) << clean.detail;
  const ScopedFault fault(GetParam().fault);
  const StepResult r = GetParam().step->run(only);
  EXPECT_EQ(r.failed, 1) << "the case passes under the fault";
}

INSTANTIATE_TEST_SUITE_P(
    PlantedFaults, StepUnderFault,
    ::testing::Values(
        Planted{Fault::GateBf16BeforeExp, &precision_rules, "cpu bf16 gates"},
        Planted{Fault::RmsnormFastRsqrt, &precision_rules, "cpu fp32 parameter gradients"},
        Planted{Fault::RmsnormFastRsqrt, &precision_rules, "emu bf16 parameter gradients"},
        Planted{Fault::GateBf16BeforeExp, &precision_rules, "emu bf16 gates"},
        Planted{Fault::DecayCumsumFp32, &precision_rules, "cpu fp32 decay chain"},
        Planted{Fault::DecayCumsumFp32, &precision_rules, "emu bf16 decay chain"},
        Planted{Fault::GpuLinearDxAccumulates, &precision_rules, "emu kernels overwrite reused outputs"},
        Planted{Fault::GpuConvHaloGradPastFirstSequence, &precision_rules, "emu fp32 conv halo short sequences"},
        Planted{Fault::ReduceRoundsPerHop, &communicator_semantics, "all_reduce BF16 W=3 rank-ordered sum"},
        Planted{Fault::ReduceRoundsPerHop, &communicator_semantics, "reduce_scatter_v BF16 W=8 rank-ordered sum"},
        Planted{Fault::ReduceOwnRankFirst, &communicator_semantics,
                "all_reduce F32 W=5 same bits on every rank and call"},
        Planted{Fault::ReduceOwnRankFirst, &communicator_semantics, "reduce_scatter F64 W=4 rank-ordered sum"},
        Planted{Fault::GradAllreduceBf16, &communicator_semantics,
                "all_gather W=4 BF16 thd bytes against the cost model"},
        Planted{Fault::HaloGathersWholeSpan, &communicator_semantics,
                "chunkwise W=2 F32 thd bytes against the cost model"}));

}  // namespace
}  // namespace gdnv::gate
