#pragma once
// The steps of `gdn-verify gate`, in the order it runs them. Each returns how many cases it checked,
// how many failed (with the first failure's detail), or that it was skipped and why.
#include <functional>
#include <string>
#include <vector>

namespace gdnv::cli {

struct StepResult {
  int cases = 0;
  int failed = 0;
  std::string detail;       // the first failure
  std::string skip_reason;  // non-empty: the step could not run here (never a pass)

  // Counts one case; a failure keeps the first detail.
  void check(bool ok, const std::string& what) {
    ++cases;
    if (ok) return;
    ++failed;
    if (detail.empty()) detail = what;
  }
};

struct GateStep {
  std::string name;
  std::function<StepResult(bool quick)> run;
};

const std::vector<GateStep>& gate_steps();

// Steps by theme (cli/gate_steps_*.cpp).
StepResult safetensors_round_trip(bool quick);
StepResult reference_vectors(bool quick);
StepResult oracle_self_checks(bool quick);
StepResult layout_properties(bool quick);
StepResult cp_mode_matrix(bool quick);
StepResult illegal_combinations(bool quick);
StepResult probe_self_compare(bool quick);
StepResult gpu_mode_matrix(bool quick);

}  // namespace gdnv::cli
