#include "train/verdict.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace gdnv::train {
namespace {

double max_of(const std::vector<double>& v) { return v.empty() ? 0 : *std::max_element(v.begin(), v.end()); }
double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

std::string sci(double x) {
  std::ostringstream o;
  o.precision(3);
  o << std::scientific << x;
  return o.str();
}

// The first step whose effective tokens differ from `ref`'s, as a message; empty when none does.
std::string token_mismatch(const Trajectory& run, const Trajectory& ref) {
  for (std::size_t t = 0; t < std::min(run.steps.size(), ref.steps.size()); ++t)
    if (run.steps[t].effective_tokens != ref.steps[t].effective_tokens)
      return "step " + std::to_string(t) + ": " + std::to_string(run.steps[t].effective_tokens) +
             " effective tokens, " + ref.mode + " " + std::to_string(ref.steps[t].effective_tokens);
  return run.steps.size() == ref.steps.size() ? ""
                                              : "ran " + std::to_string(run.steps.size()) + " steps, " + ref.mode +
                                                    " " + std::to_string(ref.steps.size());
}

// fp64: the first step where loss or gradient norm differ from cp1's by more than kFp64Relative.
std::string fp64_mismatch(const Trajectory& run, const Trajectory& cp1) {
  for (std::size_t t = 0; t < std::min(run.steps.size(), cp1.steps.size()); ++t) {
    const StepRecord &a = run.steps[t], &b = cp1.steps[t];
    const double dl = std::abs(a.loss - b.loss) / std::abs(b.loss);
    const double dg = std::abs(a.grad_norm - b.grad_norm) / std::max(std::abs(b.grad_norm), 1e-300);
    if (!(dl <= kFp64Relative) || !(dg <= kFp64Relative))
      return "step " + std::to_string(t) + ": loss " + sci(a.loss) + " vs cp1 " + sci(b.loss) + " (relative " +
             sci(dl) + "), grad_norm relative " + sci(dg) + " > " + sci(kFp64Relative);
  }
  return "";
}

}  // namespace

std::vector<double> loss_gaps(const Trajectory& a, const Trajectory& b) {
  std::vector<double> gaps;
  for (std::size_t t = 0; t < std::min(a.steps.size(), b.steps.size()); ++t)
    gaps.push_back(std::abs(a.steps[t].loss - b.steps[t].loss));
  return gaps;
}

double noise_floor(DType dtype, const Trajectory& cp1) {
  if (cp1.steps.empty()) return 0;
  const double u = dtype == DType::BF16 ? 0x1.0p-9 : dtype == DType::F32 ? 0x1.0p-24 : 0x1.0p-53;
  const StepRecord& first = cp1.steps.front();
  return u * std::abs(first.loss) / std::sqrt(static_cast<double>(std::max<std::int64_t>(1, first.effective_tokens)));
}

NoiseBand noise_band(DType dtype, const Trajectory& cp1, const Trajectory& reordered) {
  const std::vector<double> gaps = loss_gaps(reordered, cp1);
  NoiseBand b{max_of(gaps), mean_of(gaps), noise_floor(dtype, cp1), 0};
  b.limit = kBandFactor * std::max(b.max, b.floor);
  return b;
}

Comparison judge(DType dtype, Trajectory cp1, Trajectory reordered, Trajectory oracle, std::vector<Trajectory> modes) {
  Comparison c{dtype, std::move(cp1), std::move(reordered), std::move(oracle), std::move(modes), {}, 0, {}, true, {}};
  c.band = noise_band(dtype, c.cp1, c.reordered);
  c.cp1_oracle_dev = max_of(loss_gaps(c.cp1, c.oracle));
  const double oracle_limit = kOracleFactor * std::max(c.cp1_oracle_dev, c.band.floor);
  for (const Trajectory& run : c.modes) {
    ModeVerdict v{run.mode, run.cp, true, 0, 0, c.band.limit, 0, oracle_limit, ""};
    const std::vector<double> gaps = loss_gaps(run, c.cp1);
    v.max_gap = max_of(gaps);
    v.mean_gap = mean_of(gaps);
    v.oracle_dev = max_of(loss_gaps(run, c.oracle));
    if (const std::string m = token_mismatch(run, c.cp1); !m.empty()) {
      v.why = "effective tokens differ from cp1's at " + m;
    } else if (dtype == DType::F64) {
      v.limit = kFp64Relative;
      v.why = fp64_mismatch(run, c.cp1);
    } else if (!(v.max_gap <= v.limit)) {
      v.why = "max per-step |dloss| vs cp1 " + sci(v.max_gap) + " > " + sci(kBandFactor) + " x noise band " +
              sci(std::max(c.band.max, c.band.floor)) + " = " + sci(v.limit);
    } else if (!c.oracle.steps.empty() && !(v.oracle_dev <= oracle_limit)) {
      v.why = "max per-step |loss - oracle| " + sci(v.oracle_dev) + " > " + sci(kOracleFactor) + " x cp1's " +
              sci(std::max(c.cp1_oracle_dev, c.band.floor)) + " = " + sci(oracle_limit);
    }
    v.pass = v.why.empty();
    c.pass = c.pass && v.pass;
    c.verdicts.push_back(v);
  }
  if (const std::string m = token_mismatch(c.cp1, c.oracle); !c.oracle.steps.empty() && !m.empty()) {
    c.pass = false;
    c.why = "cp1's effective tokens differ from the oracle's at " + m;
  }
  return c;
}

std::vector<TrainSpec> mode_runs(const ComparisonPlan& plan) {
  std::vector<TrainSpec> runs;
  for (const TrainMode mode : plan.modes) {
    if (mode == TrainMode::Cp1) continue;
    TrainSpec s = plan.base;
    s.mode = mode;
    s.dynamic.clear();
    runs.push_back(s);
    if (plan.dynamic.empty()) continue;
    s.dynamic = plan.dynamic;
    runs.push_back(s);
  }
  return runs;
}

Comparison compare(const ComparisonPlan& plan, const Trajectory& oracle, const Runner& runner) {
  TrainSpec cp1 = plan.base;
  cp1.mode = TrainMode::Cp1;
  cp1.dynamic.clear();
  TrainSpec reordered = cp1;
  reordered.reordered = true;
  Trajectory band = runner(reordered);
  band.mode = "cp1-reordered";
  std::vector<Trajectory> modes;
  for (const TrainSpec& s : mode_runs(plan)) modes.push_back(runner(s));
  return judge(plan.base.dtype, runner(cp1), std::move(band), oracle, std::move(modes));
}

}  // namespace gdnv::train
