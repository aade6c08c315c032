// bench_train: the training-equivalence runs (docs/DESIGN.md §13) end to end.
//   BM_TrainGateStep  the gate's "training equivalence" step, full matrix (2 layers, 8 steps, static W = 4 and
//                     dynamic {1, 2, 4}, bf16 and fp64): budget 20 s on the project's 2-core machine.
//   BM_TrainDemo      4 layers, hidden 128 (Hk 4, Hv 8, dk = dv = 16), 50 steps, every mode at static W = 4, bf16
//                     (`gdn-verify train --layers 4 --hidden 128 --num-value-heads 8 --key-head-dim 16
//                     --value-head-dim 16 --steps 50`): budget 3 minutes. Counters: the
//                     loss drop of cp1 over the run (first loss minus last), the noise band (max and mean
//                     per-step |dloss|), the largest run's max |dloss| vs cp1, and whether the verdict passed.
// One iteration each: a run is seconds to minutes.
#include <algorithm>

#include <benchmark/benchmark.h>

#include "gate/steps.hpp"
#include "train/oracle.hpp"
#include "train/verdict.hpp"

namespace gdnv::train {
namespace {

void BM_TrainGateStep(benchmark::State& state) {
  for (auto _ : state) {
    const gate::StepResult r = gate::training_equivalence.run(gate::StepOptions{});
    state.counters["cases"] = r.cases;
    state.counters["failed"] = r.failed;
  }
}

void BM_TrainDemo(benchmark::State& state) {
  ComparisonPlan plan;
  plan.base.model.layers = 4;
  plan.base.model.layer = {128, 4, 8, 16, 16, 4, 1e-6, false};
  plan.base.steps = 50;
  plan.base.dtype = DType::BF16;
  plan.modes = {TrainMode::Headwise, TrainMode::Chunkwise, TrainMode::AllGather};
  for (auto _ : state) {
    const Comparison c = compare(plan, oracle_trajectory(plan.base));
    double worst = 0;
    for (const ModeVerdict& v : c.verdicts) worst = std::max(worst, v.max_gap);
    state.counters["loss_first"] = c.cp1.steps.front().loss;
    state.counters["loss_drop"] = c.cp1.steps.front().loss - c.cp1.steps.back().loss;
    state.counters["band_max"] = c.band.max;
    state.counters["band_mean"] = c.band.mean;
    state.counters["worst_max_dloss"] = worst;
    state.counters["pass"] = c.pass;
  }
}

BENCHMARK(BM_TrainGateStep)->Unit(benchmark::kSecond)->Iterations(1);
BENCHMARK(BM_TrainDemo)->Unit(benchmark::kSecond)->Iterations(1);

}  // namespace
}  // namespace gdnv::train
