// The gate's "training equivalence" step (docs/DESIGN.md §13, §11): a small GDN model
// trained 8 steps under every CP mode at static W = 4 and under dynamic CP {1, 2, 4}, in bf16 (each run
// within the noise band of a legally reordered cp1 and within 4x cp1's deviation from the fp64 oracle) and
// in fp64 (each run equal to cp1 to 1e-10 relative at every step); effective tokens equal at every step.
#include <map>
#include <optional>

#include "cli/gate_steps.hpp"
#include "train/oracle.hpp"
#include "train/report.hpp"
#include "train/verdict.hpp"

namespace gdnv::cli {
namespace {

// The gate's configuration: 2 layers, hidden 32, Hk = Hv = 4, dk = dv = 8, V = 32, 12 documents of up to 128
// tokens per global batch in micro-batches of 128 tokens, AdamW lr 3e-3, seed 0.
train::TrainSpec gate_train_spec(DType dtype) {
  train::TrainSpec s;
  s.model.layers = 2;
  s.model.layer = {32, 4, 4, 8, 8, 4, 1e-6, false};
  s.model.vocab = s.data.vocab = 32;
  s.adam.lr = 3e-3;
  s.cp = 4;
  s.steps = 8;
  s.dtype = dtype;
  return s;
}

const std::vector<int> kDynamic{1, 2, 4};
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

}  // namespace

StepResult training_equivalence(const StepOptions& options) {
  StepResult r(options);
  Baselines base;
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
        s.mode = mode;
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

}  // namespace gdnv::cli
