#pragma once
// The gate's report for CI systems: each step's row as JUnit XML (cli/gate.cpp prints the same rows as a
// table).
#include <string>
#include <vector>

#include "gate/common.hpp"

namespace gdnv::gate {

// One step as the gate ran it.
struct StepRow {
  std::string name;
  StepResult result;
  double seconds;
  const char* verdict() const { return !result.skip_reason.empty() ? "skip" : result.failed ? "FAIL" : "pass"; }
};

// One testsuite: per step, a testcase for the step (its skip, or its failure when no case names it) and one
// testcase per failing case, named by the case's label with the command that reproduces it alone, so a
// CI page names the case. What GitLab, Jenkins and GitHub render.
std::string junit_xml(const std::vector<StepRow>& rows, double total);

}  // namespace gdnv::gate
