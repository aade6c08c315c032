#include "train/trainer.hpp"

#include <algorithm>
#include <chrono>

#include "comm/inprocess.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "cpu/backend.hpp"
#include "faults/seams.hpp"
#include "train/dynamic_cp.hpp"
#include "train/padding.hpp"

namespace gdnv::train {
namespace {

constexpr TrainMode kTrainModes[] = {TrainMode::Cp1, TrainMode::Headwise, TrainMode::Chunkwise, TrainMode::AllGather};

// cp1 runs the layer as headwise does on one rank.
cp::CpConfig cp_config(const TrainSpec& spec) {
  cp::CpConfig c;
  c.mode = spec.mode == TrainMode::Chunkwise   ? cp::CpMode::Chunkwise
           : spec.mode == TrainMode::AllGather ? cp::CpMode::AllGather
                                               : cp::CpMode::Headwise;
  c.cp = world_size(spec);
  if (spec.mode != TrainMode::Cp1) c.dynamic_cp = spec.dynamic;
  return c;
}

Named zeros_like(const Named& params) {
  Named z;
  for (const auto& [name, t] : params) z[name] = Tensor(DType::F64, t.shape());
  return z;
}

// The tokens this rank counts in the whole global batch (the normaliser of the planted fault
// LossNormalizedPerRank).
std::int64_t own_counted(const RankModel& model, const std::vector<Packed>& packed, const std::vector<Placement>& where,
                         int rank) {
  std::int64_t n = 0;
  for (std::size_t m = 0; m < packed.size(); ++m) {
    if (!where[m].holds(rank)) continue;
    for (auto row : model.local_rows(packed[m], where[m].cp))
      n += packed[m].targets[static_cast<std::size_t>(row)] != kNoTarget;
  }
  return n;
}

}  // namespace

std::string_view train_mode_name(TrainMode mode) {
  switch (mode) {
    case TrainMode::Cp1:
      return "cp1";
    case TrainMode::Headwise:
      return "headwise";
    case TrainMode::Chunkwise:
      return "chunkwise";
    case TrainMode::AllGather:
      return "all_gather";
  }
  return "?";
}

TrainMode parse_train_mode(std::string_view name) {
  for (TrainMode m : kTrainModes)
    if (train_mode_name(m) == name) return m;
  throw ConfigError("--mode: '" + std::string(name) + "' is not a mode: list cp1, headwise, chunkwise or all_gather");
}

int world_size(const TrainSpec& spec) { return spec.mode == TrainMode::Cp1 ? 1 : spec.cp; }

std::string cp_label(const TrainSpec& spec) {
  if (spec.mode == TrainMode::Cp1) return "1";
  if (spec.dynamic.empty()) return std::to_string(spec.cp);
  std::string s;
  for (int c : spec.dynamic) s += (s.empty() ? "" : "/") + std::to_string(c);
  return s;
}

// By default 7/8 of a full micro-batch's share at half the static size: a micro-batch more than 7/8 full
// runs at the static size W, one more than 7/16 full at W/2, a shorter one (a global batch's remainder)
// at W/4 or less, so the sizes spread over the allowed ones.
std::int64_t rank_budget(const TrainSpec& spec) {
  return spec.rank_budget > 0 ? spec.rank_budget
                              : std::max<std::int64_t>(1, 7 * spec.data.micro_batch_tokens / (4 * spec.cp));
}

void validate(const TrainSpec& spec) {
  validate(spec.data);
  if (spec.cp < 1) throw ConfigError("--cp " + std::to_string(spec.cp) + " is invalid: give a CP size of at least 1");
  if (spec.steps < 1) throw ConfigError("--steps " + std::to_string(spec.steps) + " is invalid: give at least 1 step");
  if (spec.model.layers < 1)
    throw ConfigError("--layers " + std::to_string(spec.model.layers) + " is invalid: give at least 1 layer");
  if (spec.model.vocab != spec.data.vocab)
    throw ConfigError("the model's vocabulary (" + std::to_string(spec.model.vocab) + ") is not the data's (" +
                      std::to_string(spec.data.vocab) + "): give one --vocab");
  for (int c : spec.dynamic)
    if (c < 1 || spec.cp % c != 0)
      throw ConfigError("--dynamic-cp " + comma_list(spec.dynamic) + ": " + std::to_string(c) +
                        " does not divide --cp " + std::to_string(spec.cp) +
                        ": list divisors of the static CP size, e.g. 1,2," + std::to_string(spec.cp));
  const ref::LayerConfig L(spec.model.layer);
  cp::validate_static(cp_config(spec), L);
}

std::vector<int> micro_batch_cps(const TrainSpec& spec, const GlobalBatch& batch) {
  std::vector<int> cps;
  for (const MicroBatchData& mb : batch.micro_batches)
    cps.push_back(spec.mode == TrainMode::Cp1 ? 1
                  : spec.dynamic.empty()      ? spec.cp
                                              : choose_cp(mb, spec.dynamic, rank_budget(spec)));
  return cps;
}

void check_recompute(const TrainSpec& spec, const std::vector<int>& cps, int step) {
  if (spec.mode != TrainMode::AllGather || spec.recompute == Recompute::Full) return;
  for (std::size_t m = 0; m < cps.size(); ++m)
    if (cps[m] > 1)
      throw ConfigError(
          "--recompute none with all_gather among the --mode list (the default list has it): micro-batch " +
          std::to_string(m + 1) + " of step " + std::to_string(step) +
          " runs all_gather at cp=" + std::to_string(cps[m]) +
          ", which needs full activation recompute when it computes gradients (as upstream): pass "
          "--recompute full, or leave all_gather out of --mode");
}

Trajectory train_rank(const TrainSpec& spec, comm::Communicator& world, std::unique_ptr<cp::Backend> backend) {
  const auto start = std::chrono::steady_clock::now();
  validate(spec);
  const int W = world_size(spec), rank = world.rank();
  if (world.size() != W)
    throw ConfigError("a " + std::string(train_mode_name(spec.mode)) + " run needs " + std::to_string(W) +
                      " ranks, the world has " + std::to_string(world.size()) + ": start it on " + std::to_string(W));
  cp::Backend& be = *backend;
  const DType sd = be.state_dtype();
  const cp::CpConfig cpc = cp_config(spec);
  AdamW optimizer(spec.adam, init_model(spec.model, spec.seed), state_dtype_for(spec.dtype));
  Trajectory out{std::string(train_mode_name(spec.mode)), cp_label(spec), {}, 0};
  for (int step = 0; step < spec.steps; ++step) {
    const GlobalBatch batch = global_batch(spec.data, step);
    const std::vector<int> cps = micro_batch_cps(spec, batch);
    check_recompute(spec, cps, step);
    const std::vector<Placement> where = place(cps, W);
    std::vector<Packed> packed;
    std::int64_t counted = 0;
    for (std::size_t m = 0; m < cps.size(); ++m) {
      packed.push_back(pack(batch.micro_batches[m], cps[m], faults::padding_counted()));
      counted += counted_tokens(packed.back());
    }
    const RankModel model(spec.model, cpc, optimizer.params(), be, world);
    // The loss is the sum of CE over counted tokens divided by the global batch's count, on every rank.
    const double normaliser = faults::loss_normaliser(static_cast<double>(counted), W,
                                                      [&] { return own_counted(model, packed, where, rank); });

    // Gradient accumulation. A micro-batch at the static size comes back summed over the whole world;
    // one on a smaller sub-group summed over that sub-group only, so the sub-groups' sums are added
    // across the world, each once: from the sub-group's rank 0.
    Named complete = zeros_like(optimizer.params()), partial = zeros_like(optimizer.params());
    double totals[2] = {0, 0};  // loss, counted tokens
    std::vector<std::size_t> order(cps.size());
    for (std::size_t m = 0; m < order.size(); ++m) order[m] = spec.reordered ? order.size() - 1 - m : m;
    for (const std::size_t m : order) {
      if (!where[m].holds(rank)) continue;
      const int c = cps[m];
      MicroBatchResult r = model.run(packed[m], c, normaliser, spec.recompute, spec.reordered);
      totals[0] += r.loss;
      totals[1] += static_cast<double>(r.counted);
      if (c == W) add_into(complete, r.grads, sd);
      else if (faults::adds_sub_group_grads(rank % c == 0, rank, c)) add_into(partial, r.grads, sd);
    }
    const bool sub_groups = std::any_of(cps.begin(), cps.end(), [&](int c) { return c < W; });
    if (faults::sub_groups_combined(sub_groups)) all_reduce(partial, world, sd);
    add_into(complete, partial, sd);
    world.all_reduce(comm::MutBuf(totals, 2));

    StepRecord rec;
    rec.step = step;
    rec.loss = totals[0];
    rec.effective_tokens = static_cast<std::int64_t>(totals[1]);
    rec.grad_norm = l2_norm(complete);
    rec.update_norm = optimizer.step(complete);
    rec.cps = cps;
    out.steps.push_back(rec);
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

Trajectory train_in_process(const TrainSpec& spec) {
  validate(spec);
  const int W = world_size(spec);
  std::vector<Trajectory> per_rank(static_cast<std::size_t>(W));
  comm::run_world(W, [&](comm::Communicator& world) {
    per_rank[static_cast<std::size_t>(world.rank())] = train_rank(spec, world, cpu::make_backend(spec.dtype));
  });
  return per_rank[0];
}

}  // namespace gdnv::train
