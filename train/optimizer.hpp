#pragma once
// AdamW (decoupled weight decay) over named parameters, with master weights and moments kept in
// `master` precision: fp32 for fp32 and bf16 compute (the model then runs on the masters rounded to the
// compute dtype), fp64 for fp64 compute and the oracle trajectory.
#include <cstdint>

#include "core/dtype.hpp"
#include "train/model.hpp"

namespace gdnv::train {

struct AdamWConfig {
  double lr = 3e-3;
  double beta1 = 0.9, beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.01;  // on the matrices only (embedding, head, in_proj, out_proj)
};

class AdamW {
 public:
  AdamW(const AdamWConfig& config, const Named& initial, DType master);

  // One step on `grads` (every parameter's); returns the L2 norm of the change of the master weights.
  double step(const Named& grads);
  const Named& params() const { return params_; }

 private:
  template <class T>
  double update(const Named& grads);

  AdamWConfig config_;
  DType master_;
  Named params_, m_, v_;
  std::int64_t t_ = 0;
};

}  // namespace gdnv::train
