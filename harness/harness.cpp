#include "harness/harness.hpp"

#include <algorithm>
#include <cmath>

#include "comm/groups.hpp"
#include "comm/inprocess.hpp"
#include "core/metrics.hpp"
#include "core/rng.hpp"
#include "core/text.hpp"
#include "cost/counting_backend.hpp"
#include "cp/layer.hpp"
#include "layouts/apply.hpp"
#include "layouts/partition.hpp"
#include "layouts/validate.hpp"
#include "reference/tp_sharding.hpp"

namespace gdnv::cp {
namespace {

Tensor rounded(const Tensor& t, DType dtype) { return t.to(dtype).to(DType::F64); }

// Writes the ranks' shard rows back at their natural positions.
void put_rows(const Tensor& shard, const std::vector<std::int64_t>& rows, Tensor& full) {
  layouts::scatter_rows(shard.bytes(), rows, shard.nbytes() / std::max<std::size_t>(rows.size(), 1), full.bytes());
}

// A_log with A = exp(A_log) log-uniform in [lo, hi], one value per head.
Tensor a_log_between(std::uint64_t seed, std::int64_t heads, double lo, double hi) {
  const Rng rng(seed, "A_log/regime");
  Tensor t(DType::F64, {heads});
  for (std::int64_t i = 0; i < heads; ++i) t.set(i, det_log(lo) + (det_log(hi) - det_log(lo)) * rng.uniform(i));
  return t;
}

std::vector<std::int64_t> lengths_in(const Case& k) {
  std::vector<std::int64_t> lengths;
  if (!k.cu_seqlens) return lengths;
  const std::vector<std::int64_t>& cu = *k.cu_seqlens;
  for (std::size_t i = 1; i < cu.size(); ++i) lengths.push_back(cu[i] - cu[i - 1]);
  return lengths;
}

void check_lengths_per_micro_batch(const RunSpec& s) {
  const std::size_t n = micro_batch_sizes(s).size();
  if (s.micro_batch_lengths.empty() || s.micro_batch_lengths.size() == n) return;
  throw ConfigError(std::to_string(s.micro_batch_lengths.size()) + " lists of sequence lengths for " +
                    std::to_string(n) + " micro-batch(es): give one list per micro-batch, in micro-batch order");
}

// docs/DESIGN.md §3.1 for micro-batch m of CP size c with these THD lengths, as GdnCpLayer::prepare checks it:
// run_rank passes a per-micro-batch group exactly when c is not the static size. Several micro-batches:
// the message says which one.
int validate_micro_batch_of(const RunSpec& s, const ref::LayerConfig& config, const std::vector<std::int64_t>& lengths,
                            std::size_t m) {
  const std::vector<int> sizes = micro_batch_sizes(s);
  const int c = sizes[m];
  const bool dynamic = c != s.cp.cp;
  const MicroBatchShape shape{s.format,
                              s.format == Format::Thd ? 1 : s.batch,
                              s.format == Format::Thd ? lengths : std::vector<std::int64_t>{s.seq_len},
                              dynamic,
                              dynamic ? c : 0,
                              dynamic ? c : 0};
  try {
    return validate_micro_batch(s.cp, config, shape);
  } catch (const ConfigError& e) {
    if (sizes.size() == 1) throw;
    throw ConfigError("micro-batch " + std::to_string(m + 1) + "/" + std::to_string(sizes.size()) +
                      " (cp=" + std::to_string(c) +
                      (s.format == Format::Thd ? ", lengths " + comma_list(lengths) : "") + "): " + e.what());
  }
}

}  // namespace

std::vector<int> micro_batch_sizes(const RunSpec& spec) {
  return spec.micro_batches.empty() ? std::vector<int>{spec.cp.cp} : spec.micro_batches;
}

const std::vector<std::int64_t>& lengths_of(const RunSpec& spec, std::size_t micro_batch) {
  return spec.micro_batch_lengths.empty() ? spec.lengths : spec.micro_batch_lengths.at(micro_batch);
}

void validate_run(const RunSpec& s) { (void)planned_micro_batches(s); }

GateRegime parse_gate_regime(std::string_view name) {
  if (name == "default") return GateRegime::Default;
  if (name == "weak") return GateRegime::Weak;
  if (name == "strong") return GateRegime::Strong;
  if (name == "extreme") return GateRegime::Extreme;
  throw ConfigError("unknown gate regime '" + std::string(name) + "': use default, weak, strong or extreme");
}

RunSpec gate_matrix_spec(CpMode mode, int W, int tp, DType dtype, Format format) {
  RunSpec s;
  s.layer = {24, 4, 8, 6, 10, 4, 1e-6, false};
  s.cp.mode = mode;
  s.cp.cp = W;
  s.cp.tp = tp;
  s.dtype = dtype;
  s.format = format;
  s.lengths = {8 * W, 4 * W};
  s.seq_len = 8 * W;
  s.batch = mode == CpMode::Chunkwise ? 1 : 2;
  s.gates = GateRegime::Weak;
  return s;
}

bool is_legal(const RunSpec& spec) {
  try {
    validate_run(spec);
    return true;
  } catch (const ConfigError&) {
    return false;
  }
}

std::string_view gate_regime_name(GateRegime regime) {
  constexpr std::string_view names[] = {"default", "weak", "strong", "extreme"};
  return names[static_cast<int>(regime)];
}

Case make_case(const RunSpec& spec, std::size_t micro_batch) {
  const ref::LayerConfig config(spec.layer);
  Case k{config, ref::init_params(config, spec.seed), {}, {}, std::nullopt};
  if (spec.gates == GateRegime::Weak) k.params[ref::kALog] = a_log_between(spec.seed, config.Hv(), 1e-3, 1e-2);
  if (spec.gates == GateRegime::Strong) k.params[ref::kALog] = a_log_between(spec.seed, config.Hv(), 8.0, 32.0);
  if (spec.gates == GateRegime::Extreme) shape_extreme_params(config, k.params);
  for (auto& [name, t] : k.params) t = rounded(t, spec.dtype);
  Shape shape;
  if (spec.format == Format::Thd) {
    std::vector<std::int64_t> cu{0};
    for (auto L : lengths_of(spec, micro_batch)) cu.push_back(cu.back() + L);
    shape = {cu.back(), 1, config.hidden()};
    k.cu_seqlens = cu;
  } else {
    shape = {spec.seq_len, spec.batch, config.hidden()};
  }
  // Each micro-batch its own tokens; micro-batch 0 keeps the streams of a one-micro-batch run.
  const std::string stream = micro_batch ? "/micro-batch " + std::to_string(micro_batch) : "";
  k.hidden = rounded(ref::seeded_normal(spec.seed, "hidden_states" + stream, shape), spec.dtype);
  k.grad_output = rounded(ref::seeded_normal(spec.seed, "grad_output" + stream, shape), spec.dtype);
  if (spec.gates == GateRegime::Extreme) k.hidden = rounded(extreme_rows(k.hidden, k.cu_seqlens), spec.dtype);
  return k;
}

std::vector<Case> make_cases(const RunSpec& spec) {
  std::vector<Case> cases{make_case(spec)};
  for (std::size_t m = 1; m < spec.micro_batch_lengths.size(); ++m) cases.push_back(make_case(spec, m));
  return cases;
}

void shape_extreme_params(const ref::LayerConfig& config, ref::LayerParams& params) {
  const std::int64_t Hv = config.Hv(), dk = config.dk(), qk = config.qk_dim(), hidden = config.hidden();
  const std::int64_t beta_row = config.conv_dim() + config.v_dim(), alpha_row = beta_row + Hv;
  const double root = std::sqrt(static_cast<double>(hidden));  // x_0 of a spike row
  Tensor& A_log = params[ref::kALog];
  Tensor& dt_bias = params[ref::kDtBias];
  Tensor& W = params[ref::kInProj];  // [in_proj_dim, hidden]
  for (std::int64_t h = 0; h < Hv; ++h) {
    const bool even = h % 2 == 0;
    if (even) {
      A_log.set(h, det_log(1e3));
      dt_bias.set(h, -10.0);
    }
    W.set((alpha_row + h) * hidden, ((even ? 1e3 : -1e3) - dt_bias.get(h)) / root);
    W.set((beta_row + h) * hidden, (even ? 50.0 : -50.0) / root);
  }
  const std::int64_t tiny_k = (2 * qk - dk) * hidden;  // first element of the k rows of key head Hk-1
  for (std::int64_t j = 0; j < dk * hidden; ++j) {
    W.set(j, 0.0);  // q rows of key head 0
    W.set(tiny_k + j, 1e-29 * W.get(tiny_k + j));
  }
}

Tensor extreme_rows(const Tensor& hidden, const ref::CuSeqlens& cu_seqlens) {
  Tensor out = hidden;
  const std::int64_t width = hidden.dim(-1), batch = hidden.dim(1);
  // Row r of token t of sequence i (THD: cu_seqlens; SBHD [S, B, hidden]: sequence i is batch column i).
  std::vector<std::int64_t> starts, lengths;
  if (cu_seqlens) {
    for (std::size_t i = 1; i < cu_seqlens->size(); ++i)
      starts.push_back((*cu_seqlens)[i - 1]), lengths.push_back((*cu_seqlens)[i] - (*cu_seqlens)[i - 1]);
  } else {
    for (std::int64_t b = 0; b < batch; ++b) starts.push_back(b), lengths.push_back(hidden.dim(0));
  }
  const std::int64_t stride = cu_seqlens ? 1 : batch;
  for (std::size_t i = 0; i < starts.size(); ++i) {
    const std::int64_t L = lengths[i];
    for (std::int64_t t = 0; t < L; ++t) {
      const std::int64_t r = (starts[i] + t * stride) * width;
      const bool zero = t == 0 && i % 2 == 0, spike = !zero && t == L / 2, large = !zero && !spike && t == L - 1;
      for (std::int64_t j = 0; j < width; ++j)
        out.set(r + j, zero || spike || j == 0 ? 0.0 : large ? 1e4 * hidden.get(r + j) : hidden.get(r + j));
      if (spike) out.set(r, 1e4);
    }
  }
  return out;
}

StageRequest stage_request(const RunSpec& spec, int cp_size) {
  return {spec.stages, spec.cp.mode == CpMode::Chunkwise ? cp_size : 0};
}

namespace {

// Micro-batch rows (cu order: THD tokens, SBHD batch-major b*S + s) -> natural rows (SBHD s*B + b).
std::int64_t natural_row(const Case& k, std::int64_t row) {
  if (k.cu_seqlens) return row;
  const std::int64_t S = k.hidden.dim(0), B = k.hidden.dim(1);
  return (row % S) * B + row / S;
}

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
// (their magnitudes add to m_s, GdrGrads::dgamma_terms: near the diagonal they are O(1) and cancel), in
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
  const Tensor m = ref::gdr_chunked_backward(fwd.mixer.core_in, d_o, std::nullopt, chunk).dgamma_terms;
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

std::vector<std::int64_t> zigzag_rows(const Case& k, int c, int r) {
  if (k.cu_seqlens) return layouts::thd_partition(layouts::Layout::zigzag, *k.cu_seqlens, c, r).positions();
  return layouts::sbhd_partition(layouts::Layout::zigzag, k.hidden.dim(0), c, r).positions();
}

std::vector<cost::CostGeometry> planned_micro_batches(const RunSpec& spec) {
  const ref::LayerConfig config(spec.layer);
  validate_static(spec.cp, config);
  check_lengths_per_micro_batch(spec);
  std::vector<cost::CostGeometry> out;
  for (std::size_t m = 0; m < micro_batch_sizes(spec).size(); ++m) {
    std::vector<std::int64_t> cu{0};
    if (spec.format == Format::Thd) {
      for (auto L : lengths_of(spec, m)) cu.push_back(cu.back() + L);
      cu = layouts::checked_cu_seqlens(cu);
    } else {
      for (std::int64_t b = 1; b <= spec.batch; ++b) cu.push_back(b * spec.seq_len);
    }
    const int c = validate_micro_batch_of(spec, config, lengths_of(spec, m), m);
    out.push_back({config, spec.cp, spec.dtype, spec.format, std::move(cu), c});
  }
  return out;
}

cost::RankPlace place_of(const RunSpec& spec, int world_rank, int cp_size) {
  return {(world_rank / spec.cp.tp) % cp_size, world_rank % spec.cp.tp};
}

std::vector<RankOutput> run_rank(const RunSpec& spec, std::span<const Case> cases, std::unique_ptr<Backend> backend,
                                 Communicator& world) {
  const int tp = spec.cp.tp, cp = spec.cp.cp;
  const TpCpGrid grid = make_tp_cp_grid(world, tp);
  cost::CountingBackend be(std::move(backend));
  be.count_host_syncs(world.shared_accounting());
  const GdnCpLayer layer(cases[0].config, spec.cp, cases[0].params, be, *grid.cp, tp > 1 ? grid.tp.get() : nullptr);
  std::vector<RankOutput> outputs;
  const std::vector<int> sizes = micro_batch_sizes(spec);
  for (std::size_t m = 0; m < sizes.size(); ++m) {
    const int c = sizes[m];
    const Case& k = cases[cases.size() == 1 ? 0 : m];
    Communicator* group = c == cp ? nullptr : &layer.dynamic_group(c);
    const MicroBatchSpec mbs{spec.format, k.cu_seqlens.value_or(std::vector<std::int64_t>{}), spec.seq_len, spec.batch};
    auto mb = layer.prepare(mbs, group, group ? c : 0);
    const auto rows = zigzag_rows(k, c, mb->cp_rank);
    RankOutput o;
    o.cp_size = c;
    o.cp_rank = mb->cp_rank;
    const Buffer hidden = be.upload(layouts::gather_rows(k.hidden, rows), spec.dtype);
    Context ctx;
    StageRecorder recorder;
    if (spec.stages) ctx.tap.recorder = &recorder;
    Buffer out;
    {
      ScopedCounter counter(world.accounting());
      const std::int64_t live = be.live_bytes();
      const double flops = be.flops();
      out = layer.forward(mb, hidden, ctx);
      o.forward = counter.delta();
      o.forward_flops = be.flops() - flops;
      o.saved_bytes = be.live_bytes() - live - static_cast<std::int64_t>(out.nbytes());
    }
    const Buffer grad_output = be.upload(layouts::gather_rows(k.grad_output, rows), spec.dtype);
    ScopedCounter counter(world.accounting());
    const double flops = be.flops();
    LayerBackward back = layer.backward(ctx, grad_output);
    o.backward = counter.delta();
    o.backward_flops = be.flops() - flops;
    o.out = be.download(out).to(DType::F64);
    o.grad_hidden = be.download(back.grad_hidden).to(DType::F64);
    o.grads = download_grads(be, back.grads);
    o.tp_rank = world.rank() % tp;
    o.stages = download_stages(be, recorder);
    outputs.push_back(std::move(o));
  }
  return outputs;
}

RankBackends make_rank_backends(int ranks, const BackendFactory& factory, DType dtype) {
  RankBackends out;
  for (int r = 0; r < ranks; ++r) {
    out.backends.push_back(factory(dtype));
    out.options.movers.push_back(out.backends.back()->data_mover());
  }
  return out;
}

namespace {

// Natural rows of CP rank r's zigzag shard, one per token (SBHD: every batch column of its S rows).
std::vector<std::int64_t> zigzag_tokens(const Case& k, int c, int r) {
  const std::vector<std::int64_t> rows = zigzag_rows(k, c, r);
  if (k.cu_seqlens) return rows;
  std::vector<std::int64_t> tokens;
  const std::int64_t B = k.hidden.dim(1);
  for (const std::int64_t s : rows)
    for (std::int64_t b = 0; b < B; ++b) tokens.push_back(s * B + b);
  return tokens;
}

}  // namespace

void assemble_stages(const Case& k, std::span<const RankOutput* const> ranks, MicroBatchRun& run) {
  const int c = run.cp_size;
  const std::int64_t tokens = k.hidden.dim(0) * k.hidden.dim(1);
  for (const RankOutput* rank : ranks) {
    const RankOutput& o = *rank;
    for (const HostStage& h : o.stages) {
      if (h.replicated_over_tp && o.tp_rank != 0) continue;
      const bool boundary = h.name.ends_with("boundary_state");
      const Shape shape = ref::stage_shape(k.config, h.name, boundary ? c : tokens);
      Tensor& full = run.answer.stages.try_emplace(h.name, DType::F64, shape).first->second;
      const std::int64_t width = full.numel() / shape[0], cols = static_cast<std::int64_t>(h.cols.size());
      StagePiece piece{o.cp_rank, {}, h.cols};
      for (std::size_t i = 0; i < h.rows.size(); ++i) {
        const std::int64_t row = boundary ? h.rows[i] : natural_row(k, h.rows[i]);
        if (!h.sum) piece.rows.push_back(row);
        for (std::int64_t j = 0; j < cols; ++j) {
          const std::int64_t at = row * width + h.cols[static_cast<std::size_t>(j)];
          const double v = h.data.get(static_cast<std::int64_t>(i) * cols + j);
          full.set(at, h.sum ? full.get(at) + v : v);
        }
      }
      if (h.sum) piece = {o.cp_rank, zigzag_tokens(k, c, o.cp_rank), {}};
      run.stage_pieces[h.name].push_back(std::move(piece));
    }
  }
}

std::vector<MicroBatchRun> run_in_process(const RunSpec& spec, std::span<const Case> cases,
                                          const BackendFactory& factory) {
  const int tp = spec.cp.tp, n = tp * spec.cp.cp;
  const std::size_t micro_batches = micro_batch_sizes(spec).size();
  if (cases.empty() || (cases.size() != 1 && cases.size() != micro_batches))
    throw ConfigError(std::to_string(cases.size()) + " cases for " + std::to_string(micro_batches) +
                      " micro-batch(es): give one per micro-batch (make_cases), or one for all");
  validate_static(spec.cp, cases[0].config);
  for (std::size_t m = 0; m < micro_batches; ++m)
    (void)validate_micro_batch_of(spec, cases[0].config, lengths_in(cases[cases.size() == 1 ? 0 : m]), m);
  std::vector<std::vector<RankOutput>> outputs(static_cast<std::size_t>(n));
  RankBackends ranks = make_rank_backends(n, factory, spec.dtype);
  run_world(
      n,
      [&](Communicator& world) {
        const auto r = static_cast<std::size_t>(world.rank());
        outputs[r] = run_rank(spec, cases, std::move(ranks.backends[r]), world);
      },
      ranks.options);

  std::vector<MicroBatchRun> runs;
  for (std::size_t m = 0; m < outputs[0].size(); ++m) {
    const Case& k = cases[cases.size() == 1 ? 0 : m];
    const int c = outputs[0][m].cp_size;
    MicroBatchRun run{c,
                      {Tensor(DType::F64, k.hidden.shape()), Tensor(DType::F64, k.hidden.shape()), {}, {}, {}},
                      outputs[0][m].forward,
                      outputs[0][m].backward,
                      {},
                      {}};
    std::vector<ref::LayerParams> tp_grads(static_cast<std::size_t>(tp));
    // World rank = cp_rank * tp + tp_rank; the first CP sub-group (static CP ranks [0, c)) holds the
    // answer, and its CP rank 0 each TP rank's gradient shard.
    for (int rank = 0; rank < c * tp; ++rank) {
      const RankOutput& o = outputs[static_cast<std::size_t>(rank)][m];
      if (rank % tp == 0) {
        const auto rows = zigzag_rows(k, c, o.cp_rank);
        put_rows(o.out, rows, run.answer.out);
        put_rows(o.grad_hidden, rows, run.answer.grad_hidden);
      }
      if (rank < tp) tp_grads[static_cast<std::size_t>(rank)] = o.grads;
    }
    run.answer.grads = ref::tp_unshard(k.config, tp_grads);
    if (spec.stages) {
      // World rank = cp_rank * tp + tp_rank: the first CP sub-group (static CP ranks [0, c)) holds the answer.
      std::vector<const RankOutput*> group;
      for (int rank = 0; rank < c * tp; ++rank) group.push_back(&outputs[static_cast<std::size_t>(rank)][m]);
      assemble_stages(k, group, run);
    }
    for (auto& rank_outputs : outputs) run.ranks.push_back(std::move(rank_outputs[m]));
    runs.push_back(std::move(run));
  }
  return runs;
}

}  // namespace gdnv::cp
