#pragma once
// The fp64 oracle's answer on a case (every named stage on request), and the gate each tensor of a run is
// judged by: measured condition numbers scaled by the storage dtype's rounding (docs/DESIGN.md §4).
#include <map>
#include <string>
#include <string_view>

#include "harness/case.hpp"
#include "harness/run_spec.hpp"

namespace gdnv::harness {

// Which named stages an answer holds: none, or every stage of the layer, plus chunkwise's boundary
// state for CP size `chunkwise_cp` when it is above 1.
struct StageRequest {
  bool on = false;
  int chunkwise_cp = 0;
};
StageRequest stage_request(const RunSpec& spec, int cp_size);  // what a run of `spec` records at that size

struct Answer {
  Tensor out, grad_hidden;   // natural order, F64
  ref::LayerParams grads;    // full (TP-assembled), F64
  ref::StageTensors stages;  // "stage::..." and "stage_grad::..." (reference/layer.hpp), natural order, F64
  StageRequest stage_request;
};
Answer oracle_answer(const Case& c, const StageRequest& stages = {});

// Each tensor's measured condition number kappa (rel_rms of its change / delta when every input and
// parameter is perturbed by a relative N(0, delta^2), the largest of three draws), by the names of
// oracle_gates: what its gates scale (docs/DESIGN.md §4).
std::map<std::string, double> condition_numbers(const Case& c, const Answer& oracle);

// How an implementation forms its decay factors (docs/DESIGN.md §4): product-of-decays multiplies per-token
// e^{g_t} (our backends: relative error ~u per factor); cumsum-decay takes e^{gamma_i - gamma_j} of fp32
// chunk-local cumsums gamma of g (FLA's and Hugging Face's chunked kernels: absolute error ~u |gamma|).
enum class DecayClass { ProductOfDecays, CumsumDecay };
DecayClass parse_decay_class(std::string_view name);  // "product-of-decays" | "cumsum-decay"
std::string_view decay_class_name(DecayClass decays);

// Relative-RMS gate of each tensor of a layer run against the fp64 oracle on the same rounded inputs,
// by tensor name ("out", "grad_hidden", "grad::<param>"), for an implementation of class `decays`.
std::map<std::string, double> oracle_gates(const Case& c, const Answer& oracle, DType dtype,
                                           DecayClass decays = DecayClass::ProductOfDecays);

}  // namespace gdnv::harness
