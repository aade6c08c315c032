// Gate step "CP mode matrix (cuda)": the mode matrix on the CUDA backend (fp32, bf16: the storage it
// supports); skipped, never passed, without the CUDA plugin or a usable device.
#include "gate/cp_mode_matrix.hpp"
#include "gate/steps.hpp"
#include "gpu/cuda_plugin.hpp"

namespace gdnv::gate {
namespace {

StepResult run(const StepOptions& options) {
  StepResult r(options);
  if (const std::string reason = gpu::cuda_plugin_unavailable_reason(); !reason.empty()) {
    r.skip_reason = reason;
    return r;
  }
  const MatrixBackend cuda{"cuda", gpu::cuda_plugin().api->make_backend};
  mode_matrix(r, options.quick_matrix() ? std::vector<DType>{DType::BF16} : std::vector<DType>{DType::F32, DType::BF16},
              cuda);
  extreme_inputs(r, cuda);
  span_boundaries(r, {DType::BF16}, cuda);
  return r;
}

}  // namespace

const Step cp_mode_matrix_cuda{"CP mode matrix (cuda)", run};

}  // namespace gdnv::gate
