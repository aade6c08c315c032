#pragma once
// Recording the layer's named stages (docs/DESIGN.md §1.3) as a rank computes them, so a failing run can
// say which op diverged first and on which rank. Off unless the caller puts a StageRecorder in the
// Context: then every mode hands each stage's buffer to a StageTap, with where its rows and columns sit
// in the whole micro-batch (natural rows of the micro-batch, full-layer columns: TP and headwise slices
// mapped back). Buffers are kept as handles and downloaded after the step (download_stages), so the
// recorded step makes no extra host sync.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cp/backend.hpp"

namespace gdnv::cp {

struct StageRecord {
  std::string name;
  Buffer data;                     // [n, width] (any shape of that numel)
  std::vector<std::int64_t> take;  // rows of data kept (empty: all)
  std::vector<std::int64_t> rows;  // micro-batch row (cu order; the boundary state: CP rank) of each kept row
  std::vector<std::int64_t> cols;  // full-layer column of each column of data
  bool sum = false;                // a partial to be summed over CP ranks (all_gather's backward)
  bool replicated_over_tp = false;
  double l2_eps = -1;  // >= 0: each row of dk columns L2-normalised on download, as the core does in-kernel
};

struct StageRecorder {
  std::vector<StageRecord> records;
};

// Where a recorded buffer's rows live: the projections' rows or the mixer's rows of this rank, or one
// row per CP rank (the chunkwise boundary state: `rank` is the row).
enum class StageRows { Proj, Mixer, Boundary };
// A buffer's columns: hidden, in_proj output, conv channels, q, k, v (Hv*dv), value heads, state.
enum class StageCols { Hidden, InProj, Conv, Q, K, V, Heads, State };

// One rank's map from its buffers to the micro-batch (built by GdnCpLayer::forward when recording).
struct StagePlan {
  std::vector<std::int64_t> proj_rows, mixer_rows;  // micro-batch rows of the rank's buffer rows
  std::vector<std::int64_t> own_rows;               // all_gather: the rank's zigzag rows (forward keeps only them)
  bool sum_backward = false;                        // all_gather: backward stages are partials over CP
  bool replicated_over_tp = false;                  // hidden-wide stages: every TP rank holds all of them
  std::vector<std::int64_t> in_proj, conv, q, k, v, heads, state;  // full-layer columns
  double l2_eps = 1e-6;  // the core's L2 norm as this implementation applies it
};

struct StageTap {
  StageRecorder* recorder = nullptr;  // nullptr: off, and every call below returns at once
  std::shared_ptr<const StagePlan> plan;

  explicit operator bool() const { return recorder != nullptr; }
  // Records `data` as stage `name` ("stage::..." forward, "stage_grad::..." backward). `row` is the
  // boundary state's row (StageRows::Boundary only).
  void operator()(std::string_view name, const Buffer& data, StageRows rows, StageCols cols,
                  std::int64_t row = 0) const;
};

// A recorded stage on the host, F64 [kept rows, cols].
struct HostStage {
  std::string name;
  Tensor data;
  std::vector<std::int64_t> rows, cols;
  bool sum = false, replicated_over_tp = false;
};
std::vector<HostStage> download_stages(Backend& backend, const StageRecorder& recorder);

}  // namespace gdnv::cp
