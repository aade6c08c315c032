#pragma once
// The training loop under test (docs/DESIGN.md §13): static or dynamic CP, gradient
// accumulation over the micro-batches of each global batch, recompute none|full, AdamW; one record per
// step. The planted faults that only training shows are honoured here (never by train/oracle.*).
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "comm/communicator.hpp"
#include "cp/backend.hpp"
#include "train/data.hpp"
#include "train/model.hpp"
#include "train/optimizer.hpp"

namespace gdnv::train {

// What a run trains: cp1 (one rank, the reference) or a CP mode at TrainSpec::cp.
enum class TrainMode { Cp1, Headwise, Chunkwise, AllGather };
std::string_view train_mode_name(TrainMode mode);  // "cp1", "headwise", "chunkwise", "all_gather"
// --mode's names: ConfigError naming the choices for anything else.
TrainMode parse_train_mode(std::string_view name);

struct TrainSpec {
  ModelConfig model;
  DataSpec data;
  AdamWConfig adam;
  TrainMode mode = TrainMode::Cp1;
  int cp = 4;                    // static CP size: the world of the CP modes
  std::vector<int> dynamic;      // dynamic CP sizes (divisors of cp); empty: every micro-batch at cp
  std::int64_t rank_budget = 0;  // dynamic CP's per-rank tokens; 0: 7 data.micro_batch_tokens / (4 cp)
  DType dtype = DType::BF16;
  int steps = 8;
  Recompute recompute = Recompute::Full;
  // The noise band's legal perturbation: micro-batches accumulated in reverse order, and each one's loss
  // gradient taken back as two parts (even and odd rows) whose gradients are summed.
  bool reordered = false;
  std::uint64_t seed = 0;  // model initialisation (the data has data.seed)
};

struct StepRecord {
  int step = 0;
  double loss = 0, grad_norm = 0, update_norm = 0;
  std::int64_t effective_tokens = 0;
  std::vector<int> cps;  // each micro-batch's CP size
};

struct Trajectory {
  std::string mode;  // cp1, headwise, ..., cp1-reordered, oracle
  std::string cp;    // "1", "4", "1/2/4" (dynamic)
  std::vector<StepRecord> steps;
  double seconds = 0;
};

// ConfigError naming the option and the fix (mode, sizes, dynamic sizes that do not divide cp, data).
void validate(const TrainSpec& spec);
int world_size(const TrainSpec& spec);  // 1 for cp1, else cp
std::string cp_label(const TrainSpec& spec);
std::int64_t rank_budget(const TrainSpec& spec);

// The CP size each micro-batch of `batch` runs at.
std::vector<int> micro_batch_cps(const TrainSpec& spec, const GlobalBatch& batch);
// all_gather with gradients needs full recompute (as upstream): a ConfigError naming --recompute when a
// micro-batch of the step enters the all_gather path (mode all_gather at CP > 1) under recompute none.
void check_recompute(const TrainSpec& spec, const std::vector<int>& cps, int step);

// This rank's part of the run on `world` (world_size(spec) ranks, any transport): every rank returns the
// trajectory as it saw it (world rank 0's is the run's). Collective over `world`.
Trajectory train_rank(const TrainSpec& spec, comm::Communicator& world, std::unique_ptr<cp::Backend> backend);
// The run on an in-process world of world_size(spec) ranks with the CPU backend.
Trajectory train_in_process(const TrainSpec& spec);

}  // namespace gdnv::train
