#include "harness/oracle.hpp"

#include <algorithm>
#include <cmath>
#include <functional>

#include "core/metrics.hpp"
#include "core/rng.hpp"

namespace gdnv::harness {

StageRequest stage_request(const RunSpec& spec, int cp_size) {
  return {spec.stages, spec.cp.mode == CpMode::Chunkwise ? cp_size : 0};
}

namespace {

std::vector<std::int64_t> packed_cu(const Case& k) {
  if (k.cu_seqlens) return *k.cu_seqlens;
  std::vector<std::int64_t> cu;
  for (std::int64_t b = 0; b <= k.hidden.dim(1); ++b) cu.push_back(b * k.hidden.dim(0));
  return cu;
}

// Micro-batch rows [begin, end) of a tensor whose first `lead` dims are its rows (2 for the core's
// batch-major [B, T, ...] inputs, 1 for natural-order stage tensors), row i read at at(i), as
// [1, end - begin, rest...].
Tensor row_slice(const Tensor& t, int lead, std::int64_t begin, std::int64_t end,
                 const std::function<std::int64_t(std::int64_t)>& at) {
  Shape shape{1, end - begin};
  std::int64_t width = 1;
  for (int d = lead; d < t.rank(); ++d) shape.push_back(t.dim(d)), width *= t.dim(d);
  Tensor out(DType::F64, shape);
  for (std::int64_t i = begin; i < end; ++i)
    for (std::int64_t j = 0; j < width; ++j) out.set((i - begin) * width + j, t.get(at(i) * width + j));
  return out;
}

// The oracle's chunkwise boundary states (docs/DESIGN.md §3): row r the state entering CP rank r's span
// when a sequence runs into it from earlier ranks (else zero), and the loss's gradient w.r.t. it: the
// sequence's prefix run forward to the boundary, its suffix run backward from there.
void boundary_stages(const Case& k, const ref::LayerForward& fwd, int W, ref::StageTensors& stages) {
  const ref::LayerConfig& c = k.config;
  const std::vector<std::int64_t> cu = packed_cu(k);
  const std::int64_t T = cu.back(), n = T / W, state = c.Hv() * c.dk() * c.dv();
  Tensor S_at(DType::F64, ref::stage_shape(c, "stage::boundary_state", W));
  Tensor dS_at(DType::F64, S_at.shape());
  const ref::GdrInputs& in = fwd.mixer.core_in;
  const auto batch_major = [](std::int64_t i) { return i; };
  const auto natural = [&](std::int64_t i) { return natural_row(k, i); };
  const Tensor& d_o = stages.at("stage_grad::core");
  for (int r = 1; r < W; ++r) {
    const std::int64_t s = r * n;
    const auto seq = std::upper_bound(cu.begin(), cu.end(), s) - cu.begin() - 1;
    if (cu[static_cast<std::size_t>(seq)] == s) continue;  // a sequence starts at the boundary
    const std::int64_t begin = cu[static_cast<std::size_t>(seq)], end = cu[static_cast<std::size_t>(seq) + 1];
    auto piece = [&](std::int64_t a, std::int64_t b) {
      ref::GdrInputs p;
      p.q = row_slice(in.q, 2, a, b, batch_major);
      p.k = row_slice(in.k, 2, a, b, batch_major);
      p.v = row_slice(in.v, 2, a, b, batch_major);
      p.g = row_slice(in.g, 2, a, b, batch_major);
      p.beta = row_slice(in.beta, 2, a, b, batch_major);
      p.use_qk_l2norm = true;
      return p;
    };
    const Tensor h = ref::gdr_chunked_forward(piece(begin, s)).final_state;
    ref::GdrInputs suffix = piece(s, end);
    suffix.initial_state = h;
    const Tensor dh = ref::gdr_chunked_backward(suffix, row_slice(d_o, 1, s, end, natural), std::nullopt).dh0;
    for (std::int64_t j = 0; j < state; ++j) {
      S_at.set(r * state + j, h.get(j));
      dS_at.set(r * state + j, dh.get(j));
    }
  }
  stages["stage::boundary_state"] = std::move(S_at);
  stages["stage_grad::boundary_state"] = std::move(dS_at);
}

}  // namespace

namespace {

// The oracle's answer with the reference layer's `options` (docs/DESIGN.md §4: the condition measurements).
Answer answer_with(const Case& k, const StageRequest& request, const ref::LayerOptions& options) {
  const ref::LayerForward fwd = ref::layer_forward(k.config, k.params, k.hidden, k.cu_seqlens, options);
  Answer a;
  a.stage_request = request;
  ref::LayerGrads grads = ref::layer_backward(k.config, k.params, fwd, k.grad_output, request.on ? &a.stages : nullptr);
  if (request.on) {
    a.stages.merge(ref::forward_stages(k.config, fwd));
    if (request.chunkwise_cp > 1) boundary_stages(k, fwd, request.chunkwise_cp, a.stages);
  }
  a.out = fwd.out;
  a.grad_hidden = grads.grad_hidden;
  a.grads = std::move(grads.params);
  return a;
}

// kappa[t] = max(kappa[t], rel_rms(other_t - oracle_t) / delta) for every tensor of the oracle's answer.
void record_change(const Answer& oracle, const Answer& other, double delta, std::map<std::string, double>& kappa) {
  const auto record = [&](const std::string& name, const Tensor& ref, const Tensor& moved) {
    kappa[name] = std::max(kappa[name], compare(ref, moved).rel_rms / delta);
  };
  for (const auto& [name, t] : oracle.stages) record(name, t, other.stages.at(name));
  record("out", oracle.out, other.out);
  record("grad_hidden", oracle.grad_hidden, other.grad_hidden);
  for (const auto& [name, t] : oracle.grads) record("grad::" + name, t, other.grads.at(name));
}

}  // namespace

// Per-tensor condition numbers of the layer, measured: the oracle rerun with hidden_states,
// grad_output and every parameter perturbed elementwise by a relative N(0, delta^2), delta =
// 2^-9/sqrt(3) (the RMS of one bf16 rounding); kappa = rel_rms(change) / delta. Perturbing the
// parameters moves every internal tensor (p, q, k, v, g, beta, o) the way rounding them does.
// Gradients that are sums over every token with cancellation (A_log, dt_bias) get kappa >> 1.
std::map<std::string, double> condition_numbers(const Case& k, const Answer& oracle) {
  constexpr double delta = 0x1.0p-9 / 1.7320508075688772;
  auto perturbed = [&](const Tensor& t, const std::string& stream) {
    Tensor out = t;
    const Rng rng(k.params.size(), stream);
    for (std::int64_t i = 0; i < t.numel(); ++i) out.set(i, t.get(i) * (1.0 + delta * rng.normal(i)));
    return out;
  };
  std::map<std::string, double> kappa;
  // One random direction can miss a small tensor's worst case ([Hv] gradients): take the largest of
  // three draws.
  for (int draw = 0; draw < 3; ++draw) {
    const std::string tag = "condition/" + std::to_string(draw) + "/";
    Case moved = k;
    moved.hidden = perturbed(k.hidden, tag + "hidden");
    moved.grad_output = perturbed(k.grad_output, tag + "grad_output");
    for (auto& [name, t] : moved.params) t = perturbed(t, tag + name);
    record_change(oracle, answer_with(moved, oracle.stage_request, {}), delta, kappa);
  }
  return kappa;
}

namespace {

// Each sequence's [begin, end) tokens along T of the gates [B, T, Hv] (THD: cu_seqlens, B = 1; SBHD: all
// T tokens of each of the B rows).
std::vector<std::pair<std::int64_t, std::int64_t>> sequence_spans(const Case& k, std::int64_t T) {
  if (!k.cu_seqlens) return {{0, T}};
  std::vector<std::pair<std::int64_t, std::int64_t>> spans;
  for (std::size_t i = 1; i < k.cu_seqlens->size(); ++i) spans.emplace_back((*k.cu_seqlens)[i - 1], (*k.cu_seqlens)[i]);
  return spans;
}

// The cumsum-decay class's condition numbers kappa^gamma_t, measured (docs/DESIGN.md §4). Such a kernel
// forms gamma_t = gamma_{t-1} + g_t in fp32 from each chunk's start (64 tokens, cut from each sequence's
// start as FLA and transformers cut them) and takes its decays as e^{gamma_i - gamma_j}, e^{gamma_i},
// e^{gamma_C - gamma_i}. Forward: partial sum s rounds by r_s, RMS delta |gamma_s| (delta = 2^-24/sqrt(3));
// the rounded gamma_i is gamma_i + sum_{s <= i} r_s, so every decay it forms is exactly the decay of the
// gates g_s + r_s. Backward, the adjoint: the kernel sums dgamma_s from every product carrying gamma_s
// (their magnitudes add to m_s, ref::gdr_dgamma_magnitudes: near the diagonal they are O(1) and cancel), in
// an order of its own; a sequential sum of terms of random sign rounds by RMS ~ delta m_s, and reverse-cumsums dgamma
// into dg_t = sum_{s >= t in the chunk} dgamma_s, whose partial sum s is dg_s: dg_t carries sum_{s >= t} r'_s with r'_s
// of RMS delta sqrt(m_s^2 + dg_s^2). The oracle is rerun with both (N(0, 1) draws; largest change of three):
// kappa^gamma_t = rel_rms(change) / delta.
std::map<std::string, double> cumsum_conditions(const Case& k, const Answer& oracle) {
  constexpr double delta = 0x1.0p-24 / 1.7320508075688772;
  constexpr std::int64_t chunk = 64;
  const ref::LayerForward fwd = ref::layer_forward(k.config, k.params, k.hidden, k.cu_seqlens);
  ref::StageTensors stages;
  (void)ref::layer_backward(k.config, k.params, fwd, k.grad_output, &stages);
  const Tensor& g = fwd.mixer.core_in.g;  // [B, T, Hv]
  const std::int64_t B = g.dim(0), T = g.dim(1), Hv = g.dim(2), dv = k.config.dv();
  const auto natural = [&](std::int64_t b, std::int64_t t) { return k.cu_seqlens ? t : t * B + b; };
  const Tensor& dg = stages.at("stage_grad::g");         // [T B, Hv], natural token order
  const Tensor& d_core = stages.at("stage_grad::core");  // [T B, Hv, dv]
  Tensor d_o(DType::F64, {B, T, Hv, dv});
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t t = 0; t < T; ++t)
      for (std::int64_t j = 0; j < Hv * dv; ++j)
        d_o.set((b * T + t) * Hv * dv + j, d_core.get(natural(b, t) * Hv * dv + j));
  const Tensor m = ref::gdr_dgamma_magnitudes(fwd.mixer.core_in, d_o, chunk);
  std::map<std::string, double> kappa;
  for (int draw = 0; draw < 3; ++draw) {
    const Rng rng(k.params.size(), "cumsum-decay/" + std::to_string(draw));
    const Rng rng_grad(k.params.size(), "cumsum-decay/grad/" + std::to_string(draw));
    ref::LayerOptions options;
    options.gate_offset = options.gate_grad_offset = Tensor(DType::F64, g.shape());
    for (std::int64_t b = 0; b < B; ++b)
      for (const auto& [begin, end] : sequence_spans(k, T))
        for (std::int64_t h = 0; h < Hv; ++h) {
          const auto at = [&](std::int64_t t) { return (b * T + t) * Hv + h; };
          double gamma = 0;
          for (std::int64_t t = begin; t < end; ++t) {
            gamma = (t - begin) % chunk == 0 ? g.get(at(t)) : gamma + g.get(at(t));
            options.gate_offset.set(at(t), delta * std::abs(gamma) * rng.normal(at(t)));
          }
          double carried = 0;  // the backward's roundings from the chunk's last token down to t
          for (std::int64_t t = end - 1; t >= begin; --t) {
            if ((t - begin) % chunk == chunk - 1 || t == end - 1) carried = 0;
            carried += delta * std::hypot(m.get(at(t)), dg.get(natural(b, t) * Hv + h)) * rng_grad.normal(at(t));
            options.gate_grad_offset.set(at(t), carried);
          }
        }
    record_change(oracle, answer_with(k, oracle.stage_request, options), delta, kappa);
  }
  return kappa;
}

}  // namespace

Answer oracle_answer(const Case& k, const StageRequest& request) { return answer_with(k, request, {}); }

DecayClass parse_decay_class(std::string_view name) {
  if (name == "product-of-decays") return DecayClass::ProductOfDecays;
  if (name == "cumsum-decay") return DecayClass::CumsumDecay;
  throw ConfigError("unknown decay class '" + std::string(name) + "': use product-of-decays or cumsum-decay");
}

std::string_view decay_class_name(DecayClass decays) {
  return decays == DecayClass::ProductOfDecays ? "product-of-decays" : "cumsum-decay";
}

std::map<std::string, double> oracle_gates(const Case& k, const Answer& oracle, DType dtype, DecayClass decays) {
  std::map<std::string, double> gates;
  if (dtype != DType::F64) {
    // Storing a tensor in the storage dtype perturbs it by a relative RMS delta = 2^-p / sqrt(3) (p = 9
    // for bf16, 24 for fp32); kappa_t measures how such a perturbation of every input and parameter
    // moves tensor t. The implementation rounds ~14 tensors on the longest path (x, p, conv, q/k/v, o,
    // y, out and their gradients), none worse conditioned than the whole layer; in quadrature
    // sqrt(14) ~ 3.7, so the gate is 4 delta kappa_t (bf16 errors measured at 0.5-1.1 delta kappa_t,
    // kappa_out from 4.7 on the README's geometry to 39 on 2-token, 4-dim heads). Floors, for the
    // well-conditioned tensors (kappa < 4.4 in bf16) where three random draws may underestimate kappa:
    //  bf16: sqrt(14) u (u = 1.13e-3, one rounding) = 4.2e-3, times up to ~4 through the backward of
    //        the L2 norm, the RMSNorms (head dims down to 4) and the gated product: 2e-2.
    //  fp32: docs/DESIGN.md §4's gate, 1e-5 relative RMS vs the fp64 oracle.
    const double delta = (dtype == DType::BF16 ? 0x1.0p-9 : 0x1.0p-24) / 1.7320508075688772;
    const double floor = dtype == DType::BF16 ? 2e-2 : 1e-5;
    for (const auto& [name, kap] : condition_numbers(k, oracle)) gates[name] = std::max(floor, 4.0 * delta * kap);
    // cumsum-decay (docs/DESIGN.md §4): the chunk-local cumsum's roundings and its backward's, emulated in
    // the oracle (cumsum_conditions, each backward sum dgamma_s rounded at delta m_s, the RMS of a
    // sequential sum of terms of random sign whose magnitudes add to m_s), add in quadrature to the
    // roundings above: gate_t = hypot(gate_t, delta kappa^gamma_t), delta = 2^-24/sqrt(3) whatever the
    // storage dtype, since these kernels keep gamma in fp32. Measured on grad::A_log and grad::dt_bias,
    // the tensors it moves (thd-gva, sbhd): FLA's Triton kernels at 0.10, transformers' chunked core at
    // 0.013 delta kappa^gamma.
    if (decays == DecayClass::CumsumDecay)
      for (const auto& [name, kap] : cumsum_conditions(k, oracle))
        gates[name] = std::hypot(gates[name], 0x1.0p-24 / 1.7320508075688772 * kap);
    return gates;
  }
  // fp64: the CP modes only reorder fp64 sums; the chunked core agrees with the recurrent oracle to
  // ~1e-12, so 1e-10 leaves two orders of magnitude for reordering while catching any real bug.
  const double gate = 1e-10;
  gates["out"] = gates["grad_hidden"] = gate;
  for (const auto& [name, t] : oracle.grads) gates["grad::" + name] = gate;
  for (const auto& [name, t] : oracle.stages) gates[name] = gate;
  return gates;
}

}  // namespace gdnv::harness
