#include "train/oracle.hpp"

#include <chrono>

#include "reference/layer.hpp"
#include "reference/norms.hpp"

namespace gdnv::train {
namespace {

// y [N, out] = x [N, in] w^T, w [out, in].
Tensor matmul_t(const Tensor& x, const Tensor& w) {
  const std::int64_t N = x.dim(0), in = x.dim(1), out = w.dim(0);
  Tensor y(DType::F64, {N, out});
  const double *a = x.data<double>(), *b = w.data<double>();
  double* c = y.data<double>();
  for (std::int64_t i = 0; i < N; ++i)
    for (std::int64_t o = 0; o < out; ++o) {
      double s = 0;
      for (std::int64_t k = 0; k < in; ++k) s += a[i * in + k] * b[o * in + k];
      c[i * out + o] = s;
    }
  return y;
}

// dx [N, in] = dy [N, out] w; dw [out, in] = dy^T x.
std::pair<Tensor, Tensor> matmul_t_backward(const Tensor& dy, const Tensor& x, const Tensor& w) {
  const std::int64_t N = x.dim(0), in = x.dim(1), out = w.dim(0);
  Tensor dx(DType::F64, {N, in}), dw(DType::F64, {out, in});
  const double *g = dy.data<double>(), *a = x.data<double>(), *b = w.data<double>();
  double *da = dx.data<double>(), *db = dw.data<double>();
  for (std::int64_t i = 0; i < N; ++i)
    for (std::int64_t o = 0; o < out; ++o) {
      const double go = g[i * out + o];
      for (std::int64_t k = 0; k < in; ++k) {
        da[i * in + k] += go * b[o * in + k];
        db[o * in + k] += go * a[i * in + k];
      }
    }
  return {std::move(dx), std::move(dw)};
}

Tensor plus(const Tensor& a, const Tensor& b) {
  Tensor c = a;
  for (std::int64_t i = 0; i < c.numel(); ++i) c.set(i, a.get(i) + b.get(i));
  return c;
}

// One micro-batch, forward and backward, in fp64: its loss share and gradients.
MicroBatchResult oracle_micro_batch(const ModelConfig& config, const Named& params, const Packed& p,
                                    double normaliser) {
  const ref::LayerConfig L(config.layer);
  const std::int64_t hidden = L.hidden(), T = static_cast<std::int64_t>(p.tokens.size());
  const Tensor& embedding = params.at(kEmbedding);
  Tensor h(DType::F64, {T, 1, hidden});
  for (std::int64_t i = 0; i < T; ++i)
    for (std::int64_t j = 0; j < hidden; ++j)
      h.set(i * hidden + j, embedding.get(p.tokens[static_cast<std::size_t>(i)] * hidden + j));
  std::vector<ref::LayerForward> fwd;
  for (int l = 0; l < config.layers; ++l) {
    fwd.push_back(ref::layer_forward(L, layer_params(params, l), h, p.cu_seqlens));
    h = plus(h, fwd.back().out);
  }
  const Tensor h2 = h.reshaped({T, hidden});
  const ref::RmsNorm normed = ref::rmsnorm_forward(h2, params.at(kFinalNorm), L.eps());
  const CrossEntropy ce = cross_entropy(matmul_t(normed.y, params.at(kHead)), p.targets, normaliser);

  MicroBatchResult r{ce.sum / normaliser, ce.counted, {}};
  auto [dy, d_head] = matmul_t_backward(ce.dlogits, normed.y, params.at(kHead));
  const ref::RmsNormGrads norm = ref::rmsnorm_backward(h2, params.at(kFinalNorm), normed.rstd, dy);
  r.grads[kHead] = std::move(d_head);
  r.grads[kFinalNorm] = norm.dw;
  Tensor dh = norm.dx.reshaped({T, 1, hidden});
  for (int l = config.layers - 1; l >= 0; --l) {
    ref::LayerGrads g = ref::layer_backward(L, layer_params(params, l), fwd[static_cast<std::size_t>(l)], dh);
    for (auto& [name, t] : g.params) r.grads[layer_param_name(l, name)] = std::move(t);
    dh = plus(dh, g.grad_hidden);
  }
  Tensor d_embed(DType::F64, embedding.shape());
  for (std::int64_t i = 0; i < T; ++i)
    for (std::int64_t j = 0; j < hidden; ++j) {
      const std::int64_t at = p.tokens[static_cast<std::size_t>(i)] * hidden + j;
      d_embed.set(at, d_embed.get(at) + dh.get(i * hidden + j));
    }
  r.grads[kEmbedding] = std::move(d_embed);
  return r;
}

}  // namespace

Trajectory oracle_trajectory(const TrainSpec& spec) {
  const auto start = std::chrono::steady_clock::now();
  validate(spec);
  AdamW optimizer(spec.adam, init_model(spec.model, spec.seed), DType::F64);
  Trajectory out{"oracle", "1", {}, 0};
  for (int step = 0; step < spec.steps; ++step) {
    const GlobalBatch batch = global_batch(spec.data, step);
    const auto normaliser = static_cast<double>(batch.effective_tokens());
    Named grads;
    StepRecord rec;
    rec.step = step;
    for (const MicroBatchData& mb : batch.micro_batches) {
      MicroBatchResult r = oracle_micro_batch(spec.model, optimizer.params(), pack(mb, 1), normaliser);
      rec.loss += r.loss;
      rec.effective_tokens += r.counted;
      add_into(grads, r.grads, DType::F64);
      rec.cps.push_back(1);
    }
    rec.grad_norm = l2_norm(grads);
    rec.update_norm = optimizer.step(grads);
    out.steps.push_back(rec);
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

}  // namespace gdnv::train
