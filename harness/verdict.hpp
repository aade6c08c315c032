#pragma once
// Judging a run against the oracle tensor by tensor, in the order a divergence propagates
// (ref::judged_order), and naming where it starts: the first tensor outside its gate, and the CP rank
// whose part of it diverges first (docs/DESIGN.md §4).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/metrics.hpp"
#include "harness/world.hpp"

namespace gdnv::harness {

struct TensorVerdict {
  std::string name;
  Metrics m;
  double gate = 0;  // relative RMS
  bool pass = false;
  Tolerances tol;
  bool missing = false;  // the run has no such tensor: a failing verdict, never a skipped one
};
// Every tensor of `oracle` in ref::judged_order: out, grad_hidden and every grad::<param> always (one the
// run lacks fails as `missing`), a stage where the run recorded it (stages are recorded on request).
std::vector<TensorVerdict> judge_answer(const Answer& oracle, const Answer& got,
                                        const std::map<std::string, double>& gates);

struct Divergence {
  std::string name;
  bool backward = false;
  int rank = -1, world = 1;  // CP rank of CP size; rank -1: every rank (a CP-summed parameter gradient)
  std::int64_t row_begin = 0, row_end = 0;
  std::string metric;  // "rel_rms", "nan/inf" or "missing" (the run has no such tensor)
  double value = 0, gate = 0;
  // The layout `rank` held the rows in ("zigzag" | "contiguous"; "" when its rows are neither, as a head
  // shard's, or W = 1) and, where rows a..b belong to other ranks in the other layout, those ranks
  // (name_layouts; docs/DESIGN.md §2).
  std::string layout;
  std::vector<int> other_ranks;
};
// The first failing verdict and, among the CP ranks that computed it, the lowest whose own elements are
// outside the gate; rows a..b are that rank's natural rows whose error is above the gate's level
// (rms error of the row > gate * rms of the whole reference), else all its rows. nullopt: all pass.
std::optional<Divergence> first_divergence(const std::vector<TensorVerdict>& verdicts, const Answer& oracle,
                                           const MicroBatchRun& run, const Case& c);
// Who computed which rows of tensor `name` of `run`: the recorded pieces of a stage; for out and
// grad_hidden each CP rank's zigzag shard; none for parameter gradients (summed over every rank).
std::vector<StagePiece> pieces_of(const std::string& name, const MicroBatchRun& run, const Case& c);

// A divergence of tensor `name` (backward by its name) at `rank` of `world`, rows 0..0, no metric yet.
Divergence divergence_at(const std::string& name, int rank, int world);
// Fills d.layout and d.other_ranks: `held` are every natural row of d.name rank d.rank computed, `named`
// the rows the divergence names; in chunkwise a contiguous rank's rows may sit on other zigzag ranks, and
// a report names both (docs/DESIGN.md §8).
void name_layouts(Divergence& d, const Case& c, const std::vector<std::int64_t>& held,
                  const std::vector<std::int64_t>& named);
// "first divergence: <name> (<forward|backward>, rank r of W, rows a..b): <metric> <value> > gate <gate>",
// "rows a..b <layout>; <other layout> ranks i, j)" where those rows sit on other ranks in the other layout
// ("... rows a..b): missing from the run" for a missing tensor)
std::string divergence_line(const Divergence& d);
// The same as JSON, one shape for every report (docs/json_format.md): tensor, direction, rank, world,
// rows [a, b], metric, value, gate and line.
nlohmann::json divergence_json(const Divergence& d);

// Reruns `spec` (each micro-batch) with its stages recorded; the first divergence of the first failing
// micro-batch, nullopt when every tensor passes.
std::optional<Divergence> find_first_divergence(const RunSpec& spec, const BackendFactory& factory);
// For a failing case of the CP matrix: divergence_line of find_first_divergence, "" when every tensor
// passes or the run does not complete (an Error other than ConfigError: there is no stage to name).
std::string first_divergence_line(const RunSpec& spec, const BackendFactory& factory);

// Every micro-batch of one run, judged against its oracle (stages included when the spec asks for them).
struct JudgedRun {
  std::vector<Case> cases;
  std::vector<MicroBatchRun> runs;
  std::vector<Answer> oracles;  // by run
  std::vector<std::vector<TensorVerdict>> verdicts;
  bool pass = true;
};

JudgedRun run_and_judge(const CheckedRun& run, const cp::BackendFactory& factory);

}  // namespace gdnv::harness
