#pragma once
// The "precision regression" step's baseline (gate/precision_regression.cpp): the step against another
// baseline file, the committed one's path, and the writer `fixtures precision-baseline` runs.
#include <iosfwd>
#include <string>

#include "gate/common.hpp"

namespace gdnv::gate {

// The catalog's deviations from the oracle against the baseline at `baseline_path`.
StepResult precision_regression_against(const StepOptions& options, const std::string& baseline_path);
// The committed baseline in the source tree (fixtures/precision_baseline.json).
std::string committed_precision_baseline();
// Runs the whole catalog and writes its deviations to `path` atomically; a line per step on `log`.
void write_precision_baseline(const std::string& path, std::ostream& log);

}  // namespace gdnv::gate
