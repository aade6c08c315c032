#include "reference/layer.hpp"

#include <algorithm>
#include <utility>

#include "core/eigen.hpp"
#include "core/error.hpp"
#include "core/gemm.hpp"
#include "core/scratch_file.hpp"
#include "reference/gates.hpp"
#include "reference/l2norm.hpp"
#include "reference/sequences.hpp"
#include "reference/tp_sharding.hpp"

namespace gdnv::ref {
namespace {

// Columns [begin, begin + count) of the row-major matrix m [N, C], as [N, count].
Tensor cols(const Tensor& m, std::int64_t begin, std::int64_t count) {
  const std::int64_t N = m.numel() / m.dim(-1);
  Tensor out = Tensor::uninitialized(DType::F64, {N, count});
  as_matrix(out, N, count) = as_matrix(m, N, m.dim(-1)).middleCols(begin, count);
  return out;
}

// m[:, begin : begin + part.cols] = part, with m [N, C] and part [N, count] (any shape of that numel).
void put_cols(Tensor& m, std::int64_t begin, const Tensor& part) {
  const std::int64_t N = m.numel() / m.dim(-1), count = part.numel() / N;
  as_matrix(m, N, m.dim(-1)).middleCols(begin, count) = as_matrix(part, N, count);
}

// [X, Y, F] -> [Y, X, F]: SBHD <-> batch-major tokens. With X or Y of 1 (THD, or one sequence) the
// order of the values does not change.
Tensor swap_leading(Tensor t) {
  const std::int64_t X = t.dim(0), Y = t.dim(1), F = t.dim(2);
  if (X == 1 || Y == 1) return std::move(t).reshaped({Y, X, F});
  Tensor out = Tensor::uninitialized(DType::F64, {Y, X, F});
  const double* src = t.data<double>();
  double* dst = out.data<double>();
  for (std::int64_t x = 0; x < X; ++x)
    for (std::int64_t y = 0; y < Y; ++y) std::copy_n(src + (x * Y + y) * F, F, dst + (y * X + x) * F);
  return out;
}

// A batch-major stage tensor [B, S, ...] (or [B*S, ...]) in natural token order, shaped by stage_shape.
Tensor natural_rows(const LayerConfig& config, const std::string& name, const Tensor& t, std::int64_t B,
                    std::int64_t S) {
  const std::int64_t F = t.numel() / (B * S);
  return swap_leading(t.reshaped({B, S, F})).reshaped(stage_shape(config, name, B * S));
}

const Tensor& param(const LayerParams& params, const char* name) {
  const auto it = params.find(name);
  if (it == params.end()) throw ConfigError(std::string("parameter '") + name + "' is missing");
  return it->second;
}

void check_last_dim(const Tensor& x, std::int64_t want, const char* what) {
  if (x.rank() == 0 || x.dim(-1) != want)
    throw Error(std::string(what) + ": input " + shape_str(x.shape()) + " does not end in " + std::to_string(want));
}

// y = x W^T for x [N, in], W [out, in]. core/gemm fixes each output's order of arithmetic, so the
// thread count changes no bit.
Tensor linear(const Tensor& x, const Tensor& W, int threads) {
  check_last_dim(x, W.dim(1), "linear");
  const std::int64_t out_dim = W.dim(0), in_dim = W.dim(1), N = x.numel() / in_dim;
  Tensor y = Tensor::uninitialized(DType::F64, {N, out_dim});
  auto Y = as_matrix(y, N, out_dim);
  product_into(as_matrix(x, N, in_dim), as_matrix(W, out_dim, in_dim).transpose(), Y, {.threads = threads});
  return y;
}

// For y = x W^T: dx = dy W [N, in] and dW = dy^T x [out, in].
void linear_backward(const Tensor& x, const Tensor& W, const Tensor& dy, Tensor& dx, Tensor& dW, int threads) {
  check_last_dim(x, W.dim(1), "linear_backward");
  check_last_dim(dy, W.dim(0), "linear_backward");
  const std::int64_t out_dim = W.dim(0), in_dim = W.dim(1), N = x.numel() / in_dim;
  dx = Tensor::uninitialized(DType::F64, {N, in_dim});
  dW = Tensor::uninitialized(DType::F64, W.shape());
  const auto dY = as_matrix(dy, N, out_dim);
  auto dX = as_matrix(dx, N, in_dim);
  auto dWm = as_matrix(dW, out_dim, in_dim);
  product_into(dY, as_matrix(W, out_dim, in_dim), dX, {.threads = threads});
  product_into(dY.transpose(), as_matrix(x, N, in_dim), dWm, {.threads = threads});
}

GdrOutputs core_forward(const GdrInputs& in, const LayerOptions& options) {
  return options.core == CoreForm::Recurrent
             ? gdr_recurrent_forward(in, options.threads)
             : gdr_chunked_forward(in, options.chunk_size, options.threads, options.keep_core_tape);
}

GdrGrads core_backward(const GdrInputs& in, const Tensor& d_o, const LayerOptions& options, const GdrTape* tape) {
  return options.core == CoreForm::Recurrent
             ? gdr_recurrent_backward(in, d_o, std::nullopt, options.threads)
             : gdr_chunked_backward(in, d_o, std::nullopt, options.chunk_size, options.threads, tape);
}

}  // namespace

InProj in_proj_forward(const LayerConfig& config, const LayerParams& params, const Tensor& h, int threads) {
  RmsNorm norm = rmsnorm_forward(h, param(params, kInProjNorm), config.eps(), threads);
  Tensor p = linear(norm.y, param(params, kInProj), threads);
  return {std::move(norm.y), std::move(norm.rstd), std::move(p)};
}

InProjGrads in_proj_backward(const LayerParams& params, const Tensor& h, const InProj& fwd, const Tensor& dp,
                             int threads) {
  InProjGrads g;
  Tensor dx;
  linear_backward(fwd.x, param(params, kInProj), dp, dx, g.d_weight, threads);
  RmsNormGrads norm = rmsnorm_backward(h, param(params, kInProjNorm), fwd.rstd, dx, threads);
  g.dh = std::move(norm.dx);
  g.d_norm_weight = std::move(norm.dw);
  return g;
}

Mixer mixer_forward(const LayerConfig& config, const LayerParams& params, const Tensor& p, const CuSeqlens& cu_seqlens,
                    const LayerOptions& options) {
  if (p.rank() != 3) throw Error("mixer_forward: P " + shape_str(p.shape()) + " is not [B, T, in_proj_dim]");
  check_last_dim(p, config.in_proj_dim(), "mixer_forward");
  const std::int64_t B = p.dim(0), T = p.dim(1), C = config.conv_dim(), qk = config.qk_dim();
  const std::int64_t Hk = config.Hk(), Hv = config.Hv(), dk = config.dk(), dv = config.dv();
  Mixer m;
  m.conv_in.x = cols(p, 0, C).reshaped({B, T, C});
  m.conv_in.weight = param(params, kConvWeight).reshaped({C, config.W()});
  if (config.conv_bias()) m.conv_in.bias = param(params, kConvBias);
  m.conv_in.cu_seqlens = cu_seqlens;
  m.conv_in.activation = Activation::Silu;
  m.z = cols(p, C, config.v_dim()).reshaped({B, T, Hv, dv});
  m.b = cols(p, C + config.v_dim(), Hv).reshaped({B, T, Hv});
  m.a = cols(p, C + config.v_dim() + Hv, Hv).reshaped({B, T, Hv});

  const Tensor conv_y = conv1d_forward(m.conv_in);  // [B, T, C]
  Gates gates = gates_forward(m.a, m.b, param(params, kALog), param(params, kDtBias));
  m.core_in.q = cols(conv_y, 0, qk).reshaped({B, T, Hk, dk});
  m.core_in.k = cols(conv_y, qk, qk).reshaped({B, T, Hk, dk});
  m.core_in.v = cols(conv_y, 2 * qk, config.v_dim()).reshaped({B, T, Hv, dv});
  m.core_in.g = std::move(gates.g);
  for (std::int64_t i = 0; i < options.gate_offset.numel(); ++i)
    m.core_in.g.set(i, m.core_in.g.get(i) + options.gate_offset.get(i));
  m.core_in.beta = std::move(gates.beta);
  m.core_in.cu_seqlens = cu_seqlens;
  m.core_in.use_qk_l2norm = true;  // Megatron: fla l2norm(x) = x / sqrt(sum x^2 + 1e-6) on q and k
  GdrOutputs core = core_forward(m.core_in, options);
  m.o = std::move(core.o);
  m.core_tape = std::move(core.tape);
  m.y = gated_rmsnorm_forward(m.o, m.z, param(params, kOutNorm), config.eps(), options.threads);
  return m;
}

MixerGrads mixer_backward(const LayerConfig& config, const LayerParams& params, const Mixer& fwd, const Tensor& dy,
                          const LayerOptions& options, std::map<std::string, Tensor>* stages, Tensor* out_norm_terms) {
  if (dy.shape() != fwd.o.shape())
    throw Error("mixer_backward: dy " + shape_str(dy.shape()) + " is not the shape of o " + shape_str(fwd.o.shape()));
  const std::int64_t C = config.conv_dim(), qk = config.qk_dim(), Hv = config.Hv();
  // Each gradient is handed to `stages` or freed as soon as the next one is computed from it: at real
  // sizes these are hundreds of MB each (docs/DESIGN.md §7).
  const auto done_with = [&](const char* stage, Tensor& t) {
    if (stages) (*stages)[stage] = std::move(t);
    t = Tensor();
  };
  if (stages) (*stages)["stage_grad::gated_norm"] = dy;
  GatedNormGrads norm =
      gated_rmsnorm_backward(fwd.o, fwd.z, param(params, kOutNorm), fwd.y.rstd, dy, out_norm_terms, options.threads);
  GdrGrads core = core_backward(fwd.core_in, norm.d_o, options, fwd.core_tape.get());
  for (std::int64_t i = 0; i < options.gate_grad_offset.numel(); ++i)
    core.dg.set(i, core.dg.get(i) + options.gate_grad_offset.get(i));
  done_with("stage_grad::core", norm.d_o);
  GateGrads gates = gates_backward(fwd.a, fwd.b, param(params, kALog), param(params, kDtBias), core.dg, core.dbeta);
  done_with("stage_grad::beta", core.dbeta);
  done_with("stage_grad::g", core.dg);

  Tensor d_conv_y = Tensor::uninitialized(DType::F64, fwd.conv_in.x.shape());  // [B, T, C]: q | k | v
  put_cols(d_conv_y, 0, core.dq);
  put_cols(d_conv_y, qk, core.dk);
  put_cols(d_conv_y, 2 * qk, core.dv);
  done_with("stage_grad::v", core.dv);
  done_with("stage_grad::conv_k", core.dk);
  done_with("stage_grad::conv_q", core.dq);
  Conv1dGrads conv = conv1d_backward(fwd.conv_in, d_conv_y);
  done_with("stage_grad::conv", d_conv_y);

  MixerGrads g;
  g.dp = Tensor::uninitialized(DType::F64, {fwd.conv_in.x.dim(0), fwd.conv_in.x.dim(1), config.in_proj_dim()});
  put_cols(g.dp, 0, conv.dx);
  put_cols(g.dp, C, norm.dz);
  put_cols(g.dp, C + config.v_dim(), gates.db);
  put_cols(g.dp, C + config.v_dim() + Hv, gates.da);
  g.params[kConvWeight] = conv.dweight.reshaped({C, 1, config.W()});
  if (config.conv_bias()) g.params[kConvBias] = std::move(*conv.dbias);
  g.params[kALog] = std::move(gates.dA_log);
  g.params[kDtBias] = std::move(gates.ddt_bias);
  g.params[kOutNorm] = std::move(norm.dw);
  return g;
}

Tensor out_proj_forward(const LayerParams& params, const Tensor& y, int threads) {
  return linear(y, param(params, kOutProj), threads);
}

OutProjGrads out_proj_backward(const LayerParams& params, const Tensor& y, const Tensor& dout, int threads) {
  OutProjGrads g;
  linear_backward(y, param(params, kOutProj), dout, g.dy, g.d_weight, threads);
  return g;
}

void validate_layer_input(const LayerConfig& config, const Tensor& hidden_states, const CuSeqlens& cu_seqlens) {
  const Shape& s = hidden_states.shape();
  if (hidden_states.rank() != 3 || s[2] != config.hidden())
    throw ConfigError("hidden_states has shape " + shape_str(s) + "; expected [S, B, " +
                      std::to_string(config.hidden()) + "] (SBHD) or [T, 1, " + std::to_string(config.hidden()) +
                      "] with cu_seqlens (THD), the last dimension being hidden_size");
  if (hidden_states.dtype() != DType::F64)
    throw ConfigError("hidden_states has dtype " + std::string(dtype_name(hidden_states.dtype())) +
                      "; the oracle computes in fp64: convert it with Tensor::to(DType::F64)");
  if (cu_seqlens && s[1] != 1)
    throw ConfigError("hidden_states " + shape_str(s) + " has batch " + std::to_string(s[1]) +
                      " with cu_seqlens; THD input is [T, 1, hidden] with the sequences packed along T");
  sequences_of(s[1], s[0], cu_seqlens);  // validates cu_seqlens against T
}

LayerForward layer_forward(const LayerConfig& config, const LayerParams& params, const Tensor& hidden_states,
                           const CuSeqlens& cu_seqlens, const LayerOptions& options) {
  validate_params(config, params);
  validate_layer_input(config, hidden_states, cu_seqlens);
  const std::int64_t S = hidden_states.dim(0), B = hidden_states.dim(1), hidden = config.hidden();
  LayerForward f;
  f.h = swap_leading(hidden_states).reshaped({B * S, hidden});
  f.options = options;
  f.in_proj = in_proj_forward(config, params, f.h, options.threads);
  // The mixer copies P's sections out; P itself is not kept (forward_stages puts it back together).
  f.mixer =
      mixer_forward(config, params, std::move(f.in_proj.p).reshaped({B, S, config.in_proj_dim()}), cu_seqlens, options);
  f.in_proj.p = Tensor();
  f.out = swap_leading(out_proj_forward(params, f.mixer.y.y.reshaped({B * S, config.v_dim()}), options.threads)
                           .reshaped({B, S, hidden}));
  return f;
}

namespace {

// The layer's backward. With `owned` (the caller's fwd and grad_output, to be used up): each forward tensor
// is freed once the backward is past its last use, which takes a real-size layer's peak memory down by
// the mixer's activations (docs/DESIGN.md §7).
LayerGrads backward(const LayerConfig& config, const LayerParams& params, const LayerForward& fwd,
                    const Tensor& grad_output, StageTensors* stages, LayerForward* owned, Tensor* owned_grad) {
  const std::int64_t S = fwd.out.dim(0), B = fwd.out.dim(1), hidden = config.hidden();
  if (grad_output.shape() != fwd.out.shape() || grad_output.dtype() != DType::F64)
    throw ConfigError("grad_output is " + std::string(dtype_name(grad_output.dtype())) + " " +
                      shape_str(grad_output.shape()) + "; expected F64 " + shape_str(fwd.out.shape()) +
                      ", the shape of out");
  const int threads = fwd.options.threads;
  OutProjGrads out = out_proj_backward(params, fwd.mixer.y.y.reshaped({B * S, config.v_dim()}),
                                       swap_leading(grad_output).reshaped({B * S, hidden}), threads);
  if (owned_grad) *owned_grad = Tensor();
  if (owned) owned->mixer.y.y = Tensor();
  StageTensors mixer_stages;
  MixerGrads mixer =
      mixer_backward(config, params, fwd.mixer, std::move(out.dy).reshaped({B, S, config.Hv(), config.dv()}),
                     fwd.options, stages ? &mixer_stages : nullptr);
  if (owned) owned->mixer = Mixer();
  const Tensor dp = std::move(mixer.dp).reshaped({B * S, config.in_proj_dim()});
  InProjGrads in = in_proj_backward(params, fwd.h, fwd.in_proj, dp, threads);
  if (stages) {
    mixer_stages["stage_grad::in_proj"] = dp;
    Tensor dx;
    Tensor d_weight;
    linear_backward(fwd.in_proj.x, param(params, kInProj), dp, dx, d_weight, threads);
    mixer_stages["stage_grad::x_norm"] = dx;
    for (auto& [name, t] : mixer_stages) (*stages)[name] = natural_rows(config, name, t, B, S);
  }

  LayerGrads g;
  g.grad_hidden = swap_leading(std::move(in.dh).reshaped({B, S, hidden}));
  g.params = std::move(mixer.params);
  g.params[kInProjNorm] = std::move(in.d_norm_weight);
  g.params[kInProj] = std::move(in.d_weight);
  g.params[kOutProj] = std::move(out.d_weight);
  return g;
}

}  // namespace

LayerGrads layer_backward(const LayerConfig& config, const LayerParams& params, const LayerForward& fwd,
                          const Tensor& grad_output, StageTensors* stages) {
  return backward(config, params, fwd, grad_output, stages, nullptr, nullptr);
}

LayerGrads layer_backward_freeing(const LayerConfig& config, const LayerParams& params, LayerForward& fwd,
                                  Tensor& grad_output, StageTensors* stages) {
  return backward(config, params, fwd, grad_output, stages, &fwd, &grad_output);
}

namespace {

// P's (and dP's) columns of GVA group `group` of `groups`: within each section q, k, v, z, beta, alpha the
// group's heads, as tp_shard cuts in_proj.weight's rows. Writes the group's dp_group [N, its in_proj_dim]
// into dp [N, in_proj_dim].
void put_group_cols(const LayerConfig& config, std::int64_t groups, std::int64_t group, const Tensor& dp_group,
                    Tensor& dp) {
  const std::int64_t N = dp.numel() / dp.dim(-1), qk = config.qk_dim(), v = config.v_dim(), Hv = config.Hv();
  const auto from = as_matrix(dp_group, N, dp_group.numel() / N);
  auto to = as_matrix(dp, N, config.in_proj_dim());
  std::int64_t full_col = 0, group_col = 0;
  for (const std::int64_t size : {qk, qk, v, v, Hv, Hv}) {
    const std::int64_t part = size / groups;
    to.middleCols(full_col + group * part, part) = from.middleCols(group_col, part);
    full_col += size;
    group_col += part;
  }
}

// x W^T for x = rmsnorm(h) * ln_w, with x recomputed `rows` rows at a time rather than kept whole: each
// row's norm and each product element's chain are the whole x's.
Tensor project_normed(const Tensor& h, const Tensor& ln_w, double eps, const Tensor& W, int threads,
                      std::int64_t rows) {
  const std::int64_t N = h.dim(0), hidden = h.dim(1), out_dim = W.dim(0);
  Tensor p = Tensor::uninitialized(DType::F64, {N, out_dim});
  for (std::int64_t r0 = 0; r0 < N; r0 += rows) {
    const std::int64_t n = std::min(rows, N - r0);
    const RmsNorm x = rmsnorm_forward_rows(h, r0, n, ln_w, eps, threads);
    product_into(as_matrix(x.y, n, hidden), as_matrix(W, out_dim, hidden).transpose(),
                 as_matrix(p, N, out_dim).middleRows(r0, n), {.threads = threads});
  }
  return p;
}

// out_norm.weight's gradient: its terms [rows, dv] added to dw row by row in order, as
// gated_rmsnorm_backward's dw sums them from 0; blocks of rows in order continue the same sums.
void add_rows_in_order(const Tensor& terms, Tensor& dw) {
  const std::int64_t n = dw.numel();
  double* pdw = dw.data<double>();
  const double* pt = terms.data<double>();
  for (std::int64_t r = 0; r < terms.numel() / n; ++r)
    for (std::int64_t i = 0; i < n; ++i) pdw[i] += pt[r * n + i];
}

// Each group's dP columns [N, lp] and out_norm terms [N, lv], kept in scratch space (the largest per-token
// intermediates: at T = 32768 of the real-scale layer a 4.3 GB file) until every group has run.
class GroupSpill {
 public:
  GroupSpill(std::int64_t N, std::int64_t lp, std::int64_t lv, std::int64_t groups)
      : N_(N), lp_(lp), lv_(lv), file_(groups * N * (lp + lv)) {}
  void put(std::int64_t group, const Tensor& dp, const Tensor& terms) {
    file_.write(slab(group), dp.data<double>(), N_ * lp_);
    file_.write(slab(group) + N_ * lp_, terms.data<double>(), N_ * lv_);
  }
  // Rows [r0, r0 + dp_g.dim(0)) of the group's dP and terms.
  void get(std::int64_t group, std::int64_t r0, Tensor& dp_g, Tensor& terms_g) const {
    const std::int64_t n = dp_g.dim(0);
    file_.read(slab(group) + r0 * lp_, dp_g.data<double>(), n * lp_);
    file_.read(slab(group) + N_ * lp_ + r0 * lv_, terms_g.data<double>(), n * lv_);
  }

 private:
  std::int64_t slab(std::int64_t group) const { return group * N_ * (lp_ + lv_); }
  std::int64_t N_, lp_, lv_;
  ScratchFile file_;
};

}  // namespace

GroupedRun layer_run_grouped(const LayerConfig& config, const LayerParams& params, Tensor hidden_states,
                             Tensor grad_output, const CuSeqlens& cu_seqlens, const LayerOptions& options,
                             std::int64_t groups, std::int64_t row_block) {
  if (row_block < 1)
    throw ConfigError("layer_run_grouped: row_block must be at least 1, got " + std::to_string(row_block));
  validate_params(config, params);
  validate_layer_input(config, hidden_states, cu_seqlens);
  if (grad_output.shape() != hidden_states.shape() || grad_output.dtype() != DType::F64)
    throw ConfigError("grad_output is " + std::string(dtype_name(grad_output.dtype())) + " " +
                      shape_str(grad_output.shape()) + "; expected F64 " + shape_str(hidden_states.shape()) +
                      ", the shape of hidden_states");
  const LayerConfig local = tp_local_config(config, groups);
  LayerOptions group_options = options;
  group_options.keep_core_tape = true;
  const std::int64_t S = hidden_states.dim(0), B = hidden_states.dim(1), N = B * S, hidden = config.hidden();
  const std::int64_t lv = local.v_dim(), lp = local.in_proj_dim();
  const int threads = options.threads;
  const Tensor h = swap_leading(std::move(hidden_states)).reshaped({N, hidden});
  Tensor dout = swap_leading(std::move(grad_output)).reshaped({N, hidden});
  const Tensor& ln_w = param(params, kInProjNorm);
  const auto W_out = as_matrix(param(params, kOutProj), hidden, config.v_dim());

  GroupedRun run;
  LayerParams& grads = run.grads.params;
  for (const char* name : {kConvWeight, kALog, kDtBias}) grads[name] = Tensor(DType::F64, param(params, name).shape());
  // Written whole: out and out_proj's gradient by the groups' columns, the first group's product plain.
  grads[kOutProj] = Tensor::uninitialized(DType::F64, param(params, kOutProj).shape());
  if (config.conv_bias()) grads[kConvBias] = Tensor(DType::F64, param(params, kConvBias).shape());
  Tensor out = Tensor::uninitialized(DType::F64, {N, hidden});
  GroupSpill spill(N, lp, lv, groups);
  for (std::int64_t group = 0; group < groups; ++group) {
    const LayerParams shard = tp_shard(config, params, groups, group);
    Mixer m = mixer_forward(
        local, shard, project_normed(h, ln_w, config.eps(), shard.at(kInProj), threads, row_block).reshaped({B, S, lp}),
        cu_seqlens, group_options);
    // The group's value heads are W_out's columns [group * lv, (group + 1) * lv): out's chains continue.
    const auto Y = as_matrix(m.y.y, N, lv);
    product_into(Y, W_out.middleCols(group * lv, lv).transpose(), as_matrix(out, N, hidden),
                 {.accumulate = group > 0, .threads = threads});
    product_into(as_matrix(dout, N, hidden).transpose(), Y,
                 as_matrix(grads[kOutProj], hidden, config.v_dim()).middleCols(group * lv, lv), {.threads = threads});
    Tensor dy = Tensor::uninitialized(DType::F64, {B, S, local.Hv(), local.dv()});
    product_into(as_matrix(dout, N, hidden), W_out.middleCols(group * lv, lv), as_matrix(dy, N, lv),
                 {.threads = threads});
    Tensor group_terms;
    MixerGrads mg = mixer_backward(local, shard, m, dy, group_options, nullptr, &group_terms);
    m = Mixer();
    spill.put(group, mg.dp, group_terms);
    for (const auto& [name, g] : mg.params)
      if (name != kOutNorm) tp_place(config, name, g, groups, group, grads[name]);
  }
  dout = Tensor();
  // dX = dP W_in, dW_in = dP^T x and out_norm's sum, a block of rows at a time: dX's rows are
  // independent, and dW_in's and out_norm's chains over the rows continue from block to block.
  const std::int64_t P = config.in_proj_dim();
  const auto W_in = as_matrix(param(params, kInProj), P, hidden);
  // The first block of rows writes dW_in whole (with no rows it stays 0).
  grads[kInProj] = N > 0 ? Tensor::uninitialized(DType::F64, {P, hidden}) : Tensor(DType::F64, {P, hidden});
  grads[kOutNorm] = Tensor(DType::F64, {config.dv()});
  Tensor dx = Tensor::uninitialized(DType::F64, {N, hidden}), rstd = Tensor::uninitialized(DType::F64, {N});
  for (std::int64_t r0 = 0; r0 < N; r0 += row_block) {
    const std::int64_t n = std::min(row_block, N - r0);
    // Every group's columns, read back whole.
    Tensor dp = Tensor::uninitialized(DType::F64, {n, P}), terms = Tensor::uninitialized(DType::F64, {n, lv * groups});
    Tensor dp_g = Tensor::uninitialized(DType::F64, {n, lp}), terms_g = Tensor::uninitialized(DType::F64, {n, lv});
    for (std::int64_t group = 0; group < groups; ++group) {
      spill.get(group, r0, dp_g, terms_g);
      put_group_cols(config, groups, group, dp_g, dp);
      put_cols(terms, group * lv, terms_g);
    }
    add_rows_in_order(terms, grads[kOutNorm]);
    const RmsNorm x = rmsnorm_forward_rows(h, r0, n, ln_w, config.eps(), threads);
    std::copy_n(x.rstd.data<double>(), n, rstd.data<double>() + r0);
    product_into(as_matrix(dp, n, P), W_in, as_matrix(dx, N, hidden).middleRows(r0, n), {.threads = threads});
    product_into(as_matrix(dp, n, P).transpose(), as_matrix(x.y, n, hidden), as_matrix(grads[kInProj], P, hidden),
                 {.accumulate = r0 > 0, .threads = threads});
  }
  RmsNormGrads norm = rmsnorm_backward(h, ln_w, rstd, dx, threads);
  grads[kInProjNorm] = std::move(norm.dw);
  run.grads.grad_hidden = swap_leading(std::move(norm.dx).reshaped({B, S, hidden}));
  run.out = swap_leading(std::move(out).reshaped({B, S, hidden}));
  return run;
}

std::vector<std::string> judged_order(const std::vector<std::string>& grad_names) {
  std::vector<std::string> order;
  for (const char* s :
       {"x_norm", "in_proj", "conv", "q", "k", "v", "g", "beta", "boundary_state", "core", "gated_norm"})
    order.push_back(std::string("stage::") + s);
  order.push_back("out");
  for (const char* s :
       {"gated_norm", "core", "boundary_state", "beta", "g", "v", "conv_k", "conv_q", "conv", "in_proj", "x_norm"})
    order.push_back(std::string("stage_grad::") + s);
  order.push_back("grad_hidden");
  order.insert(order.end(), grad_names.begin(), grad_names.end());
  return order;
}

bool is_backward_tensor(std::string_view name) { return name.starts_with("stage_grad::") || name.starts_with("grad"); }

Shape stage_shape(const LayerConfig& c, std::string_view name, std::int64_t rows) {
  const std::string_view s = name.substr(name.find("::") + 2);
  if (s == "x_norm") return {rows, c.hidden()};
  if (s == "in_proj") return {rows, c.in_proj_dim()};
  if (s == "conv") return {rows, c.conv_dim()};
  if (s == "q" || s == "k" || s == "conv_q" || s == "conv_k") return {rows, c.Hk(), c.dk()};
  if (s == "g" || s == "beta") return {rows, c.Hv()};
  if (s == "boundary_state") return {rows, c.Hv(), c.dk(), c.dv()};
  if (s == "v" || s == "core" || s == "gated_norm") return {rows, c.Hv(), c.dv()};
  throw Error("unknown stage '" + std::string(name) + "'");
}

StageTensors forward_stages(const LayerConfig& config, const LayerForward& fwd) {
  const std::int64_t S = fwd.out.dim(0), B = fwd.out.dim(1), N = B * S;
  const Mixer& m = fwd.mixer;
  auto normalised = [&](const Tensor& x) {  // the core's in-kernel L2 norm (docs/DESIGN.md §1.1)
    Tensor out = x;
    l2norm_rows(as_matrix(out, out.numel() / config.dk(), config.dk()));
    return out;
  };
  Tensor p(DType::F64, {N, config.in_proj_dim()});  // P's sections, as mixer_forward cut them
  put_cols(p, 0, m.conv_in.x);
  put_cols(p, config.conv_dim(), m.z);
  put_cols(p, config.conv_dim() + config.v_dim(), m.b);
  put_cols(p, config.conv_dim() + config.v_dim() + config.Hv(), m.a);
  Tensor conv(DType::F64, {N, config.conv_dim()});
  put_cols(conv, 0, m.core_in.q);
  put_cols(conv, config.qk_dim(), m.core_in.k);
  put_cols(conv, 2 * config.qk_dim(), m.core_in.v);
  const StageTensors batch_major{{"stage::x_norm", fwd.in_proj.x},
                                 {"stage::in_proj", p},
                                 {"stage::conv", conv},
                                 {"stage::q", normalised(m.core_in.q)},
                                 {"stage::k", normalised(m.core_in.k)},
                                 {"stage::v", m.core_in.v},
                                 {"stage::g", m.core_in.g},
                                 {"stage::beta", m.core_in.beta},
                                 {"stage::core", m.o},
                                 {"stage::gated_norm", m.y.y}};
  StageTensors out;
  for (const auto& [name, t] : batch_major) out[name] = natural_rows(config, name, t, B, S);
  return out;
}

}  // namespace gdnv::ref
