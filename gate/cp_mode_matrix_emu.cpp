// Gate step "CP mode matrix (emu)": where the CUDA step cannot run, the same matrix, extreme inputs and
// multi-chunk spans on the emu backend (gpu/'s kernel math on host streams), so a bug in a gpu/ kernel
// fails the gate on a machine without a device. Skipped where the CUDA step runs them on the device.
#include "gate/cp_mode_matrix.hpp"
#include "gate/steps.hpp"
#include "gpu/cuda_plugin.hpp"
#include "gpu/kernel_backend.hpp"

namespace gdnv::gate {
namespace {

StepResult run(const StepOptions& options) {
  StepResult r(options);
  if (gpu::cuda_plugin_unavailable_reason().empty()) {
    r.skip_reason = "the CUDA step runs gpu/'s kernels on the device";
    return r;
  }
  const MatrixBackend emu{"emu", gpu::make_emulated_backend};
  const std::vector<DType> dtypes =
      options.quick_matrix() ? std::vector<DType>{DType::BF16} : std::vector<DType>{DType::F32, DType::BF16};
  mode_matrix(r, dtypes, emu);
  extreme_inputs(r, emu);
  span_boundaries(r, dtypes, emu);
  if (!options.quick_matrix()) multi_chunk_spans(r, dtypes, emu);
  return r;
}

}  // namespace

const Step cp_mode_matrix_emu{"CP mode matrix (emu)", run};

}  // namespace gdnv::gate
