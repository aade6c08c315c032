#pragma once
// The CP mode matrix (gate/cp_mode_matrix.cpp), which the cpu, emu and cuda steps run on their backends:
// each case's every micro-batch in-process against the oracle, every tensor within its oracle gate; a
// failing case names its first tensor outside the gate, the `gdn-verify run` command that reproduces it
// and the first divergence.
#include <map>
#include <string>
#include <vector>

#include "gate/common.hpp"
#include "harness/world.hpp"

namespace gdnv::gate {

// The backend a matrix runs on: its --backend name (for the reproduce command) and its factory.
struct MatrixBackend {
  std::string name;
  cp::BackendFactory factory;
};

// Every legal (mode, W in {1, 2, 4}, dtype, format, TP) of the gate's matrix spec, and CP=1 with odd lengths.
void mode_matrix(StepResult& r, const std::vector<DType>& dtypes, const MatrixBackend& backend);
// Each mode on the extreme inputs (GateRegime::Extreme) in bf16 and fp32, at CP=2 and CP=1.
void extreme_inputs(StepResult& r, const MatrixBackend& backend);
// Spans of several 64-token chunks at W = 3 and 4, one sequence straddling every rank.
void multi_chunk_spans(StepResult& r, const std::vector<DType>& dtypes, const MatrixBackend& backend);
// Sequences that start 2 tokens before a span boundary, shorter than the conv halo on their rank.
void span_boundaries(StepResult& r, const std::vector<DType>& dtypes, const MatrixBackend& backend);

// The matrices' judgement of one micro-batch: "" when out, grad_hidden and every parameter gradient of
// `got` are within their gates and finite, else the first that is not, "<name>: rel_rms <e> >= gate <g>",
// "<name>: <n> NaN, <m> Inf" or "<name>: missing from the run".
std::string first_tensor_outside_gate(const harness::Answer& oracle, const harness::Answer& got,
                                      const std::map<std::string, double>& gates);

}  // namespace gdnv::gate
