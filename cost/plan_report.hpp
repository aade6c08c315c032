#pragma once
// gdn-verify plan's report (cli/plan.cpp): the busiest rank's cost of each CP mode as a table, its
// collectives in nccl-tests' columns, a sweep over a grid, CSV and a gnuplot SVG.
#include <ostream>
#include <string>
#include <vector>

#include "cost/cost.hpp"
#include "cost/roofline.hpp"

namespace gdnv::cost {

// One mode at one grid point and micro-batch: the busiest rank's cost, or why the mode is illegal.
struct PlanRow {
  int cp = 0, mb_cp = 0, micro_batch = 0;
  std::int64_t tokens = 0;
  cp::CpMode mode{};
  std::string illegal;  // run's message; empty when legal
  int world_rank = 0;
  RankCost cost;
  PhaseTime fwd, bwd;
  double total_s() const { return fwd.total() + bwd.total(); }
};

// Per mode and direction: the traffic of each collective kind, host syncs, GFLOP, saved activations, the
// modeled times; then the fastest legal mode over `layers` layers.
void print_plan_table(const std::vector<PlanRow>& rows, int layers, std::ostream& out);
// nccl-tests' columns for the busiest rank's collectives, per mode, direction, kind and group.
void print_plan_collectives(const std::vector<PlanRow>& rows, const HardwareProfile& hw, int tp, std::ostream& out);
// One line per grid point and mode.
void print_plan_sweep(const std::vector<PlanRow>& rows, std::ostream& out);
// Every row, every counter, as CSV.
std::string plan_csv(const std::vector<PlanRow>& rows, int tp);
// The SVG text of total ms per layer against tokens, one line per (mode, static CP size); `path` names the
// output in gnuplot's errors.
std::string plan_svg(const std::vector<PlanRow>& rows, const std::string& path);

}  // namespace gdnv::cost
