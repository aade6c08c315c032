#pragma once
// The steps of `gdn-verify gate` (docs/DESIGN.md §11), each defined at the end of gate/<step>.cpp.
#include <vector>

#include "gate/common.hpp"

namespace gdnv::gate {

extern const Step safetensors_round_trip;
extern const Step reference_vectors;
extern const Step verdict_known_answers;
extern const Step judge_on_third_party_images;
extern const Step oracle_self_checks;
extern const Step layout_properties;
extern const Step adjoint_dot_products;
extern const Step cp_mode_matrix;
extern const Step precision_rules;
extern const Step communicator_semantics;
extern const Step mpi_transport;
extern const Step illegal_combinations;
extern const Step fixture_verification;
extern const Step precision_regression;
extern const Step probe_self_compare;
extern const Step cp_mode_matrix_cuda;
extern const Step cp_mode_matrix_emu;
extern const Step training_known_answers;
extern const Step training_equivalence;

// Every step, in the order the gate runs them.
const std::vector<Step>& steps();

}  // namespace gdnv::gate
