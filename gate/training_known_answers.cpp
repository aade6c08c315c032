// Gate step "training known answers" (docs/DESIGN.md §13, §11): AdamW, the loss and its normaliser, the
// padding mask, a vocabulary of 2 and the training verdict's limits, each against the answer written from
// its definition.
#include <cmath>
#include <cstdio>
#include <functional>

#include "gate/steps.hpp"
#include "gate/training.hpp"
#include "train/optimizer.hpp"
#include "train/oracle.hpp"
#include "train/padding.hpp"
#include "train/trainer.hpp"
#include "train/verdict.hpp"

namespace gdnv::gate {
namespace {

std::string differs(const std::string& what, double got, double want, double tol) {
  if (std::abs(got - want) <= tol * std::abs(want)) return "";
  char buf[160];
  std::snprintf(buf, sizeof buf, " %.17g, expected %.17g", got, want);
  return what + buf;
}

// Two AdamW steps on fixed numbers against the update written from its definition (decoupled weight
// decay on the embedding, the head, in_proj and out_proj only; bias-corrected moments; eps outside the
// square root):
//   m_t = b1 m + (1 - b1) g, v_t = b2 v + (1 - b2) g^2,
//   w_t = w - lr (m_t / (1 - b1^t)) / (sqrt(v_t / (1 - b2^t)) + eps) - lr wd w.
// lr 0.1, b1 0.9, b2 0.99, eps 0.1 (large, so that sqrt(v + eps) is 2e-2 away), wd 0.5; every parameter
// of a one-layer model at w = 1 with g = 2, then -1. fp64 masters: the same arithmetic, to 1e-15; fp32
// masters (bf16 and fp32 training): about 10 fp32 roundings of O(1) values, 6e-7, so 1e-6.
std::string adamw_known_answer() {
  train::AdamWConfig config;
  config.lr = 0.1, config.beta1 = 0.9, config.beta2 = 0.99, config.eps = 0.1, config.weight_decay = 0.5;
  const auto scalar = [](double x) { return Tensor::from_f64({x}, {1}); };
  const std::vector<std::pair<std::string, bool>> names = {{"embedding", true},
                                                           {"head.weight", true},
                                                           {"layers.0.in_proj.weight", true},
                                                           {"layers.0.out_proj.weight", true},
                                                           {"final_norm.weight", false},
                                                           {"layers.0.in_proj.layer_norm_weight", false},
                                                           {"layers.0.conv1d.weight", false},
                                                           {"layers.0.conv1d.bias", false},
                                                           {"layers.0.A_log", false},
                                                           {"layers.0.dt_bias", false},
                                                           {"layers.0.out_norm.weight", false}};
  // Step 1: m = g / 10 and v = g^2 / 100, bias-corrected back to g and g^2.
  const double c1 = 1 - 0.9 * 0.9, c2 = 1 - 0.99 * 0.99, m2 = 0.9 * 0.2 + 0.1 * -1, v2 = 0.99 * 0.04 + 0.01 * 1;
  for (const auto& [master, tol] : {std::pair{DType::F64, 1e-15}, {DType::F32, 1e-6}}) {
    train::Named initial, g1, g2;
    for (const auto& [name, decays] : names) initial[name] = scalar(1), g1[name] = scalar(2), g2[name] = scalar(-1);
    train::AdamW adam(config, initial, master);
    adam.step(g1);
    const train::Named after1 = adam.params();
    adam.step(g2);
    for (const auto& [name, decays] : names) {
      const double wd = decays ? 0.5 : 0.0;
      const double w1 = 1 - 0.1 * 2 / (2 + 0.1) - 0.1 * wd * 1;
      const double w2 = w1 - 0.1 * (m2 / c1) / (std::sqrt(v2 / c2) + 0.1) - 0.1 * wd * w1;
      const std::string at = std::string(dtype_name(master)) + " " + name;
      if (auto why = differs(at + " step 1", after1.at(name).get(0), w1, tol); !why.empty()) return why;
      if (auto why = differs(at + " step 2", adam.params().at(name).get(0), w2, tol); !why.empty()) return why;
    }
  }
  return "";
}

// Cross-entropy on logits [3, 2] with targets 0 (the pad id, a real token here), 1 and none, normaliser 4:
// row 0 softmax (1/2, 1/2): CE ln 2; row 1 logits (0, ln 3), softmax (1/4, 3/4): CE ln(4/3); row 2 not
// counted. Sum ln(8/3), 2 counted, dlogits = (softmax - onehot) / 4 = (-1/8, 1/8), (1/16, -1/16), (0, 0).
std::string loss_known_answer() {
  const Tensor logits = Tensor::from_f64({0, 0, 0, std::log(3.0), 5, -5}, {3, 2});
  const train::CrossEntropy ce = train::cross_entropy(logits, {0, 1, train::kNoTarget}, 4);
  std::string why = differs("CE sum", ce.sum, std::log(8.0 / 3.0), 1e-15);
  if (why.empty()) why = differs("counted", static_cast<double>(ce.counted), 2, 0);
  const double d[] = {-0.125, 0.125, 0.0625, -0.0625, 0, 0};
  for (int i = 0; i < 6 && why.empty(); ++i)
    why = differs("dlogits " + std::to_string(i), ce.dlogits.get(i), d[i], 1e-15);
  return why;
}

// Documents whose real tokens take the pad id 0: (0, 0, 5), (3, 0), (0, 7, 0, 0, 2) predict 2 + 1 + 4 = 7
// tokens at any CP size; at CP 2 each is padded to a multiple of 4 (1 + 2 + 3 pads), at CP 4 of 8
// (5 + 6 + 3). The count comes from the padding mask, never from the pad id.
std::string padding_known_answer() {
  const train::MicroBatchData mb{{{0, 0, 5}, {3, 0}, {0, 7, 0, 0, 2}}};
  for (const auto& [c, pads] : {std::pair{1, 0}, {2, 6}, {4, 14}}) {
    const train::Packed p = train::pack(mb, c);
    const std::string at = "cp " + std::to_string(c) + " ";
    std::string why = differs(at + "counted tokens", static_cast<double>(train::counted_tokens(p)), 7, 0);
    if (why.empty()) why = differs(at + "pads", static_cast<double>(p.pads), pads, 0);
    if (why.empty()) why = differs(at + "tokens", static_cast<double>(p.tokens.size()), 10 + pads, 0);
    if (!why.empty()) return why;
  }
  return differs("effective tokens", static_cast<double>(mb.effective_tokens()), 7, 0);
}

// A vocabulary of 2 (half the real tokens take the pad id), 1 step, fp64: every step's effective tokens,
// cp1's and dynamic CP's, are the documents' lengths less one, summed (written here from the data), and
// cp1's loss equals the oracle's.
std::string pad_id_vocabulary() {
  train::TrainSpec s = gate_train_spec(DType::F64);
  s.model.vocab = s.data.vocab = 2;
  s.model.layers = 1;
  s.steps = 2;
  const train::Trajectory oracle = train::oracle_trajectory(s), cp1 = train::train_in_process(s);
  s.mode = train::TrainMode::Headwise;
  s.dynamic = kDynamic;
  const train::Trajectory dynamic = train::train_in_process(s);
  for (int step = 0; step < s.steps; ++step) {
    std::int64_t want = 0;
    for (const auto& mb : train::global_batch(s.data, step).micro_batches)
      for (const auto& doc : mb.docs) want += static_cast<std::int64_t>(doc.size()) - 1;
    const std::string at = "step " + std::to_string(step) + " ";
    for (const auto* t : {&oracle, &cp1, &dynamic})
      if (auto why = differs(at + t->mode + " effective tokens",
                             static_cast<double>(t->steps.at(step).effective_tokens), static_cast<double>(want), 0);
          !why.empty())
        return why;
    if (auto why = differs(at + "cp1 loss", cp1.steps.at(step).loss, oracle.steps.at(step).loss, 1e-12); !why.empty())
      return why;
  }
  return "";
}

// The training verdict on hand-made curves against docs/DESIGN.md §13's numbers: bf16, a band of 1e-2
// (cp1-reordered 1e-2 off at step 1; the floor 2^-9 3 / sqrt(400) = 2.9e-4 below it) lets a run reach
// 6 x 1e-2 = 6e-2 from cp1 and, cp1 being 1e-2 off the oracle, 4 x 1e-2 = 4e-2 from the oracle; effective
// tokens exactly; fp64: loss and gradient norm within 1e-10 relative of cp1's. Each limit is tried 2%
// inside (pass) and 2% outside (fail).
std::string verdict_known_answer() {
  const auto curve = [](std::vector<double> losses) {
    train::Trajectory t{"cp1", "1", {}, 0};
    for (std::size_t i = 0; i < losses.size(); ++i)
      t.steps.push_back({static_cast<int>(i), losses[i], 1.0, 0.1, 400, {1}});
    return t;
  };
  const std::vector<double> L{3.0, 2.9, 2.8};
  const auto moved = [&](std::size_t step, double by) {
    std::vector<double> l = L;
    l[step] += by;
    return curve(l);
  };
  train::Trajectory tokens = curve(L);
  tokens.steps[1].effective_tokens = 401;
  // Against cp1's band alone (no oracle), then against the oracle.
  const std::vector<train::Trajectory> band_runs = {moved(2, 5.88e-2), moved(2, 6.12e-2), tokens};
  const std::vector<train::Trajectory> oracle_runs = {moved(0, 2.92e-2), moved(0, 3.12e-2)};
  const train::Comparison band = train::judge(DType::BF16, curve(L), moved(1, 1e-2), {}, band_runs);
  const train::Comparison oracle = train::judge(DType::BF16, curve(L), moved(1, 1e-2), moved(0, -1e-2), oracle_runs);
  std::string why;
  const auto expect = [&why](const train::Comparison& c, std::initializer_list<bool> want, const std::string& what) {
    std::size_t i = 0;
    for (bool pass : want) {
      if (why.empty() && c.verdicts.at(i).pass != pass)
        why = what + " run " + std::to_string(i) + (pass ? " fails: " + c.verdicts[i].why : " passes");
      ++i;
    }
  };
  expect(band, {true, false, false}, "bf16 band");
  expect(oracle, {true, false}, "bf16 oracle");
  train::Trajectory grad = curve(L);
  grad.steps[2].grad_norm *= 1 + 1.02e-10;
  const std::vector<train::Trajectory> fp64_runs = {curve({3.0 * (1 + 0.98e-10), 2.9, 2.8}),
                                                    curve({3.0 * (1 + 1.02e-10), 2.9, 2.8}), grad};
  const train::Comparison fp64 = train::judge(DType::F64, curve(L), {}, {}, fp64_runs);
  expect(fp64, {true, false, false}, "fp64");
  return why;
}

StepResult run(const StepOptions& options) {
  StepResult r(options);
  for (const auto& [label, why] :
       {std::pair<const char*, std::function<std::string()>>{"adamw two steps", adamw_known_answer},
        {"cross-entropy and normaliser", loss_known_answer},
        {"padding mask, real tokens at the pad id", padding_known_answer},
        {"vocabulary of 2: effective tokens and loss", pad_id_vocabulary},
        {"training verdict limits on hand-made curves", verdict_known_answer}}) {
    r.check_case(label, why);
  }
  return r;
}

}  // namespace

const Step training_known_answers{"training known answers", run};

}  // namespace gdnv::gate
