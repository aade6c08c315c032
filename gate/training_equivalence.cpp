// Gate step "training equivalence" (docs/DESIGN.md §13, §11): a small GDN model
// trained 8 steps under every CP mode at static W = 4 and under dynamic CP {1, 2, 4}, in bf16 (each run
// within the noise band of a legally reordered cp1 and within 4x cp1's deviation from the fp64 oracle) and
// in fp64 (each run equal to cp1 to 1e-10 relative at every step); effective tokens equal at every step.
#include <algorithm>
#include <map>
#include <optional>

#include "gate/steps.hpp"
#include "gate/training.hpp"
#include "train/dynamic_cp.hpp"
#include "train/oracle.hpp"
#include "train/trainer.hpp"
#include "train/verdict.hpp"

namespace gdnv::gate {
namespace {

const char* const kModes[] = {"headwise", "chunkwise", "all_gather"};

std::string case_label(DType dtype, const std::string& mode, bool dynamic) {
  return std::string(dtype == DType::F64 ? "fp64 " : "bf16 ") + mode + (dynamic ? "@1/2/4" : "@4");
}

// cp1, its reordered rerun and the oracle, once however many cases ask for them; fp64 runs are judged
// against cp1 alone (to 1e-10), so they need neither the band nor the oracle.
struct Baselines {
  std::optional<train::Trajectory> oracle;
  std::map<DType, std::pair<train::Trajectory, train::Trajectory>> cp1;

  const train::Trajectory& oracle_of() {
    if (!oracle) oracle = train::oracle_trajectory(gate_train_spec(DType::F64));
    return *oracle;
  }
  const std::pair<train::Trajectory, train::Trajectory>& cp1_of(DType dtype) {
    auto it = cp1.find(dtype);
    if (it != cp1.end()) return it->second;
    train::TrainSpec s = gate_train_spec(dtype);
    train::Trajectory band;
    if (dtype != DType::F64) {
      train::TrainSpec reordered = s;
      reordered.reordered = true;
      band = train::train_in_process(reordered);
      band.mode = "cp1-reordered";
    }
    return cp1.emplace(dtype, std::make_pair(train::train_in_process(s), std::move(band))).first->second;
  }
};

// Dynamic CP whose steps run sub-groups of different sizes at once: a per-rank budget of 100 tokens puts
// a micro-batch of at most 100 tokens at CP 1, of at most 200 at CP 2, so steps 0 and 1 hold 3 and 4 CP-1
// micro-batches (on ranks 0, 1, 2, 3) beside CP-2 ones (sub-groups {0, 1}, {2, 3}): each sub-group's
// gradients are added once, from its own root, and two CP-1 micro-batches share a step.
constexpr std::int64_t kSubGroupBudget = 100;

// Why the drawn geometry misses its purpose, or "".
std::string sub_group_geometry(const train::TrainSpec& s) {
  for (int step = 0; step < s.steps; ++step) {
    const std::vector<int> cps = train::micro_batch_cps(s, train::global_batch(s.data, step));
    const auto count = [&](int c) { return std::count(cps.begin(), cps.end(), c); };
    if (count(1) >= 2 && count(2) >= 2) return "";
  }
  return "no step holds two CP-1 and two CP-2 micro-batches: redraw the sub-group case's budget";
}

StepResult run(const StepOptions& options) {
  StepResult r(options);
  Baselines base;
  const std::string sub_groups = "fp64 headwise@1/2/4 sub-groups of sizes 1 and 2";
  if (r.selected(sub_groups)) {  // --quick too
    train::TrainSpec s = gate_train_spec(DType::F64);
    s.mode = train::TrainMode::Headwise;
    s.dynamic = kDynamic;
    s.rank_budget = kSubGroupBudget;
    std::string why = sub_group_geometry(s);
    try {
      if (why.empty()) {
        const train::Comparison c =
            train::judge(DType::F64, base.cp1_of(DType::F64).first, {}, {}, {train::train_in_process(s)});
        if (!c.pass) why = c.verdicts.at(0).why.empty() ? c.why : c.verdicts.at(0).why;
      }
    } catch (const std::exception& e) {
      why = std::string("the run did not complete: ") + e.what();
    }
    r.check(why.empty(), sub_groups, why);
  }
  // --quick: headwise in fp64 under dynamic CP, where every planted training fault shows.
  auto quick = [](DType dtype, const std::string& mode, bool dynamic) {
    return dtype == DType::F64 && mode == "headwise" && dynamic;
  };
  for (DType dtype : {DType::F64, DType::BF16})
    for (const char* mode : kModes)
      for (bool dynamic : {false, true}) {
        const std::string label = case_label(dtype, mode, dynamic);
        if (!r.selected(label) || (options.quick_matrix() && !quick(dtype, mode, dynamic))) continue;
        train::TrainSpec s = gate_train_spec(dtype);
        s.mode = train::parse_train_mode(mode);
        if (dynamic) s.dynamic = kDynamic;
        try {
          const auto& [cp1, reordered] = base.cp1_of(dtype);
          const train::Comparison c =
              train::judge(dtype, cp1, reordered, dtype == DType::F64 ? train::Trajectory{} : base.oracle_of(),
                           {train::train_in_process(s)});
          r.check(c.pass, label, c.verdicts.at(0).why.empty() ? c.why : c.verdicts.at(0).why);
        } catch (const std::exception& e) {
          r.check(false, label, std::string("the run did not complete: ") + e.what());
        }
      }
  return r;
}

}  // namespace

const Step training_equivalence{"training equivalence", run};

}  // namespace gdnv::gate
