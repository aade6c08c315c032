#pragma once
// The probe workflows over image directories (probes/image.hpp):
//   compare_images      image vs image (old build vs new build), mode by mode
//   cross_mode          within one image, each CP mode vs CP=1 under cp-vs-cp1, and each mode's
//                       deviation from the fp64 oracle at most 4x headwise's (floor 1e-6)
//   judge_with_oracle   every dumped tensor against the fp64 oracle recomputed from the inputs
#include <string>
#include <vector>

#include "probes/compare.hpp"

namespace gdnv::probes {

// The inputs must be bitwise identical (else the images are of different cases: a structural
// mismatch); then each mode's rank files (all modes of REF when `mode` is empty) under `policy`.
Comparison compare_images(const std::string& ref, const std::string& cand, const std::string& mode,
                          const Policy& policy);

struct DeviationRatio {
  std::string mode, tensor;
  double rel_rms, headwise_rel_rms, bound;  // bound = 4 max(headwise_rel_rms, 1e-6)
  bool pass() const { return rel_rms <= bound; }
};

struct CrossMode {
  Comparison vs_cp1;
  std::vector<DeviationRatio> ratios;  // empty when DIR holds no headwise dump
  int exit_code() const;
};
CrossMode cross_mode(const std::string& dir, const Policy& policy);

// The tensors outside the oracle gates of one decay class (docs/DESIGN.md §4).
struct ClassVerdict {
  cp::DecayClass decays;
  int outside = 0;
};
// Judged under the gates of the class the image declares (declared_decay_class); `classes`, when given,
// receives the verdict under each class's gates, so a report says which class the image meets.
Comparison judge_with_oracle(const std::string& dir, std::vector<ClassVerdict>* classes = nullptr);

}  // namespace gdnv::probes
