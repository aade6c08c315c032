#include "train/optimizer.hpp"

#include <cmath>

namespace gdnv::train {
namespace {

bool decays(const std::string& name) {
  for (const char* suffix : {kEmbedding, kHead, "in_proj.weight", "out_proj.weight"}) {
    const std::string s = suffix;
    if (name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) return true;
  }
  return false;
}

}  // namespace

AdamW::AdamW(const AdamWConfig& config, const Named& initial, DType master) : config_(config), master_(master) {
  for (const auto& [name, t] : initial) {
    params_[name] = t.to(master).to(DType::F64);
    m_[name] = v_[name] = Tensor(DType::F64, t.shape());
  }
}

double AdamW::step(const Named& grads) {
  ++t_;
  return master_ == DType::F64 ? update<double>(grads) : update<float>(grads);
}

// Every quantity in T: the master weights, the moments and the arithmetic.
template <class T>
double AdamW::update(const Named& grads) {
  const T b1 = static_cast<T>(config_.beta1), b2 = static_cast<T>(config_.beta2), eps = static_cast<T>(config_.eps);
  const T lr = static_cast<T>(config_.lr);
  const T c1 = static_cast<T>(1 - std::pow(config_.beta1, static_cast<double>(t_)));
  const T c2 = static_cast<T>(1 - std::pow(config_.beta2, static_cast<double>(t_)));
  double change = 0;
  for (auto& [name, p] : params_) {
    const Tensor& g = grads.at(name);
    Tensor &m = m_.at(name), &v = v_.at(name);
    const T decay = decays(name) ? static_cast<T>(config_.lr * config_.weight_decay) : T(0);
    for (std::int64_t i = 0; i < p.numel(); ++i) {
      const T gi = static_cast<T>(g.get(i)), w = static_cast<T>(p.get(i));
      const T mi = b1 * static_cast<T>(m.get(i)) + (T(1) - b1) * gi;
      const T vi = b2 * static_cast<T>(v.get(i)) + (T(1) - b2) * gi * gi;
      const T next = w - lr * (mi / c1) / (std::sqrt(vi / c2) + eps) - decay * w;
      m.set(i, mi);
      v.set(i, vi);
      p.set(i, next);
      change += (static_cast<double>(next) - w) * (static_cast<double>(next) - w);
    }
  }
  return std::sqrt(change);
}

}  // namespace gdnv::train
