#pragma once
// The verdict of a training comparison (docs/DESIGN.md §13): every CP run against
// cp1 in the same dtype, judged by the noise band that a legal reordering of cp1 alone produces, and
// against the fp64 oracle trajectory.
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "train/trainer.hpp"

namespace gdnv::train {

// Per-step |loss_a - loss_b| over the steps both have.
std::vector<double> loss_gaps(const Trajectory& a, const Trajectory& b);

struct NoiseBand {
  double max = 0, mean = 0;  // of cp1-reordered vs cp1, per step
  double floor = 0;          // where one rounding per counted token's logits is larger (see noise_floor)
  double limit = 0;          // K max(max, floor): what a mode's per-step |dloss| may reach
};

// The smallest band worth stating for `dtype`: one rounding (unit roundoff u) of every counted token's
// CE, with random signs, moves the mean over N tokens by u loss / sqrt(N).
double noise_floor(DType dtype, const Trajectory& cp1);
NoiseBand noise_band(DType dtype, const Trajectory& cp1, const Trajectory& reordered);

struct ModeVerdict {
  std::string mode, cp;
  bool pass = true;
  double max_gap = 0, mean_gap = 0;         // per-step |loss - loss_cp1|
  double limit = 0;                         // what max_gap may reach
  double oracle_dev = 0, oracle_limit = 0;  // max per-step |loss - loss_oracle| and its limit
  std::string why;                          // the first rule broken, with numbers; empty on a pass
};

struct Comparison {
  DType dtype = DType::BF16;
  Trajectory cp1, reordered, oracle;
  std::vector<Trajectory> modes;
  NoiseBand band;
  double cp1_oracle_dev = 0;
  std::vector<ModeVerdict> verdicts;  // one per mode run
  bool pass = true;
  std::string why;  // a failure of the comparison itself (cp1 against the oracle's data); empty otherwise
};

// K, the multiple of the noise band a CP run's max per-step |dloss| vs cp1 may reach (bf16 and fp32). A
// legal CP run and the reordered cp1 differ from cp1 only by reordered roundings, carried by the same
// training dynamics, so their gaps are of one size; K bounds how far apart two such draws fall. Measured
// (bf16, 8 steps, lr 3e-3, seeds 0-5, every mode static and dynamic at W = 4): the largest ratio of a run's
// max |dloss| to max(band, floor) is 1.92 (all_gather@1/2/4 at the gate's size; 1.60 at `train`'s
// defaults; 2.67 with a dynamic-CP per-rank budget of B/W); twice the largest, 5.3, rounded up to 6, and
// never below 4 (a ratio of two maxima over few steps).
inline constexpr double kBandFactor = 6.0;

// The factor on cp1's own deviation from the oracle (floored by the noise floor): the probe's rule.
inline constexpr double kOracleFactor = 4.0;
// fp64: every run equals cp1 to this relative difference at every step (loss and gradient norm).
inline constexpr double kFp64Relative = 1e-10;

// An empty `oracle` (no steps) skips the checks against it: fp64 runs are judged against cp1 alone.
Comparison judge(DType dtype, Trajectory cp1, Trajectory reordered, Trajectory oracle, std::vector<Trajectory> modes);

// What one comparison runs: cp1 and cp1-reordered on `base` (its dtype, seed, model and data), and each
// of `modes` (headwise, chunkwise, all_gather; "cp1" is always run and may be listed) at base.cp, and, with
// `dynamic`, again under dynamic CP over those sizes.
struct ComparisonPlan {
  TrainSpec base;
  std::vector<TrainMode> modes;
  std::vector<int> dynamic;
};
std::vector<TrainSpec> mode_runs(const ComparisonPlan& plan);
// How a run is carried out: train_in_process, or the MPI world's (cli/train.cpp).
using Runner = std::function<Trajectory(const TrainSpec&)>;
// Runs the plan and judges it against `oracle` (oracle_trajectory of plan.base).
Comparison compare(const ComparisonPlan& plan, const Trajectory& oracle, const Runner& runner = train_in_process);

}  // namespace gdnv::train
