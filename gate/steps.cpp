#include "gate/steps.hpp"

namespace gdnv::gate {

const std::vector<Step>& steps() {
  static const std::vector<Step> table = {
      safetensors_round_trip, reference_vectors,      verdict_known_answers, judge_on_third_party_images,
      oracle_self_checks,     layout_properties,      adjoint_dot_products,  cp_mode_matrix,
      precision_rules,        communicator_semantics, mpi_transport,         illegal_combinations,
      fixture_verification,   precision_regression,   probe_self_compare,    cp_mode_matrix_cuda,
      cp_mode_matrix_emu,     training_known_answers, training_equivalence,
  };
  return table;
}

}  // namespace gdnv::gate
