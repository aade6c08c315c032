#include "train/model.hpp"

#include <cmath>

#include "core/rng.hpp"
#include "layouts/partition.hpp"

namespace gdnv::train {

std::string layer_param_name(int layer, const std::string& name) {
  return "layers." + std::to_string(layer) + "." + name;
}

Named init_model(const ModelConfig& config, std::uint64_t seed) {
  const ref::LayerConfig L(config.layer);
  Named p;
  // Megatron's init_method_std for the embedding and the (untied) output layer.
  p[kEmbedding] = ref::seeded_normal(seed, "model/embedding", {config.vocab, L.hidden()}, 0.02);
  p[kHead] = ref::seeded_normal(seed, "model/head", {config.vocab, L.hidden()}, 0.02);
  p[kFinalNorm] = Tensor(DType::F64, {L.hidden()});
  for (std::int64_t i = 0; i < L.hidden(); ++i) p[kFinalNorm].set(i, 1.0);
  for (int l = 0; l < config.layers; ++l)
    for (auto& [name, t] : ref::init_params(L, hash64(seed, stream_of("model/layer"), static_cast<std::uint64_t>(l))))
      p[layer_param_name(l, name)] = std::move(t);
  return p;
}

ref::LayerParams layer_params(const Named& params, int layer) {
  const std::string prefix = layer_param_name(layer, "");
  ref::LayerParams out;
  for (const auto& [name, t] : params)
    if (name.rfind(prefix, 0) == 0) out[name.substr(prefix.size())] = t;
  return out;
}

namespace {

// a + b rounded as `arith` adds (fp32 for F32, else fp64).
double add_in(DType arith, double a, double b) {
  return arith == DType::F32 ? static_cast<double>(static_cast<float>(a) + static_cast<float>(b)) : a + b;
}

}  // namespace

void add_into(Named& acc, const Named& x, DType arith) {
  for (const auto& [name, t] : x) {
    auto [it, fresh] = acc.try_emplace(name, t);
    if (fresh) continue;
    Tensor& a = it->second;
    for (std::int64_t i = 0; i < t.numel(); ++i) a.set(i, add_in(arith, a.get(i), t.get(i)));
  }
}

double l2_norm(const Named& t) {
  double s = 0;
  for (const auto& [name, x] : t)
    for (std::int64_t i = 0; i < x.numel(); ++i) s += x.get(i) * x.get(i);
  return std::sqrt(s);
}

void all_reduce(Named& t, comm::Communicator& group, DType arith) {
  for (auto& [name, x] : t) {
    Tensor buf = x.to(arith);
    group.all_reduce(comm::MutBuf(buf));
    x = buf.to(DType::F64);
  }
}

CrossEntropy cross_entropy(const Tensor& logits, const std::vector<std::int64_t>& targets, double normaliser) {
  const std::int64_t N = logits.dim(0), V = logits.dim(1);
  CrossEntropy ce;
  ce.dlogits = Tensor(DType::F64, {N, V});
  const double* l = logits.data<double>();
  double* d = ce.dlogits.data<double>();
  for (std::int64_t i = 0; i < N; ++i) {
    const std::int64_t target = targets[static_cast<std::size_t>(i)];
    if (target == kNoTarget) continue;
    const double* row = l + i * V;
    double m = row[0];
    for (std::int64_t j = 1; j < V; ++j) m = std::max(m, row[j]);
    double s = 0;
    for (std::int64_t j = 0; j < V; ++j) s += std::exp(row[j] - m);
    ce.sum += m + std::log(s) - row[target];
    ++ce.counted;
    for (std::int64_t j = 0; j < V; ++j) d[i * V + j] = (std::exp(row[j] - m) / s - (j == target)) / normaliser;
  }
  return ce;
}

RankModel::RankModel(const ModelConfig& config, const cp::CpConfig& cp, const Named& params, cp::Backend& backend,
                     comm::Communicator& static_group)
    : config_(config), cp_(cp), be_(backend), static_group_(static_group) {
  const ref::LayerConfig L(config.layer);
  for (int l = 0; l < config.layers; ++l)
    layers_.push_back(std::make_unique<cp::GdnCpLayer>(L, cp, layer_params(params, l), be_, static_group));
  embedding_ = be_.upload(params.at(kEmbedding), be_.dtype());
  final_norm_ = be_.upload(params.at(kFinalNorm), be_.dtype());
  head_ = be_.upload(params.at(kHead), be_.dtype());
}

std::vector<std::int64_t> RankModel::local_rows(const Packed& p, int c) const {
  return layouts::thd_partition(layouts::Layout::zigzag, p.cu_seqlens, c, static_group_.rank() % c).positions();
}

namespace {

// a + b as a new buffer (the residual stream: a forward's saved input must not change under it).
cp::Buffer sum(cp::Backend& be, const cp::Buffer& a, const cp::Buffer& b) {
  cp::Buffer out = be.alloc(a.dtype(), a.shape());
  be.accumulate(out, a);
  be.accumulate(out, b);
  return out;
}

}  // namespace

// What a micro-batch's forward keeps for its backward.
struct RankModel::Forward {
  std::shared_ptr<const cp::MicroBatch> plan;
  std::int64_t N = 0;
  std::vector<std::int64_t> tokens;
  std::vector<cp::Buffer> inputs;     // each layer's input
  std::vector<cp::Context> contexts;  // recompute none: each layer's
  cp::Buffer h;                       // the final norm's input
  cp::RmsNormOut normed;
};

MicroBatchResult RankModel::run(const Packed& p, int c, double normaliser, Recompute recompute,
                                bool split_backward) const {
  const ref::LayerConfig L(config_.layer);
  const std::int64_t hidden = L.hidden();
  Forward f;
  comm::Communicator* group = c == cp_.cp ? nullptr : &layers_[0]->dynamic_group(c);
  // One plan per micro-batch, reused by every layer (its route and indices do not depend on parameters).
  const cp::CheckedMicroBatch checked = layers_[0]->check({cp::Format::Thd, p.cu_seqlens, 0, 1}, group, group ? c : 0);
  f.plan = layers_[0]->prepare(checked);
  const std::vector<std::int64_t> rows =
      layouts::positions_of(layouts::zigzag_runs(checked.cu(), c, static_group_.rank() % c));
  f.N = static_cast<std::int64_t>(rows.size());
  std::vector<std::int64_t> targets;
  for (auto r : rows) {
    f.tokens.push_back(p.tokens[static_cast<std::size_t>(r)]);
    targets.push_back(p.targets[static_cast<std::size_t>(r)]);
  }

  // Forward: embedding rows of the local tokens, the residual layers, the final norm and the head.
  f.contexts.resize(static_cast<std::size_t>(config_.layers));
  cp::Buffer h = be_.gather_rows(embedding_, cp::upload_index(be_, f.tokens));
  for (int l = 0; l < config_.layers; ++l) {
    f.inputs.push_back(h);
    cp::Context ctx;
    const cp::Buffer out = layers_[l]->forward(f.plan, h.reshaped({f.N, 1, hidden}), ctx);
    if (recompute == Recompute::None) f.contexts[static_cast<std::size_t>(l)] = std::move(ctx);
    h = sum(be_, h, out.reshaped({f.N, hidden}));
  }
  f.h = h;
  f.normed = be_.rmsnorm(h, final_norm_, L.eps());
  const cp::Buffer logits = be_.linear(f.normed.y, head_);
  const CrossEntropy ce = cross_entropy(be_.download(logits).to(DType::F64), targets, normaliser);

  MicroBatchResult r{ce.sum / normaliser, ce.counted, {}};
  std::vector<Tensor> parts{ce.dlogits};
  if (split_backward) {
    // The loss's gradient as the sum of its even-row and odd-row parts, each taken back on its own.
    parts.assign(2, ce.dlogits);
    const std::int64_t V = ce.dlogits.dim(1);
    for (std::int64_t i = 0; i < f.N; ++i)
      for (std::int64_t j = 0; j < V; ++j) parts[static_cast<std::size_t>(i % 2 == 0)].set(i * V + j, 0.0);
  }
  Named local;  // token-local gradients: this rank's partial sums
  backward(f, parts, recompute, r.grads, local);
  if (c > 1) all_reduce(local, *f.plan->cp, be_.state_dtype());
  for (auto& [name, t] : local) r.grads[name] = std::move(t);
  return r;
}

// The backward of `f` for the loss gradient, given as one or more parts taken back one after another
// layer by layer (under full recompute each layer's forward runs again once, just before), its gradients
// added to `grads` (the layers', summed over CP) and `local` (the token-local ones, this rank's partial
// sums), in the state dtype.
void RankModel::backward(Forward& f, const std::vector<Tensor>& dlogits, Recompute recompute, Named& grads,
                         Named& local) const {
  const ref::LayerConfig L(config_.layer);
  const std::int64_t hidden = L.hidden(), N = f.N;
  const DType sd = be_.state_dtype();
  std::vector<cp::Buffer> dh;
  for (const Tensor& part : dlogits) {
    const cp::LinearGrads head = be_.linear_backward(be_.upload(part, be_.dtype()), f.normed.y, head_);
    const cp::RmsNormGrads norm = be_.rmsnorm_backward(head.dx, f.h, final_norm_, f.normed.rstd);
    add_into(local, {{kHead, be_.download(head.dw).to(DType::F64)}, {kFinalNorm, be_.download(norm.dw).to(DType::F64)}},
             sd);
    dh.push_back(norm.dx);
  }
  for (int l = config_.layers - 1; l >= 0; --l) {
    cp::Context recomputed;
    if (recompute == Recompute::Full)
      (void)layers_[l]->forward(f.plan, f.inputs[static_cast<std::size_t>(l)].reshaped({N, 1, hidden}), recomputed);
    const cp::Context& ctx = recompute == Recompute::Full ? recomputed : f.contexts[static_cast<std::size_t>(l)];
    for (cp::Buffer& d : dh) {
      const cp::LayerBackward back = layers_[l]->backward(ctx, d.reshaped({N, 1, hidden}));
      Named layer_grads;
      for (auto& [name, g] : cp::download_grads(be_, back.grads)) layer_grads[layer_param_name(l, name)] = std::move(g);
      add_into(grads, layer_grads, sd);
      d = sum(be_, d, back.grad_hidden.reshaped({N, hidden}));
    }
  }
  // The embedding's gradient: each local row's into its token's row, accumulated in the state dtype.
  for (const cp::Buffer& d : dh) {
    const Tensor d_embed = be_.download(d).to(DType::F64);
    Tensor g(DType::F64, {config_.vocab, hidden});
    for (std::int64_t i = 0; i < N; ++i)
      for (std::int64_t j = 0; j < hidden; ++j) {
        const std::int64_t at = f.tokens[static_cast<std::size_t>(i)] * hidden + j;
        g.set(at, add_in(sd, g.get(at), d_embed.get(i * hidden + j)));
      }
    add_into(local, {{kEmbedding, std::move(g)}}, sd);
  }
}

}  // namespace gdnv::train
