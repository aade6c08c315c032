#pragma once
// The small GDN language model of docs/DESIGN.md §13: token embedding [V, hidden],
// L layers of hidden += GatedDeltaNet(hidden) (cp::GdnCpLayer under the run's mode, driven as `gdn-verify
// run` drives it: prepare, forward, backward with a cp::Context per layer and micro-batch), a final
// RMSNorm, an LM head [V, hidden] and next-token cross-entropy. The token-local parts (embedding, norm,
// head, loss) run on each rank's zigzag shard.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "cp/backend.hpp"
#include "cp/cp_config.hpp"
#include "cp/layer.hpp"
#include "reference/layer_params.hpp"
#include "train/padding.hpp"

namespace gdnv::train {

struct ModelConfig {
  std::int64_t vocab = 64;
  int layers = 2;
  ref::LayerConfig::Values layer{64, 2, 4, 16, 16, 4, 1e-6, false};
};

// Parameters, or gradients, by name: "embedding", "layers.<l>.<layer parameter>", "final_norm.weight",
// "head.weight". F64 tensors holding values of the dtype they are kept in.
using Named = std::map<std::string, Tensor>;
inline constexpr const char* kEmbedding = "embedding";
inline constexpr const char* kFinalNorm = "final_norm.weight";
inline constexpr const char* kHead = "head.weight";
std::string layer_param_name(int layer, const std::string& name);

// Embedding and head ~ N(0, 0.02^2) (Megatron's init_method_std), final norm 1, layer l as
// ref::init_params with its own seed.
Named init_model(const ModelConfig& config, std::uint64_t seed);
ref::LayerParams layer_params(const Named& params, int layer);

// acc[name] += x[name] for every name, each sum rounded to `arith` (F32: fp32 accumulation; F64).
void add_into(Named& acc, const Named& x, DType arith);
// sqrt of the sum of squares of every element, in fp64.
double l2_norm(const Named& t);
// Sums `t` over `group` as `arith` buffers (comm: rank-ordered, rounded once).
void all_reduce(Named& t, comm::Communicator& group, DType arith);

// Next-token cross-entropy of logits [N, V] (F64) against `targets` (kNoTarget: not counted): the sum over
// counted rows, their count, and the loss's gradient (softmax - onehot) / normaliser, zero on other rows.
struct CrossEntropy {
  double sum = 0;
  std::int64_t counted = 0;
  Tensor dlogits;
};
CrossEntropy cross_entropy(const Tensor& logits, const std::vector<std::int64_t>& targets, double normaliser);

// Recompute full keeps only each layer's input and re-runs its forward right before its backward;
// none keeps every layer's Context. The trajectory is bit-identical either way.
enum class Recompute { None, Full };

// What one rank computed for one micro-batch: its share of the loss (sum of CE over its counted tokens,
// divided by the normaliser), how many tokens it counted, and the parameter gradients summed over the
// micro-batch's CP group (the layer's own reduction; the token-local ones reduced the same way).
struct MicroBatchResult {
  double loss = 0;
  std::int64_t counted = 0;
  Named grads;
};

// One rank's model for one step: a GdnCpLayer per layer built from the step's parameters (construction
// is collective over the static group), and the token-local parameters where the backend computes.
class RankModel {
 public:
  RankModel(const ModelConfig& config, const cp::CpConfig& cp, const Named& params, cp::Backend& backend,
            comm::Communicator& static_group);

  // Forward and backward of micro-batch `p`, packed for CP size c, on this rank's sub-group of size c
  // (the static group when c is the static size). Collective over that sub-group.
  // `split_backward` (the noise band's legal perturbation): the loss gradient taken back as two parts, its
  // even and its odd local rows, and the gradients summed: the same math with reductions reordered.
  MicroBatchResult run(const Packed& p, int c, double normaliser, Recompute recompute,
                       bool split_backward = false) const;

  // The zigzag rows (positions in p) this rank holds of a micro-batch of CP size c.
  std::vector<std::int64_t> local_rows(const Packed& p, int c) const;

 private:
  struct Forward;
  void backward(Forward& f, const std::vector<Tensor>& dlogits, Recompute recompute, Named& grads, Named& local) const;

  ModelConfig config_;
  cp::CpConfig cp_;
  cp::Backend& be_;
  comm::Communicator& static_group_;
  std::vector<std::unique_ptr<cp::GdnCpLayer>> layers_;
  cp::Buffer embedding_, final_norm_, head_;
};

}  // namespace gdnv::train
