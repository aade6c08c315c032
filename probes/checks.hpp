#pragma once
// The probe workflows over image directories (probes/image.hpp):
//   compare_images      image vs image (old build vs new build), mode by mode
//   cross_mode          within one image, each CP mode vs CP=1 under cp-vs-cp1, and each mode's
//                       deviation from the fp64 oracle at most 4x headwise's (floor 1e-6)
//   judge_with_oracle   every dumped tensor against the fp64 oracle recomputed from the inputs
// Each reads an image only as far as it is whole (index_image): every missing, orphan, foreign-run or
// mislabelled file is a structural mismatch naming it, and only whole modes are judged. Within a mode
// every rank's copy of the CP-summed parameter gradients must equal rank 0's bitwise (cross-mode and
// oracle; compare judges each rank file against REF's) (docs/DESIGN.md §8).
#include <string>
#include <utility>
#include <vector>

#include "probes/compare.hpp"

namespace gdnv::probes {

// Each tensor of `rows` (name and rule, in order) of a run reassembled to natural order (`got`) against
// `ref`: its error / bound (error_ratio) over the elements each CP rank of `run` computed (harness::pieces_of;
// "-" for a rank with none, as for a CP-summed parameter gradient) and over the whole tensor.
RankTable rank_grid(const std::string& title, const std::vector<std::pair<std::string, Rule>>& rows,
                    const TensorFile& ref, const TensorFile& got, const harness::MicroBatchRun& run,
                    const harness::Case& k);

// The inputs must be bitwise identical, their metadata (the layer config, case, seed, dtype) equal but
// for the image label (else the images are of different cases: a structural mismatch); then each
// mode's rank files (all whole modes of REF when `mode` is empty) under `policy`.
Comparison compare_images(const std::string& ref, const std::string& cand, const std::string& mode,
                          const Policy& policy);

// A mode's deviation from the fp64 oracle against a base's (docs/DESIGN.md §4): headwise's where dumped,
// bound 4 max(base, 1e-6) (the contract's); else the same implementation's cp1 (a third-party image),
// bound cp1_deviation_factor(effective_roundings(oracle, cp1), W) max(base, 1e-6).
struct DeviationRatio {
  std::string mode, tensor, base;  // base: "headwise" | "cp1"
  double rel_rms, base_rel_rms, bound;
  bool pass() const { return rel_rms <= bound; }
};

// A third-party image's tensor left out of the elementwise rule: its cp1 is `cp1_rel_rms` from the
// oracle, beyond the kernel gate `gate` the rule presumes; its deviation bound is the band or
// `class_gate`, its declared class's oracle gate (docs/DESIGN.md §4).
struct BandOnly {
  std::string tensor;
  double cp1_rel_rms, gate, class_gate;
};

// The number of independent roundings behind the RMS of `run`'s error e = run - oracle (Satterthwaite:
// nu = (sum lambda)^2 / sum lambda^2 for the elements' error variances lambda), estimated with E e^4 =
// 3 lambda^2 as 3 (sum e^2)^2 / sum e^4 - 2, within [1, n]; n where e is 0 or not finite.
double effective_roundings(const Tensor& oracle, const Tensor& run);
// How far a CP run's deviation from the oracle may exceed its cp1's on W ranks, for a tensor of nu
// effective roundings: sqrt((13 + W) / 14 F(1 - 1e-6; nu, nu)) (docs/DESIGN.md §4).
double cp1_deviation_factor(double nu, int W);

struct CrossMode {
  Comparison vs_cp1;
  std::vector<BandOnly> band_only;     // judged by their deviation from the oracle alone
  std::vector<DeviationRatio> ratios;  // every CP mode's, vs headwise's where dumped, else vs cp1's
  std::string skipped;                 // why ratios is empty
  int exit_code() const;
};
CrossMode cross_mode(const std::string& dir, const Policy& policy);

// The tensors outside the oracle gates of one decay class (docs/DESIGN.md §4).
struct ClassVerdict {
  harness::DecayClass decays;
  int outside = 0;
};
// Judged under the gates of the class the image declares (declared_decay_class); `classes`, when given,
// receives the verdict under each class's gates, so a report says which class the image meets.
Comparison judge_with_oracle(const std::string& dir, std::vector<ClassVerdict>* classes = nullptr);

}  // namespace gdnv::probes
