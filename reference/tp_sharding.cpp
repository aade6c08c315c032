#include "reference/tp_sharding.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace gdnv::ref {
namespace {

// How one parameter is cut: along `dim`, each of `sections` (full sizes, in order) split into t
// equal head-aligned parts. No sections: replicated.
struct Cut {
  int dim = 0;
  std::vector<std::int64_t> sections;
};

Cut cut_of(const LayerConfig& c, const std::string& name) {
  const std::int64_t qk = c.qk_dim(), v = c.v_dim(), Hv = c.Hv();
  if (name == kInProj) return {0, {qk, qk, v, v, Hv, Hv}};
  if (name == kConvWeight || name == kConvBias) return {0, {qk, qk, v}};
  if (name == kALog || name == kDtBias) return {0, {Hv}};
  if (name == kOutProj) return {1, {v}};
  return {};
}

// Calls f(full_offset, shard_offset, count) for each contiguous run of rank r's elements, viewing
// the full tensor as [outer, rows, inner] around the cut dimension.
template <class F>
void for_rank_runs(const Cut& cut, std::int64_t t, std::int64_t r, const Shape& full_shape, F f) {
  const auto d = static_cast<std::size_t>(cut.dim);
  std::int64_t outer = 1, inner = 1;
  for (std::size_t i = 0; i < d; ++i) outer *= full_shape[i];
  for (std::size_t i = d + 1; i < full_shape.size(); ++i) inner *= full_shape[i];
  const std::int64_t rows = full_shape[d], shard_rows = rows / t;
  std::int64_t full_row = 0, shard_row = 0;
  for (const std::int64_t size : cut.sections) {
    const std::int64_t part = size / t, begin = full_row + r * part;
    for (std::int64_t o = 0; o < outer; ++o)
      f((o * rows + begin) * inner, (o * shard_rows + shard_row) * inner, part * inner);
    full_row += size;
    shard_row += part;
  }
}

Shape shard_shape(const Shape& full, const Cut& cut, std::int64_t t) {
  Shape s = full;
  s[static_cast<std::size_t>(cut.dim)] /= t;
  return s;
}

void check_shard_count(const LayerConfig& config, std::size_t count) {
  if (count == 0) throw ConfigError("tensor parallel: no shards to assemble");
  tp_local_config(config, static_cast<std::int64_t>(count));
}

// Assembles sharded parameters; `replicated` decides a replicated one from its per-rank values.
template <class Replicated>
LayerParams assemble(const LayerConfig& config, const std::vector<LayerParams>& shards, Replicated replicated) {
  const auto t = static_cast<std::int64_t>(shards.size());
  check_shard_count(config, shards.size());
  const LayerConfig local = tp_local_config(config, t);
  for (const auto& s : shards) validate_params(local, s);
  LayerParams full;
  for (const auto& name : param_names(config)) {
    const Cut cut = cut_of(config, name);
    if (cut.sections.empty()) {
      full[name] = replicated(name);
      continue;
    }
    Tensor f(DType::F64, param_shape(config, name));
    for (std::int64_t r = 0; r < t; ++r) {
      const double* src = shards[static_cast<std::size_t>(r)].at(name).data<double>();
      for_rank_runs(cut, t, r, f.shape(), [&](std::int64_t fo, std::int64_t so, std::int64_t n) {
        std::copy_n(src + so, n, f.data<double>() + fo);
      });
    }
    full[name] = std::move(f);
  }
  return full;
}

}  // namespace

LayerConfig tp_local_config(const LayerConfig& config, std::int64_t tp_size) {
  if (tp_size < 1) throw ConfigError("tensor parallel size " + std::to_string(tp_size) + " must be at least 1");
  if (config.Hk() % tp_size != 0 || config.Hv() % tp_size != 0)
    throw ConfigError("tensor parallel size " + std::to_string(tp_size) + " does not divide linear_num_key_heads = " +
                      std::to_string(config.Hk()) + " and linear_num_value_heads = " + std::to_string(config.Hv()) +
                      "; TP shards whole heads, so choose a TP size dividing both");
  LayerConfig::Values v = config.values();
  v.linear_num_key_heads /= tp_size;
  v.linear_num_value_heads /= tp_size;
  return LayerConfig(v);
}

LayerParams tp_shard(const LayerConfig& config, const LayerParams& params, std::int64_t tp_size, std::int64_t tp_rank) {
  tp_local_config(config, tp_size);
  if (tp_rank < 0 || tp_rank >= tp_size)
    throw ConfigError("tensor parallel rank " + std::to_string(tp_rank) + " is outside [0, " + std::to_string(tp_size) +
                      ")");
  validate_params(config, params);
  LayerParams shard;
  for (const auto& [name, full] : params) {
    const Cut cut = cut_of(config, name);
    if (cut.sections.empty()) {
      shard[name] = full;
      continue;
    }
    Tensor s(DType::F64, shard_shape(full.shape(), cut, tp_size));
    const double* from = full.data<double>();  // clang before 16 cannot capture a structured binding
    for_rank_runs(cut, tp_size, tp_rank, full.shape(), [&](std::int64_t fo, std::int64_t so, std::int64_t n) {
      std::copy_n(from + fo, n, s.data<double>() + so);
    });
    shard[name] = std::move(s);
  }
  return shard;
}

void tp_place(const LayerConfig& config, const std::string& name, const Tensor& shard, std::int64_t tp_size,
              std::int64_t tp_rank, Tensor& full) {
  const Cut cut = cut_of(config, name);
  if (cut.sections.empty()) throw Error("tp_place: '" + name + "' is replicated, not sharded");
  const double* src = shard.data<double>();
  for_rank_runs(cut, tp_size, tp_rank, full.shape(), [&](std::int64_t fo, std::int64_t so, std::int64_t n) {
    std::copy_n(src + so, n, full.data<double>() + fo);
  });
}

LayerParams tp_unshard(const LayerConfig& config, const std::vector<LayerParams>& shards) {
  return assemble(config, shards, [&](const std::string& name) {
    const Tensor& first = shards.front().at(name);
    for (std::size_t r = 1; r < shards.size(); ++r)
      if (!shards[r].at(name).bitwise_equal(first))
        throw ConfigError("replicated parameter '" + name + "' differs between TP rank 0 and rank " +
                          std::to_string(r) + "; every rank must hold the same copy");
    return first;
  });
}

LayerParams tp_reduce_grads(const LayerConfig& config, const std::vector<LayerParams>& grad_shards) {
  return assemble(config, grad_shards, [&](const std::string& name) {
    std::vector<Tensor> partials;
    for (const auto& s : grad_shards) partials.push_back(s.at(name));
    return tp_sum(partials);
  });
}

Tensor tp_sum(const std::vector<Tensor>& partials) {
  if (partials.empty()) throw ConfigError("tensor parallel: no partial tensors to sum");
  Tensor sum = partials.front();
  double* ps = sum.data<double>();
  for (std::size_t r = 1; r < partials.size(); ++r) {
    if (partials[r].shape() != sum.shape())
      throw ConfigError("tensor parallel: partial of rank " + std::to_string(r) + " has shape " +
                        shape_str(partials[r].shape()) + ", rank 0's " + shape_str(sum.shape()));
    const double* pr = partials[r].data<double>();
    for (std::int64_t i = 0; i < sum.numel(); ++i) ps[i] += pr[i];
  }
  return sum;
}

}  // namespace gdnv::ref
