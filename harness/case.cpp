#include "harness/case.hpp"

#include <cmath>

#include "core/rng.hpp"
#include "layouts/partition.hpp"
#include "reference/case_params.hpp"

namespace gdnv::harness {
namespace {

Tensor rounded(const Tensor& t, DType dtype) { return t.to(dtype).to(DType::F64); }

// A_log with A = exp(A_log) log-uniform in [lo, hi], one value per head.
Tensor a_log_between(std::uint64_t seed, std::int64_t heads, double lo, double hi) {
  const Rng rng(seed, "A_log/regime");
  Tensor t(DType::F64, {heads});
  for (std::int64_t i = 0; i < heads; ++i) t.set(i, det_log(lo) + (det_log(hi) - det_log(lo)) * rng.uniform(i));
  return t;
}

}  // namespace

Case make_case(const RunSpec& spec, std::size_t micro_batch) {
  const ref::LayerConfig config(spec.layer);
  Case k{config, ref::case_params(config, spec.seed), {}, {}, std::nullopt};
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
  // x_0 of a spike row: rmsnorm maps 1e4 e_0 to sqrt(hidden) e_0, times ln_w[0].
  const double root = std::sqrt(static_cast<double>(hidden)) * params.at(ref::kInProjNorm).get(0);
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

std::vector<std::int64_t> zigzag_rows(const Case& k, int c, int r) {
  if (k.cu_seqlens) return layouts::thd_partition(layouts::Layout::zigzag, *k.cu_seqlens, c, r).positions();
  return layouts::sbhd_partition(layouts::Layout::zigzag, k.hidden.dim(0), c, r).positions();
}

std::vector<std::int64_t> zigzag_rows(const cp::CheckedMicroBatch& mb, int r) {
  if (mb.format() == Format::Thd) return layouts::positions_of(layouts::zigzag_runs(mb.cu(), mb.cp_size(), r));
  const std::int64_t seq[] = {0, mb.seq_len()};
  return layouts::positions_of(layouts::zigzag_runs(seq, mb.cp_size(), r));
}

std::int64_t natural_row(const Case& k, std::int64_t row) {
  if (k.cu_seqlens) return row;
  const std::int64_t S = k.hidden.dim(0), B = k.hidden.dim(1);
  return (row % S) * B + row / S;
}

}  // namespace gdnv::harness
