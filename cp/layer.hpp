#pragma once
// GdnCpLayer: the GatedDeltaNet layer of docs/DESIGN.md §1.3 under context parallelism (§3). The mode is
// static per instance; every micro-batch arrives in zigzag layout and leaves in zigzag layout.
//
//   GdnCpLayer layer(config, cp, params, backend, cp_group, tp_group);
//   auto mb = layer.prepare(layer.check(spec));  // once per micro-batch: validation, then routes, indices
//   Context ctx;
//   Buffer out = layer.forward(mb, hidden, ctx);  // hidden: [T_loc, 1, hidden] or [S_loc, B, hidden]
//   LayerBackward g = layer.backward(ctx, grad_out);
//
// To record the named stages (cp/stage_record.hpp), set ctx.tap.recorder before forward.
//
// forward/backward are const: all per-call state lives in the caller's Context, so one layer serves
// many micro-batches (and dynamic CP sizes) without mutating shared state.
#include <map>
#include <memory>
#include <utility>

#include "comm/groups.hpp"
#include "cp/cp_config.hpp"
#include "cp/modes.hpp"
#include "reference/layer_params.hpp"

namespace gdnv::cp {

// Parameter gradients where the backend computes: this TP rank's shard in state_dtype(), shaped as the
// parameter, summed over CP; replicated ones full.
using BufferGrads = std::map<std::string, Buffer>;

struct LayerBackward {
  Buffer grad_hidden;  // like the forward's hidden
  BufferGrads grads;
};

// The gradients on the host in F64 (one download each: outside the layer's step).
ref::LayerParams download_grads(Backend& backend, const BufferGrads& grads);

struct RankSlice;  // a CP rank's mixer slice (cp/layer.cpp)

class GdnCpLayer {
 public:
  // `params`: the full layer (F64); the layer keeps its TP rank's shard in the backend's dtype.
  // `tp_group` may be nullptr (tp = 1). Throws ConfigError (docs/DESIGN.md §3.1) before any collective.
  GdnCpLayer(const ref::LayerConfig& config, const CpConfig& cp, const ref::LayerParams& params, Backend& backend,
             comm::Communicator& cp_group, comm::Communicator* tp_group = nullptr);
  ~GdnCpLayer();

  // check_micro_batch against this layer's configuration. Dynamic CP: pass its group and local_cp_size together.
  CheckedMicroBatch check(const MicroBatchSpec& spec, const comm::Communicator* cp_group = nullptr,
                          int local_cp_size = 0) const;
  // Plans a micro-batch checked against this layer's configuration, on the group it was checked for (the
  // static one, or dynamic_group of its CP size), checking nothing again.
  std::shared_ptr<const MicroBatch> prepare(const CheckedMicroBatch& mb) const;
  Buffer forward(const std::shared_ptr<const MicroBatch>& mb, const Buffer& hidden, Context& ctx) const;
  LayerBackward backward(const Context& ctx, const Buffer& grad_output) const;

  // The sub-group of the static CP group for a dynamic CP size (split once, at construction).
  comm::Communicator& dynamic_group(int size) const;

  // Hash of everything the layer holds (configs, parameter shards on the host and on the backend),
  // so a test can show forward/backward never write shared state.
  std::uint64_t fingerprint() const;

  const CpConfig& cp_config() const { return cp_; }
  const ref::LayerConfig& tp_local_config() const { return local_config_; }
  Backend& backend() const { return be_; }

 private:
  struct SizeParams;  // everything that depends on the CP size (headwise slices, index maps)
  const SizeParams& size_params(int cp_size) const;
  std::unique_ptr<SizeParams> make_size_params(int cp_size) const;
  RankSlice make_slice(const std::vector<std::int64_t>& channels, const std::vector<std::int64_t>& heads,
                       int cp_size) const;
  LayerParts parts(const MicroBatch& mb) const;
  std::shared_ptr<const StagePlan> stage_plan(const MicroBatch& mb) const;
  BufferGrads reduce_grads(const MicroBatch& mb, const LocalGrads& g) const;

  ref::LayerConfig config_, local_config_;
  CpConfig cp_;
  Backend& be_;
  comm::Communicator& cp_group_;
  comm::Communicator* tp_;
  ref::LayerParams local_params_;  // TP shard, F64
  std::unique_ptr<comm::DynamicCpGroups> dynamic_groups_;
  std::map<int, std::unique_ptr<SizeParams>> by_size_;
  // Only under the planted fault DynamicCpReusesPlan: the first plan of each CP size.
  mutable std::map<int, std::shared_ptr<const MicroBatch>> plan_by_size_;
};

}  // namespace gdnv::cp
