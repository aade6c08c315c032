#pragma once
// Running what harness/run_spec.hpp ruled legal: GdnCpLayer on a world of tp*cp ranks (in-process, or one
// rank of any transport), each rank planning every checked micro-batch as it is, and what the ranks
// computed assembled back into natural order for comparison with the oracle (harness/oracle.hpp).
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "comm/accounting.hpp"
#include "comm/inprocess.hpp"
#include "cost/cost.hpp"
#include "cp/backend.hpp"
#include "cp/stage_record.hpp"
#include "harness/case.hpp"
#include "harness/oracle.hpp"
#include "harness/run_spec.hpp"

namespace gdnv::harness {

using cp::Backend;
using cp::BackendFactory;

// What one rank of the world computed for one micro-batch.
struct RankOutput {
  int cp_size = 1, cp_rank = 0;
  Tensor out, grad_hidden;  // this CP rank's zigzag shard, F64
  ref::LayerParams grads;   // this TP rank's shard, summed over CP (F64)
  comm::Counters forward, backward;
  // What cost/cost.hpp predicts, measured by a CountingBackend around the factory's backend: the FLOPs
  // of the ops that ran, and the bytes the forward allocated and left alive for the backward.
  double forward_flops = 0, backward_flops = 0;
  std::int64_t saved_bytes = 0;
  int tp_rank = 0;
  std::vector<cp::HostStage> stages;  // RunSpec::stages: what this rank recorded
};

// Which elements of a reassembled stage one CP rank computed: natural rows x full-layer columns
// (cols empty: every column). all_gather's summed gradients are attributed to the rank's zigzag rows.
struct StagePiece {
  int cp_rank = 0;
  std::vector<std::int64_t> rows, cols;
};

struct MicroBatchRun {
  int cp_size = 1;
  Answer answer;
  comm::Counters forward, backward;  // world rank 0's collectives in this micro-batch
  std::vector<RankOutput> ranks;     // what every world rank computed and measured, by world rank
  std::map<std::string, std::vector<StagePiece>> stage_pieces;  // RunSpec::stages: who computed what
};

// Every CP rank's recorded stages of one micro-batch of CP size run.cp_size, put (or summed) at their
// natural rows and full-layer columns: run.answer.stages, with who computed what in run.stage_pieces.
// `ranks`: the world ranks of the first CP sub-group, by world rank (cp_rank * tp + tp_rank).
void assemble_stages(const Case& c, std::span<const RankOutput* const> ranks, MicroBatchRun& run);

// One backend per rank of an in-process world, and the world's options whose movers carry each rank's
// collectives in order with its backend's work (device backends: on its stream).
struct RankBackends {
  std::vector<std::unique_ptr<Backend>> backends;  // by world rank
  comm::WorldOptions options;
};
RankBackends make_rank_backends(int ranks, const BackendFactory& factory, DType dtype);

// This rank's part of every micro-batch of `run` on `world` (tp * cp ranks, any transport whose Memory is
// the backend's): the TP x CP grid, the layer, then fwd+bwd per micro-batch, each planned from its checked
// micro-batch with nothing checked again, the backend's host syncs counted in the rank's Accounting.
// Micro-batch m runs on cases[m], or every one on the only case given. Collective over `world`.
std::vector<RankOutput> run_rank(const CheckedRun& run, std::span<const Case> cases, std::unique_ptr<Backend> backend,
                                 comm::Communicator& world);
inline std::vector<RankOutput> run_rank(const CheckedRun& run, const Case& c, std::unique_ptr<Backend> backend,
                                        comm::Communicator& world) {
  return run_rank(run, std::span<const Case>(&c, 1), std::move(backend), world);
}

// Where world rank `world_rank` sits in a micro-batch of CP size `cp_size` (dynamic CP: groups of
// consecutive static CP ranks).
cost::RankPlace place_of(const RunSpec& spec, int world_rank, int cp_size);

// `spec` checked on the packings of `cases` (one per micro-batch, or one for all), each micro-batch once:
// ConfigError (the configuration, a case count that fits neither, each case's packing at its
// micro-batch's CP size) before any world starts.
CheckedRun check_cases(const RunSpec& spec, std::span<const Case> cases);

// Runs every micro-batch of `run` fwd+bwd on tp*cp in-process ranks (world rank = cp_rank * tp +
// tp_rank), micro-batch m on cases[m] (make_cases of run.spec), or every one on the only case given; each
// answer is in its case's natural order.
std::vector<MicroBatchRun> run_in_process(const CheckedRun& run, std::span<const Case> cases,
                                          const BackendFactory& factory);
// The same after check_cases(spec, cases).
std::vector<MicroBatchRun> run_in_process(const RunSpec& spec, std::span<const Case> cases,
                                          const BackendFactory& factory);
inline std::vector<MicroBatchRun> run_in_process(const RunSpec& spec, const Case& c, const BackendFactory& factory) {
  return run_in_process(spec, std::span<const Case>(&c, 1), factory);
}

}  // namespace gdnv::harness
