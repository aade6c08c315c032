#include "cp/layer.hpp"

#include <cmath>
#include <numeric>

#include "core/rng.hpp"
#include "faults/seams.hpp"
#include "layouts/apply.hpp"
#include "layouts/headwise.hpp"
#include "layouts/partition.hpp"
#include "reference/tp_sharding.hpp"

namespace gdnv::cp {
namespace {

std::vector<std::int64_t> iota(std::int64_t n) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

// A gradient summed over CP in `dtype`: in place, or (the planted fault GradAllreduceBf16) cast, all-reduced
// and cast back: half the bytes, and the sum rounded to bf16.
void all_reduce_in(Backend& be, comm::Communicator& cp, Buffer& grad, DType dtype) {
  if (dtype == grad.dtype()) return cp.all_reduce(grad.mut());
  Buffer narrow = be.alloc(dtype, grad.shape());
  be.accumulate(narrow, grad);
  cp.all_reduce(narrow.mut());
  grad = be.alloc(grad.dtype(), grad.shape());
  be.accumulate(grad, narrow);
}

}  // namespace

// The mixer slice CP rank j computes, and how its gradients land in the TP-local tensors.
struct RankSlice {
  MixerParams mixer;
  Buffer conv_rows, head_rows;                // I64: TP-local conv channels / value heads of the slice
  std::vector<std::int64_t> channels, heads;  // the same on the host (stage recording maps columns with them)
};

struct GdnCpLayer::SizeParams {
  ProjParams proj;      // in_proj rows permuted for headwise
  Buffer in_proj_rows;  // I64 [P]: TP-local in_proj row of each proj.in_proj row
  std::vector<std::int64_t> in_proj_rows_host;
  std::vector<RankSlice> slices;  // by CP rank
};

GdnCpLayer::GdnCpLayer(const ref::LayerConfig& config, const CpConfig& cp, const ref::LayerParams& params,
                       Backend& backend, comm::Communicator& cp_group, comm::Communicator* tp_group)
    : config_(config),
      local_config_((validate_static(cp, config), ref::tp_local_config(config, cp.tp))),
      cp_(cp),
      be_(backend),
      cp_group_(cp_group),
      tp_(tp_group) {
  const int tp_size = tp_group ? tp_group->size() : 1;
  if (tp_size != cp.tp)
    throw ConfigError("tp = " + std::to_string(cp.tp) + " but the TP group has " + std::to_string(tp_size) +
                      " ranks: pass the TP group of size tp");
  if (cp_group.size() != cp.cp)
    throw ConfigError("cp = " + std::to_string(cp.cp) + " but the CP group has " + std::to_string(cp_group.size()) +
                      " ranks: pass the static CP group of size cp");
  ref::validate_params(config, params);
  local_params_ = ref::tp_shard(config, params, cp.tp, tp_group ? tp_group->rank() : 0);

  std::vector<int> sizes{cp.cp};
  for (int c : cp.dynamic_cp)
    if (c != cp.cp) sizes.push_back(c);
  dynamic_groups_ = std::make_unique<comm::DynamicCpGroups>(cp_group, sizes);
  for (int c : sizes) by_size_[c] = make_size_params(c);
}

// The parameters every micro-batch of CP size c uses: in_proj rows permuted so each CP rank's
// sections form one block (headwise), and the mixer slice of each CP rank.
std::unique_ptr<GdnCpLayer::SizeParams> GdnCpLayer::make_size_params(int c) const {
  auto sp = std::make_unique<SizeParams>();
  const layouts::HeadwiseGeometry geo{config_.Hk(), config_.Hv(), config_.dk(), config_.dv(), cp_.tp, c};
  const bool headwise = cp_.mode == CpMode::Headwise;
  const std::vector<std::int64_t> rows =
      headwise ? layouts::in_proj_row_permutation(geo) : iota(local_config_.in_proj_dim());
  sp->proj = {be_.upload(local_params_.at(ref::kInProjNorm), be_.dtype()),
              be_.upload(layouts::gather_rows(local_params_.at(ref::kInProj), rows), be_.dtype()),
              be_.upload(local_params_.at(ref::kOutProj), be_.dtype()), config_.eps()};
  sp->in_proj_rows = upload_index(be_, rows);
  sp->in_proj_rows_host = rows;
  const int slices = headwise ? c : 1;
  for (int j = 0; j < slices; ++j) {
    const int owner = faults::head_owner(j, slices);
    sp->slices.push_back(
        headwise ? make_slice(layouts::conv_channels_of(geo, owner), layouts::value_head_indices_of(geo, owner), c)
                 : make_slice(iota(local_config_.conv_dim()), iota(local_config_.Hv()), 1));
  }
  return sp;
}

// The mixer over TP-local conv channels `channels` and value heads `heads` (1/c of the heads).
RankSlice GdnCpLayer::make_slice(const std::vector<std::int64_t>& channels, const std::vector<std::int64_t>& heads,
                                 int c) const {
  const ref::LayerConfig& L = local_config_;
  const std::int64_t W = L.W();
  RankSlice slice;
  MixerParams& mp = slice.mixer;
  mp.geo = {L.Hk() / c, L.Hv() / c, L.dk(), L.dv(), W, L.eps(), 1.0 / std::sqrt(static_cast<double>(L.dk()))};
  const Tensor conv_w = layouts::gather_rows(local_params_.at(ref::kConvWeight), channels);
  mp.conv_w = be_.upload(conv_w.reshaped({static_cast<std::int64_t>(channels.size()), W}), be_.dtype());
  if (L.conv_bias())
    mp.conv_b = be_.upload(layouts::gather_rows(local_params_.at(ref::kConvBias), channels), be_.dtype());
  mp.A_log = be_.upload(layouts::gather_rows(local_params_.at(ref::kALog), heads), be_.dtype());
  mp.dt_bias = be_.upload(layouts::gather_rows(local_params_.at(ref::kDtBias), heads), be_.dtype());
  mp.out_norm = be_.upload(local_params_.at(ref::kOutNorm), be_.dtype());
  plan_mixer_columns(be_, mp);
  slice.conv_rows = upload_index(be_, channels);
  slice.head_rows = upload_index(be_, heads);
  slice.channels = channels;
  slice.heads = heads;
  return slice;
}

GdnCpLayer::~GdnCpLayer() = default;

std::uint64_t GdnCpLayer::fingerprint() const {
  std::uint64_t h = stream_of(std::string(mode_name(cp_.mode)));
  auto mix_bytes = [&](const std::uint8_t* bytes, std::size_t n) {
    h = hash64(h, n, stream_of(std::string_view(reinterpret_cast<const char*>(bytes), n)));
  };
  auto mix_buffer = [&](const Buffer& b) {
    if (b.empty()) return;
    const Tensor t = be_.download(b);
    mix_bytes(t.bytes(), t.nbytes());
  };
  for (std::int64_t v : {std::int64_t{cp_.tp}, std::int64_t{cp_.cp}, config_.hidden(), config_.Hk(), config_.Hv(),
                         config_.dk(), config_.dv(), config_.W()})
    h = hash64(h, 0, static_cast<std::uint64_t>(v));
  for (const auto& [name, t] : local_params_) mix_bytes(t.bytes(), t.nbytes());
  for (const auto& [c, sp] : by_size_) {
    for (const Buffer* b : {&sp->proj.ln_w, &sp->proj.in_proj, &sp->proj.out_proj, &sp->in_proj_rows}) mix_buffer(*b);
    for (const RankSlice& rs : sp->slices)
      for (const Buffer* b : {&rs.mixer.conv_w, &rs.mixer.conv_b, &rs.mixer.A_log, &rs.mixer.dt_bias,
                              &rs.mixer.out_norm, &rs.conv_rows, &rs.head_rows})
        mix_buffer(*b);
  }
  return h;
}

comm::Communicator& GdnCpLayer::dynamic_group(int size) const {
  (void)size_params(size);  // ConfigError naming the fix for an undeclared size
  return dynamic_groups_->group(size);
}

const GdnCpLayer::SizeParams& GdnCpLayer::size_params(int cp_size) const {
  auto it = by_size_.find(cp_size);
  if (it == by_size_.end())
    throw ConfigError("CP size " + std::to_string(cp_size) + " was not declared: list it in dynamic_cp");
  return *it->second;
}

CheckedMicroBatch GdnCpLayer::check(const MicroBatchSpec& spec, const comm::Communicator* cp_group,
                                    int local_cp_size) const {
  return check_micro_batch(cp_, config_, spec, cp_group ? cp_group->size() : 0, local_cp_size);
}

std::shared_ptr<const MicroBatch> GdnCpLayer::prepare(const CheckedMicroBatch& checked) const {
  (void)size_params(checked.cp_size());
  comm::Communicator* cp_group = checked.dynamic() ? &dynamic_group(checked.cp_size()) : nullptr;
  auto mb = make_micro_batch(be_, checked, cp_group ? *cp_group : cp_group_, cp_.mode, config_.W());
  mb = faults::reused_plan(plan_by_size_, mb->cp_size, mb);
  if (!cp_group) return mb;
  comm::Communicator* const group = faults::dynamic_cp_group(mb->cp, &cp_group_);
  if (group == mb->cp) return mb;
  auto moved = std::make_shared<MicroBatch>(*mb);
  moved->cp = group;
  return moved;
}

LayerParts GdnCpLayer::parts(const MicroBatch& mb) const {
  const SizeParams& sp = size_params(mb.cp_size);
  const std::size_t slice = cp_.mode == CpMode::Headwise ? static_cast<std::size_t>(mb.cp_rank) : 0;
  return {be_, sp.proj, sp.slices.at(slice).mixer, tp_};
}

Buffer GdnCpLayer::forward(const std::shared_ptr<const MicroBatch>& plan, const Buffer& hidden, Context& ctx) const {
  const MicroBatch& mb = *plan;
  const std::int64_t width = config_.hidden();
  if (hidden.numel() != mb.local_tokens * width)
    throw ConfigError("hidden_states " + shape_str(hidden.shape()) + " hold " + std::to_string(hidden.numel() / width) +
                      " tokens but this rank's zigzag partition has " + std::to_string(mb.local_tokens) +
                      ": pass the rank's zigzag shard of the micro-batch");
  Buffer hidden_rows = hidden.reshaped({mb.local_tokens, width});
  if (mb.format == Format::Sbhd) hidden_rows = be_.gather_rows(hidden_rows, mb.sbhd_to_rows);
  StageRecorder* const recorder = ctx.tap.recorder;
  ctx = Context{};
  ctx.mb = plan;
  if (recorder) ctx.tap = {recorder, stage_plan(mb)};
  const LayerParts p = parts(mb);
  Buffer out;
  if (mb.cp_size == 1) out = plain_forward(p, mb.full, hidden_rows, ctx);
  else if (cp_.mode == CpMode::Headwise) out = headwise_forward(p, hidden_rows, ctx);
  else if (cp_.mode == CpMode::AllGather) out = all_gather_forward(p, hidden_rows, ctx);
  else out = chunkwise_forward(p, hidden_rows, ctx);
  if (mb.format == Format::Sbhd) out = be_.gather_rows(out, mb.rows_to_sbhd);
  return out.reshaped(hidden.shape());
}

LayerBackward GdnCpLayer::backward(const Context& ctx, const Buffer& grad_output) const {
  const MicroBatch& mb = *ctx.mb;
  Buffer dout = grad_output.reshaped({mb.local_tokens, config_.hidden()});
  if (mb.format == Format::Sbhd) dout = be_.gather_rows(dout, mb.sbhd_to_rows);
  const LayerParts p = parts(mb);
  LocalGrads g;
  if (mb.cp_size == 1) g = plain_backward(p, ctx, dout);
  else if (cp_.mode == CpMode::Headwise) g = headwise_backward(p, ctx, dout);
  else if (cp_.mode == CpMode::AllGather) g = all_gather_backward(p, ctx, dout);
  else g = chunkwise_backward(p, ctx, dout);
  Buffer grad_hidden = mb.format == Format::Sbhd ? be_.gather_rows(g.dhidden, mb.rows_to_sbhd) : g.dhidden;
  return {grad_hidden.reshaped(grad_output.shape()), reduce_grads(mb, g)};
}

BufferGrads GdnCpLayer::reduce_grads(const MicroBatch& mb, const LocalGrads& g) const {
  const SizeParams& sp = size_params(mb.cp_size);
  const std::size_t slice = cp_.mode == CpMode::Headwise ? static_cast<std::size_t>(mb.cp_rank) : 0;
  const RankSlice& rs = sp.slices.at(slice);
  const ref::LayerConfig& L = local_config_;
  const DType sd = be_.state_dtype();
  // Every gradient into a TP-local-shaped state-dtype buffer, then one sum over CP each.
  auto placed = [&](const Buffer& part, const Buffer& rows, Shape full) {
    Buffer out = be_.alloc(sd, full);
    const std::int64_t width = shape_numel(full) / full[0];
    Buffer rows_view = out.reshaped({full[0], width});
    be_.scatter_rows(part.reshaped({part.numel() / width, width}), rows, rows_view);
    return out;
  };
  BufferGrads grads;
  grads[ref::kInProjNorm] = g.d_ln_w;
  grads[ref::kInProj] = placed(g.d_in_proj, sp.in_proj_rows, {L.in_proj_dim(), L.hidden()});
  grads[ref::kOutProj] = g.d_out_proj;
  grads[ref::kConvWeight] = placed(g.mixer.d_conv_w, rs.conv_rows, {L.conv_dim(), 1, L.W()});
  if (L.conv_bias()) grads[ref::kConvBias] = placed(g.mixer.d_conv_b, rs.conv_rows, {L.conv_dim()});
  grads[ref::kALog] = placed(g.mixer.d_A_log, rs.head_rows, {L.Hv()});
  grads[ref::kDtBias] = placed(g.mixer.d_dt_bias, rs.head_rows, {L.Hv()});
  grads[ref::kOutNorm] = g.mixer.d_out_norm;
  if (tp_ && tp_->size() > 1) tp_->all_reduce(grads[ref::kOutNorm].mut());  // replicated over TP, per-head partials

  for (auto& [name, buf] : grads) {
    if (faults::grad_reduction_ranks(mb.cp_size) > 1)
      all_reduce_in(be_, *mb.cp, buf, faults::grad_all_reduce_dtype(buf.dtype(), be_.dtype()));
    buf = buf.reshaped(ref::param_shape(L, name));
  }
  return grads;
}

namespace {

std::vector<std::int64_t> iota_range(std::int64_t begin, std::int64_t end) {
  std::vector<std::int64_t> v;
  for (std::int64_t i = begin; i < end; ++i) v.push_back(i);
  return v;
}

// Micro-batch rows (cu order; SBHD batch-major b*S + s) of this rank's zigzag rows in the order the layer
// holds them (SBHD: batch-major over the local S positions). From the layout itself, never from the
// plan's index maps, so a fault in those shows as a wrong stage, not a wrong map.
std::vector<std::int64_t> zigzag_mb_rows(const MicroBatch& mb) {
  if (mb.format == Format::Thd) return layouts::positions_of(layouts::zigzag_runs(mb.cu, mb.cp_size, mb.cp_rank));
  const std::int64_t seq[] = {0, mb.seq_len};
  const auto s = layouts::positions_of(layouts::zigzag_runs(seq, mb.cp_size, mb.cp_rank));
  std::vector<std::int64_t> rows;
  for (std::int64_t b = 0; b < mb.batch; ++b)
    for (const std::int64_t pos : s) rows.push_back(b * mb.seq_len + pos);
  return rows;
}

// Full-layer columns of TP rank t's local q, k, v columns, conv channels and in_proj rows (every
// section is cut into tp equal head-aligned parts, docs/DESIGN.md §1.3).
struct TpColumns {
  const ref::LayerConfig& full;
  const ref::LayerConfig& local;
  std::int64_t t;

  std::int64_t q(std::int64_t c) const { return t * local.qk_dim() + c; }
  std::int64_t v(std::int64_t c) const { return t * local.v_dim() + c; }
  std::int64_t head(std::int64_t h) const { return t * local.Hv() + h; }
  std::int64_t conv(std::int64_t ch) const {
    const std::int64_t qk = local.qk_dim();
    if (ch < qk) return q(ch);
    if (ch < 2 * qk) return full.qk_dim() + q(ch - qk);
    return 2 * full.qk_dim() + v(ch - 2 * qk);
  }
  std::int64_t in_proj(std::int64_t row) const {
    const std::int64_t sizes[] = {local.qk_dim(), local.qk_dim(), local.v_dim(), local.v_dim(), local.Hv(), local.Hv()};
    const std::int64_t full_sizes[] = {full.qk_dim(), full.qk_dim(), full.v_dim(), full.v_dim(), full.Hv(), full.Hv()};
    std::int64_t at = 0;
    for (int i = 0; i < 6; ++i) {
      if (row < sizes[i]) return at + t * sizes[i] + row;
      row -= sizes[i];
      at += full_sizes[i];
    }
    throw Error("in_proj row outside the layer");
  }
};

}  // namespace

std::shared_ptr<const StagePlan> GdnCpLayer::stage_plan(const MicroBatch& mb) const {
  auto p = std::make_shared<StagePlan>();
  const std::int64_t T = mb.cu.back();
  const bool split = mb.cp_size > 1;
  if (split && cp_.mode == CpMode::Chunkwise) {
    const std::int64_t n = T / mb.cp_size;
    p->proj_rows = p->mixer_rows = iota_range(mb.cp_rank * n, (mb.cp_rank + 1) * n);
  } else if (split && cp_.mode == CpMode::AllGather) {
    p->proj_rows = p->mixer_rows = iota_range(0, T);
    p->own_rows = zigzag_mb_rows(mb);
    p->sum_backward = true;
  } else {
    p->proj_rows = zigzag_mb_rows(mb);
    p->mixer_rows = iota_range(0, T);
  }
  p->replicated_over_tp = cp_.tp > 1;
  const TpColumns tc{config_, local_config_, tp_ ? tp_->rank() : 0};
  const SizeParams& sp = size_params(mb.cp_size);
  for (const std::int64_t row : sp.in_proj_rows_host) p->in_proj.push_back(tc.in_proj(row));
  const RankSlice& rs = sp.slices.at(cp_.mode == CpMode::Headwise ? static_cast<std::size_t>(mb.cp_rank) : 0);
  const std::int64_t qk_local = local_config_.qk_dim(), dv = config_.dv(), dk = config_.dk();
  for (const std::int64_t ch : rs.channels) {
    p->conv.push_back(tc.conv(ch));
    if (ch < qk_local) p->q.push_back(tc.q(ch));
    else if (ch < 2 * qk_local) p->k.push_back(tc.q(ch - qk_local));
  }
  for (const std::int64_t h : rs.heads) {
    p->heads.push_back(tc.head(h));
    for (std::int64_t j = 0; j < dv; ++j) p->v.push_back(tc.head(h) * dv + j);
    for (std::int64_t j = 0; j < dk * dv; ++j) p->state.push_back(tc.head(h) * dk * dv + j);
  }
  p->l2_eps = faults::l2norm_eps(1e-6);  // as the backends' core applies it
  return p;
}

ref::LayerParams download_grads(Backend& backend, const BufferGrads& grads) {
  ref::LayerParams out;
  for (const auto& [name, buf] : grads) out[name] = backend.download(buf).to(DType::F64);
  return out;
}

}  // namespace gdnv::cp
