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
#include <vector>

#include "probes/compare.hpp"

namespace gdnv::probes {

// The inputs must be bitwise identical, their metadata (the layer config, case, seed, dtype) equal but
// for the image label (else the images are of different cases: a structural mismatch); then each
// mode's rank files (all whole modes of REF when `mode` is empty) under `policy`.
Comparison compare_images(const std::string& ref, const std::string& cand, const std::string& mode,
                          const Policy& policy);

struct DeviationRatio {
  std::string mode, tensor;
  double rel_rms, headwise_rel_rms, bound;  // bound = 4 max(headwise_rel_rms, 1e-6)
  bool pass() const { return rel_rms <= bound; }
};

struct CrossMode {
  Comparison vs_cp1;
  std::vector<DeviationRatio> ratios;  // empty when DIR holds no headwise dump or no other CP mode
  std::string skipped;                 // why ratios is empty
  int exit_code() const;
};
CrossMode cross_mode(const std::string& dir, const Policy& policy);

Comparison judge_with_oracle(const std::string& dir);

}  // namespace gdnv::probes
