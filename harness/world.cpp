#include "harness/world.hpp"

#include <algorithm>
#include <functional>

#include "comm/groups.hpp"
#include "core/error.hpp"
#include "cost/counting_backend.hpp"
#include "cp/layer.hpp"
#include "layouts/apply.hpp"
#include "reference/tp_sharding.hpp"

namespace gdnv::harness {

using cp::Buffer;
using cp::Context;
using cp::HostStage;
using cp::LayerBackward;
using cp::StageRecorder;

namespace {

// Writes the ranks' shard rows back at their natural positions.
void put_rows(const Tensor& shard, const std::vector<std::int64_t>& rows, Tensor& full) {
  layouts::scatter_rows(shard.bytes(), rows, shard.nbytes() / std::max<std::size_t>(rows.size(), 1), full.bytes());
}

// The case micro-batch m runs on: its own, or the only one given.
const Case& case_of(std::span<const Case> cases, std::size_t m) { return cases[cases.size() == 1 ? 0 : m]; }

void check_case_count(std::size_t cases, std::size_t micro_batches) {
  if (cases == 0 || (cases != 1 && cases != micro_batches))
    throw ConfigError(std::to_string(cases) + " cases for " + std::to_string(micro_batches) +
                      " micro-batch(es): give one per micro-batch (make_cases), or one for all");
}

// A case count that fits `run`, each case as many tokens as its checked micro-batch: the cases are those
// the micro-batches were checked for.
void check_case_tokens(const CheckedRun& run, std::span<const Case> cases) {
  const std::size_t n = run.micro_batches.size();
  check_case_count(cases.size(), n);
  for (std::size_t m = 0; m < n; ++m)
    if (case_of(cases, m).hidden.dim(0) * case_of(cases, m).hidden.dim(1) != run.micro_batches[m].cu().back())
      throw Error("micro-batch " + std::to_string(m + 1) + "'s case is not the packing it was checked for: check " +
                  "the cases themselves (check_cases)");
}

}  // namespace

cost::RankPlace place_of(const RunSpec& spec, int world_rank, int cp_size) {
  return {(world_rank / spec.cp.tp) % cp_size, world_rank % spec.cp.tp};
}

std::vector<RankOutput> run_rank(const CheckedRun& run, std::span<const Case> cases, std::unique_ptr<Backend> backend,
                                 comm::Communicator& world) {
  const RunSpec& spec = run.spec;
  const int tp = spec.cp.tp;
  const comm::TpCpGrid grid = comm::make_tp_cp_grid(world, tp);
  cost::CountingBackend be(std::move(backend));
  be.count_host_syncs(world.shared_accounting());
  const cp::GdnCpLayer layer(cases[0].config, spec.cp, cases[0].params, be, *grid.cp, tp > 1 ? grid.tp.get() : nullptr);
  std::vector<RankOutput> outputs;
  for (std::size_t m = 0; m < run.micro_batches.size(); ++m) {
    const cp::CheckedMicroBatch& checked = run.micro_batches[m];
    const Case& k = case_of(cases, m);
    auto mb = layer.prepare(checked);
    const auto rows = zigzag_rows(checked, mb->cp_rank);
    RankOutput o;
    o.cp_size = checked.cp_size();
    o.cp_rank = mb->cp_rank;
    const Buffer hidden = be.upload(layouts::gather_rows(k.hidden, rows), spec.dtype);
    Context ctx;
    StageRecorder recorder;
    if (spec.stages) ctx.tap.recorder = &recorder;
    Buffer out;
    {
      comm::ScopedCounter counter(world.accounting());
      const std::int64_t live = be.live_bytes();
      const double flops = be.flops();
      out = layer.forward(mb, hidden, ctx);
      o.forward = counter.delta();
      o.forward_flops = be.flops() - flops;
      o.saved_bytes = be.live_bytes() - live - static_cast<std::int64_t>(out.nbytes());
    }
    const Buffer grad_output = be.upload(layouts::gather_rows(k.grad_output, rows), spec.dtype);
    comm::ScopedCounter counter(world.accounting());
    const double flops = be.flops();
    LayerBackward back = layer.backward(ctx, grad_output);
    o.backward = counter.delta();
    o.backward_flops = be.flops() - flops;
    o.out = be.download(out).to(DType::F64);
    o.grad_hidden = be.download(back.grad_hidden).to(DType::F64);
    o.grads = download_grads(be, back.grads);
    o.tp_rank = world.rank() % tp;
    o.stages = download_stages(be, recorder);
    outputs.push_back(std::move(o));
  }
  return outputs;
}

RankBackends make_rank_backends(int ranks, const BackendFactory& factory, DType dtype) {
  RankBackends out;
  for (int r = 0; r < ranks; ++r) {
    out.backends.push_back(factory(dtype));
    out.options.movers.push_back(out.backends.back()->data_mover());
  }
  return out;
}

namespace {

// Natural rows of CP rank r's zigzag shard (rows_of(r): zigzag_rows), one per token (SBHD: every batch
// column of its S rows).
using RowsOf = std::function<std::vector<std::int64_t>(int)>;
std::vector<std::int64_t> zigzag_tokens(const Case& k, const RowsOf& rows_of, int r) {
  const std::vector<std::int64_t> rows = rows_of(r);
  if (k.cu_seqlens) return rows;
  std::vector<std::int64_t> tokens;
  const std::int64_t B = k.hidden.dim(1);
  for (const std::int64_t s : rows)
    for (std::int64_t b = 0; b < B; ++b) tokens.push_back(s * B + b);
  return tokens;
}

// assemble_stages, each CP rank's zigzag rows from rows_of.
void assemble_stages_of(const Case& k, const RowsOf& rows_of, std::span<const RankOutput* const> ranks,
                        MicroBatchRun& run) {
  const int c = run.cp_size;
  const std::int64_t tokens = k.hidden.dim(0) * k.hidden.dim(1);
  for (const RankOutput* rank : ranks) {
    const RankOutput& o = *rank;
    for (const HostStage& h : o.stages) {
      if (h.replicated_over_tp && o.tp_rank != 0) continue;
      const bool boundary = h.name.ends_with("boundary_state");
      const Shape shape = ref::stage_shape(k.config, h.name, boundary ? c : tokens);
      Tensor& full = run.answer.stages.try_emplace(h.name, DType::F64, shape).first->second;
      const std::int64_t width = full.numel() / shape[0], cols = static_cast<std::int64_t>(h.cols.size());
      StagePiece piece{o.cp_rank, {}, h.cols};
      for (std::size_t i = 0; i < h.rows.size(); ++i) {
        const std::int64_t row = boundary ? h.rows[i] : natural_row(k, h.rows[i]);
        if (!h.sum) piece.rows.push_back(row);
        for (std::int64_t j = 0; j < cols; ++j) {
          const std::int64_t at = row * width + h.cols[static_cast<std::size_t>(j)];
          const double v = h.data.get(static_cast<std::int64_t>(i) * cols + j);
          full.set(at, h.sum ? full.get(at) + v : v);
        }
      }
      if (h.sum) piece = {o.cp_rank, zigzag_tokens(k, rows_of, o.cp_rank), {}};
      run.stage_pieces[h.name].push_back(std::move(piece));
    }
  }
}

}  // namespace

void assemble_stages(const Case& k, std::span<const RankOutput* const> ranks, MicroBatchRun& run) {
  const auto rows_of = [&](int r) { return zigzag_rows(k, run.cp_size, r); };
  assemble_stages_of(k, rows_of, ranks, run);
}

CheckedRun check_cases(const RunSpec& spec, std::span<const Case> cases) {
  const std::size_t micro_batches = micro_batch_sizes(spec).size();
  check_case_count(cases.size(), micro_batches);
  cp::validate_static(spec.cp, cases[0].config);
  CheckedRun run{spec, {}};
  for (std::size_t m = 0; m < micro_batches; ++m)
    run.micro_batches.push_back(check_micro_batch_of(
        spec, cases[0].config, case_of(cases, m).cu_seqlens.value_or(std::vector<std::int64_t>{0}), m));
  return run;
}

std::vector<MicroBatchRun> run_in_process(const RunSpec& spec, std::span<const Case> cases,
                                          const BackendFactory& factory) {
  return run_in_process(check_cases(spec, cases), cases, factory);
}

std::vector<MicroBatchRun> run_in_process(const CheckedRun& checked, std::span<const Case> cases,
                                          const BackendFactory& factory) {
  const RunSpec& spec = checked.spec;
  const int tp = spec.cp.tp, n = tp * spec.cp.cp;
  check_case_tokens(checked, cases);
  std::vector<std::vector<RankOutput>> outputs(static_cast<std::size_t>(n));
  RankBackends ranks = make_rank_backends(n, factory, spec.dtype);
  comm::run_world(
      n,
      [&](comm::Communicator& world) {
        const auto r = static_cast<std::size_t>(world.rank());
        outputs[r] = run_rank(checked, cases, std::move(ranks.backends[r]), world);
      },
      ranks.options);

  std::vector<MicroBatchRun> runs;
  for (std::size_t m = 0; m < outputs[0].size(); ++m) {
    const Case& k = case_of(cases, m);
    const cp::CheckedMicroBatch& mb = checked.micro_batches[m];
    const int c = mb.cp_size();
    MicroBatchRun run{c,
                      {Tensor(DType::F64, k.hidden.shape()), Tensor(DType::F64, k.hidden.shape()), {}, {}, {}},
                      outputs[0][m].forward,
                      outputs[0][m].backward,
                      {},
                      {}};
    std::vector<ref::LayerParams> tp_grads(static_cast<std::size_t>(tp));
    // World rank = cp_rank * tp + tp_rank; the first CP sub-group (static CP ranks [0, c)) holds the
    // answer, and its CP rank 0 each TP rank's gradient shard.
    for (int rank = 0; rank < c * tp; ++rank) {
      const RankOutput& o = outputs[static_cast<std::size_t>(rank)][m];
      if (rank % tp == 0) {
        const auto rows = zigzag_rows(mb, o.cp_rank);
        put_rows(o.out, rows, run.answer.out);
        put_rows(o.grad_hidden, rows, run.answer.grad_hidden);
      }
      if (rank < tp) tp_grads[static_cast<std::size_t>(rank)] = o.grads;
    }
    run.answer.grads = ref::tp_unshard(k.config, tp_grads);
    if (spec.stages) {
      // World rank = cp_rank * tp + tp_rank: the first CP sub-group (static CP ranks [0, c)) holds the answer.
      std::vector<const RankOutput*> group;
      for (int rank = 0; rank < c * tp; ++rank) group.push_back(&outputs[static_cast<std::size_t>(rank)][m]);
      const auto rows_of = [&](int r) { return zigzag_rows(mb, r); };
      assemble_stages_of(k, rows_of, group, run);
    }
    for (auto& rank_outputs : outputs) run.ranks.push_back(std::move(rank_outputs[m]));
    runs.push_back(std::move(run));
  }
  return runs;
}

}  // namespace gdnv::harness
