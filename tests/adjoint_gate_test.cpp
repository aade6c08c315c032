// The gate's "adjoint dot-products" step (gate/adjoint_dot_products.cpp): it passes on the implementation as
// it is, and each planted fault in a hand-written backward (docs/DESIGN.md §10) fails it, in the full
// matrix and in the --quick one, with a first failing case that reproduces alone.
#include <string>

#include <gtest/gtest.h>

#include "faults/registry.hpp"
#include "gate/steps.hpp"

namespace gdnv {
namespace {

using gate::adjoint_dot_products;
using gate::StepOptions;

TEST(AdjointDotProducts, PassWithNoFaultPlanted) {
  for (const bool quick : {false, true}) {
    const gate::StepResult r = adjoint_dot_products.run(StepOptions{quick, ""});
    EXPECT_GT(r.cases, 0);
    EXPECT_EQ(r.failed, 0) << r.detail;
  }
}

TEST(AdjointDotProducts, QuickMatrixIsSmallerThanTheFullOne) {
  EXPECT_LT(adjoint_dot_products.run(StepOptions{true, ""}).cases,
            adjoint_dot_products.run(StepOptions{false, ""}).cases);
}

// The fault's name without underscores (a gtest parameter name is alphanumeric).
std::string named_by_fault(const ::testing::TestParamInfo<Fault>& param) {
  std::string name(fault_name(param.param));
  std::erase(name, '_');
  return name;
}

class AdjointUnderFault : public ::testing::TestWithParam<Fault> {};

TEST_P(AdjointUnderFault, QuickAndFullStepFailAndTheFirstFailureReproducesAlone) {
  const ScopedFault fault(GetParam());
  for (const bool quick : {false, true}) {
    const gate::StepResult r = adjoint_dot_products.run(StepOptions{quick, ""});
    ASSERT_GT(r.failed, 0) << fault_name(GetParam()) << (quick ? " --quick" : "");
    const gate::StepResult alone = adjoint_dot_products.run(StepOptions{false, r.label});
    EXPECT_EQ(alone.cases, 1) << r.label;
    EXPECT_EQ(alone.failed, 1) << r.label;
  }
}

INSTANTIATE_TEST_SUITE_P(PlantedFaults, AdjointUnderFault,
                         ::testing::Values(Fault::BackwardSpanMapUntransposed, Fault::HaloGradPreviousRankOnly,
                                           Fault::RouteReturnUninverted, Fault::AllGatherGradNaturalOrder,
                                           Fault::AllGatherNoReduceScatter),
                         named_by_fault);

}  // namespace
}  // namespace gdnv
