// Gate steps that judge the CP implementation: layouts against upstream and as a route, the CP mode
// matrix against the oracle, the illegal-combination matrix, a probe self-compare, and the GPU matrix
// where a device is present.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <numeric>
#include <sstream>

#include "cli/gate_steps.hpp"
#include "cli/reproduce.hpp"
#include "comm/inprocess.hpp"
#include "core/file.hpp"
#include "core/metrics.hpp"
#include "core/rng.hpp"
#include "core/text.hpp"
#include "core/vectors.hpp"
#include "cp/illegal.hpp"
#include "cpu/backend.hpp"
#include "fixtures/cp_runs.hpp"
#include "fixtures/fixture_file.hpp"
#include "fixtures/fixtures.hpp"
#include "fixtures/manifest.hpp"
#include "gpu/cuda_plugin.hpp"
#include "gpu/kernel_backend.hpp"
#include "harness/verdict.hpp"
#include "harness/world.hpp"
#include "layouts/chunkwise_context.hpp"
#include "layouts/partition.hpp"
#include "layouts/route.hpp"
#include "probes/checks.hpp"
#include "probes/image.hpp"

namespace gdnv::cli {
namespace {

using Ints = std::vector<std::int64_t>;

// Megatron-Core's THD rank indices, zigzag and contiguous, exactly.
void megatron_indices(StepResult& r) {
  for (const auto& c : vector_cases("layouts_megatron.json")) {
    const auto cu = c.at("cu_seqlens").get<Ints>();
    const int W = c.at("cp_size").get<int>(), rank = c.at("cp_rank").get<int>();
    for (auto [layout, key] :
         {std::pair{layouts::Layout::zigzag, "zigzag"}, {layouts::Layout::contiguous, "contiguous"}})
      r.check(layouts::thd_partition(layout, cu, W, rank).positions() == c.at(key).get<Ints>(),
              std::string(key) + " " + c.at("cu_seqlens").dump() + " W=" + std::to_string(W) + " rank " +
                  std::to_string(rank),
              "positions differ from Megatron's");
  }
}

// FLA's chunkwise contexts (get_cp_cu_seqlens), exactly.
void fla_contexts(StepResult& r) {
  for (const auto& c : vector_cases("fla_cp_context.json")) {
    const auto ctx = layouts::chunkwise_context(c.at("cu_seqlens").get<Ints>(), c.at("cp_size").get<int>(),
                                                c.at("cp_rank").get<int>(), 4);
    r.check(ctx.local_cu_seqlens == c.at("local_cu_seqlens").get<Ints>() &&
                ctx.pre_num_ranks == c.at("pre_num_ranks").get<int>() &&
                ctx.post_num_ranks == c.at("post_num_ranks").get<int>() &&
                ctx.pre_num_conv_tokens == c.at("pre_num_conv_tokens").get<std::int64_t>(),
            "context " + c.at("cu_seqlens").dump() + " W=" + c.at("cp_size").dump() + " rank " + c.at("cp_rank").dump(),
            "chunkwise context differs from FLA's");
  }
}

// The route, simulated: rank r receives from each peer p, in p's zigzag order, p's rows that fall in
// r's contiguous span; the counts must be the route's and the receive index must put every row at its
// place in the span.
void route_delivers_contiguous_spans(StepResult& r, const std::string& tag, const Ints& cu, int W) {
  const std::int64_t n = cu.back() / W;
  std::vector<Ints> zigzag;
  for (int p = 0; p < W; ++p) zigzag.push_back(layouts::thd_partition(layouts::Layout::zigzag, cu, W, p).positions());
  for (int rank = 0; rank < W; ++rank) {
    const layouts::Route route = layouts::zigzag_contiguous_route(cu, W, rank);
    Ints received, counts;
    for (int p = 0; p < W; ++p) {
      const auto before = received.size();
      for (auto g : zigzag[p])
        if (g >= rank * n && g < (rank + 1) * n) received.push_back(g);
      counts.push_back(static_cast<std::int64_t>(received.size() - before));
    }
    Ints placed(static_cast<std::size_t>(n), -1);
    bool ok = counts == route.recv_counts && route.index.size() == received.size();
    for (std::size_t k = 0; ok && k < received.size(); ++k) placed[route.index[k]] = received[k];
    Ints span(static_cast<std::size_t>(n));
    std::iota(span.begin(), span.end(), rank * n);
    r.check(ok && placed == span, tag + " rank " + std::to_string(rank),
            "the route does not deliver the rank's contiguous span of " + comma_list(cu));
  }
}

// One matrix cell: the cases (one per micro-batch when each has its own packing, else one for all),
// the oracle's answer on each and its gates (per dtype / format / W, shared by every mode and TP size).
struct Judged {
  std::vector<harness::Case> cases;
  std::vector<harness::Answer> oracles;
  std::vector<std::map<std::string, double>> gates;
};

Judged judged(const harness::RunSpec& spec) {
  Judged j{harness::make_cases(spec), {}, {}};
  for (const harness::Case& k : j.cases) {
    j.oracles.push_back(harness::oracle_answer(k));
    j.gates.push_back(harness::oracle_gates(k, j.oracles.back(), spec.dtype));
  }
  return j;
}

}  // namespace

std::string first_tensor_outside_gate(const harness::Answer& oracle, const harness::Answer& got,
                                      const std::map<std::string, double>& gates) {
  std::string why;
  // rel_rms covers the finite elements only: a NaN or Inf fails the tensor on its own.
  auto check = [&](const std::string& name, const Tensor& ref, const Tensor* cand) {
    if (!why.empty()) return;
    if (!cand) {
      why = name + ": missing from the run";
      return;
    }
    const Metrics m = compare(ref, *cand);
    if (m.rel_rms < gates.at(name) && m.nan_cand == 0 && m.inf_cand == 0) return;
    char buf[128];
    if (m.nan_cand || m.inf_cand)
      std::snprintf(buf, sizeof buf, ": %lld NaN, %lld Inf", static_cast<long long>(m.nan_cand),
                    static_cast<long long>(m.inf_cand));
    else std::snprintf(buf, sizeof buf, ": rel_rms %.3e >= gate %.3e", m.rel_rms, gates.at(name));
    why = name + buf;
  };
  check("out", oracle.out, &got.out);
  check("grad_hidden", oracle.grad_hidden, &got.grad_hidden);
  for (const auto& [name, t] : oracle.grads) {
    const auto it = got.grads.find(name);
    check("grad::" + name, t, it == got.grads.end() ? nullptr : &it->second);
  }
  return why;
}

namespace {

// One case: every micro-batch's tensors within their oracle gates; the first failing tensor is the why,
// and `gdn-verify run` with the same spec on `backend` reproduces it.
void judge_runs(StepResult& r, const std::string& tag, const Judged& j, const harness::RunSpec& spec,
                const std::string& backend, const cp::BackendFactory& factory) {
  std::string why;
  try {
    const auto runs = harness::run_in_process(spec, j.cases, factory);
    for (std::size_t mb = 0; mb < runs.size() && why.empty(); ++mb) {
      const harness::MicroBatchRun& run = runs[mb];
      const std::size_t k = j.cases.size() == 1 ? 0 : mb;
      const std::string at = spec.micro_batches.empty() ? "" : "cp=" + std::to_string(run.cp_size) + " ";
      if (const std::string first = first_tensor_outside_gate(j.oracles[k], run.answer, j.gates[k]); !first.empty())
        why = at + first;
    }
  } catch (const Error& e) {
    why = e.what();
  }
  const bool first_failure = !why.empty() && r.detail.empty();
  r.check(why.empty(), tag, why, run_command(spec, backend));
  if (first_failure) r.divergence = harness::first_divergence_line(spec, factory);
}

constexpr cp::CpMode kModes[] = {cp::CpMode::Headwise, cp::CpMode::Chunkwise, cp::CpMode::AllGather};

// The backend a matrix runs on: its --backend name (for the reproduce command) and its factory.
struct MatrixBackend {
  std::string name;
  cp::BackendFactory factory;
};

// Judges `spec` as the case `tag` when it is selected; `cache` holds the oracle's answers by batch (the
// case depends on the batch, not on mode or TP).
void judge_selected(StepResult& r, const std::string& tag, const harness::RunSpec& spec, const MatrixBackend& backend,
                    std::map<std::int64_t, Judged>& cache) {
  if (!r.selected(tag)) return;
  auto it = cache.find(spec.batch);
  if (it == cache.end()) it = cache.emplace(spec.batch, judged(spec)).first;
  judge_runs(r, tag, it->second, spec, backend.name, backend.factory);
}

// A second draw of the matrix for the full gate: another geometry (GVA 2, dk != dv, a conv of width 3),
// Megatron's default decays instead of weak ones, another seed, three sequences of unequal length.
struct MatrixDraw {
  std::string tag;  // "" for gate_matrix_spec's own
  void apply(harness::RunSpec& s, int W) const {
    if (tag.empty()) return;
    s.layer = {32, 2, 4, 8, 4, 3, 1e-6, false};
    s.gates = harness::GateRegime::Default;
    s.seed = 1;
    s.lengths = {6 * W, 4 * W, 2 * W};
    s.seq_len = 6 * W;
  }
};
const MatrixDraw kFirstDraw{""}, kSecondDraw{" draw 2"};

// Every legal (mode, W in {1, 2, 4}, dtype, format, TP) of gate_matrix_spec on `backend`, and CP=1 again with
// odd lengths (9, 5, 3; S = 7), which nothing splits.
void mode_matrix(StepResult& r, const std::vector<DType>& dtypes, const MatrixBackend& backend,
                 const MatrixDraw& draw = kFirstDraw) {
  for (const auto& [W, odd] : {std::pair{1, false}, {1, true}, {2, false}, {4, false}})
    for (DType dtype : dtypes)
      for (cp::Format format : {cp::Format::Thd, cp::Format::Sbhd}) {
        std::map<std::int64_t, Judged> by_batch;
        for (cp::CpMode mode : kModes)
          for (int tp : {1, 2}) {
            harness::RunSpec spec = harness::gate_matrix_spec(mode, W, tp, dtype, format);
            draw.apply(spec, W);
            if (odd) spec.lengths = {9, 5, 3}, spec.seq_len = 7;
            if (!harness::is_legal(spec)) continue;
            judge_selected(r,
                           std::string(cp::mode_name(mode)) + draw.tag + " W=" + std::to_string(W) +
                               (odd ? " odd lengths" : "") + " tp=" + std::to_string(tp) + " " +
                               std::string(dtype_name(dtype)) + " " + std::string(cp::format_name(format)),
                           spec, backend, by_batch);
          }
      }
}

// Each mode on the extreme inputs of harness/harness.hpp (GateRegime::Extreme) in bf16 and fp32: at CP=2 with
// lengths divisible by 2*cp (zigzag), and at CP=1, where any length is legal, with two sequences of one
// token (one a zero hidden row, one a spike); every tensor within its oracle gate (a NaN or Inf fails it).
void extreme_inputs(StepResult& r, const MatrixBackend& backend) {
  for (DType dtype : {DType::BF16, DType::F32})
    for (int W : {2, 1}) {
      harness::RunSpec spec = harness::gate_matrix_spec(cp::CpMode::Headwise, W, 1, dtype, cp::Format::Thd);
      spec.gates = harness::GateRegime::Extreme;
      // tests/extreme_regime_test.cpp's lengths: at W = 2, 8, 4 (rank 1's first local sequence 2 tokens,
      // shorter than the conv halo); at W = 1, 1, 1, 80, 6 (two lone tokens, a spike mid-chunk).
      spec.lengths = W == 1 ? std::vector<std::int64_t>{1, 1, 80, 6} : std::vector<std::int64_t>{8, 4};
      std::map<std::int64_t, Judged> cache;
      for (cp::CpMode mode : kModes) {
        spec.cp.mode = mode;
        judge_selected(r,
                       std::string(cp::mode_name(mode)) + " extreme inputs W=" + std::to_string(W) + " " +
                           std::string(dtype_name(dtype)),
                       spec, backend, cache);
      }
    }
}

// Spans of several 64-token chunks at W = 3 and 4, where one sequence straddles every rank: packed
// first (it starts on rank 0 and its state runs forward through every later rank's fold) and packed
// last (it starts inside rank 0's span and ends on the last rank), THD and, for chunkwise, SBHD. Every
// rank's first local sequence is longer than a chunk, so a chunk-level slip in the span maps, the folds
// or the chunk backward shows (docs/DESIGN.md §3); lengths are multiples of 2W.
using Packings = std::vector<std::pair<int, std::vector<std::int64_t>>>;  // (W, THD lengths)

// Every legal mode on each THD packing and dtype, labelled "<mode> <what> W=<W> lengths <l> <dtype>".
void judge_packings(StepResult& r, const Packings& packings, const std::string& what, const std::vector<DType>& dtypes,
                    const MatrixBackend& backend) {
  for (const auto& [W, lengths] : packings)
    for (DType dtype : dtypes) {
      std::map<std::int64_t, Judged> cache;
      for (cp::CpMode mode : kModes) {
        harness::RunSpec spec = harness::gate_matrix_spec(mode, W, 1, dtype, cp::Format::Thd);
        spec.lengths = lengths;
        if (harness::is_legal(spec))
          judge_selected(r,
                         std::string(cp::mode_name(mode)) + " " + what + " W=" + std::to_string(W) + " lengths " +
                             comma_list(lengths) + " " + std::string(dtype_name(dtype)),
                         spec, backend, cache);
      }
    }
}

void multi_chunk_spans(StepResult& r, const std::vector<DType>& dtypes, const MatrixBackend& backend) {
  judge_packings(r, {{3, {480, 48, 12}}, {3, {12, 48, 480}}, {4, {560, 48, 32}}, {4, {32, 48, 560}}},
                 "multi-chunk spans", dtypes, backend);
  for (DType dtype : dtypes)
    for (int W : {3, 4}) {
      harness::RunSpec spec = harness::gate_matrix_spec(cp::CpMode::Chunkwise, W, 1, dtype, cp::Format::Sbhd);
      spec.seq_len = 160 * W;
      std::map<std::int64_t, Judged> cache;
      judge_selected(r,
                     "chunkwise multi-chunk spans W=" + std::to_string(W) + " S=" + std::to_string(spec.seq_len) + " " +
                         std::string(dtype_name(dtype)) + " sbhd",
                     spec, backend, cache);
    }
}

// Sequences that start 2 tokens before a span boundary (at CP > 1 every length is a multiple of 2W, so
// no sequence starts 1 token before one): rank 1's first local sequence is 2 tokens long, shorter than
// the conv halo's 3, and sequences follow it on the same rank, so a halo or its gradient that runs past
// the first local sequence shows. W = 2, lengths 8, 4, 4, 4 (spans of 10: the second sequence starts at
// 8); W = 4, five sequences of 8 (spans of 10: starts 2, 4 and 6 tokens before the boundaries).
void span_boundaries(StepResult& r, const std::vector<DType>& dtypes, const MatrixBackend& backend) {
  judge_packings(r, {{2, {8, 4, 4, 4}}, {4, {8, 8, 8, 8, 8}}}, "sequence 2 tokens before a span boundary", dtypes,
                 backend);
}

const MatrixBackend kCpu{"cpu", cpu::make_backend};

}  // namespace

std::vector<std::int64_t> seeded_cu(int W, std::uint64_t seed, const char* stream, int max_sequences, int max_units) {
  const Rng rng(seed, stream);
  std::vector<std::int64_t> cu{0};
  const int n = 1 + static_cast<int>(rng.uniform(0) * max_sequences);
  for (int i = 0; i < n; ++i)
    cu.push_back(cu.back() + 2 * W * (1 + static_cast<std::int64_t>(rng.uniform(i + 1) * max_units)));
  return cu;
}

StepResult layout_properties(const StepOptions& options) {
  StepResult r(options);
  megatron_indices(r);
  fla_contexts(r);
  for (int W = 1; W <= 8; ++W)
    for (std::uint64_t seed = 0; seed < (options.quick_matrix() ? 2u : 8u); ++seed)
      route_delivers_contiguous_spans(r, "route W=" + std::to_string(W) + " seed " + std::to_string(seed),
                                      seeded_cu(W, seed, "gate/cu", 4, 5), W);
  return r;
}

// Every legal (mode, W, dtype, format, TP) on a small GVA geometry with weak gates (CP=1 also with odd
// lengths), plus dynamic CP (micro-batches of CP 4, 2, 1 in a static group of 4, on one packing and
// each on its own, padded for its own CP size only), chunkwise spans shorter than the conv halo and the
// extreme inputs, in-process, every tensor against the oracle.
StepResult cp_mode_matrix(const StepOptions& options) {
  StepResult r(options);
  const bool quick = options.quick_matrix();
  const std::vector<DType> dtypes =
      quick ? std::vector<DType>{DType::F64, DType::BF16} : std::vector<DType>{DType::F64, DType::F32, DType::BF16};
  mode_matrix(r, dtypes, kCpu);
  if (!quick) mode_matrix(r, dtypes, kCpu, kSecondDraw);
  extreme_inputs(r, kCpu);
  multi_chunk_spans(r, quick ? std::vector<DType>{DType::F64} : dtypes, kCpu);
  span_boundaries(r, quick ? std::vector<DType>{DType::F64} : dtypes, kCpu);
  for (cp::CpMode mode : kModes) {
    harness::RunSpec dynamic = harness::gate_matrix_spec(mode, 4, 1, DType::F64, cp::Format::Thd);
    dynamic.micro_batches = {4, 2, 1};
    dynamic.cp.dynamic_cp = dynamic.micro_batches;  // as `run --dynamic-cp 4,2,1` sets it
    harness::RunSpec own = dynamic;
    // 4, 12 and 5 are not multiples of 2*4 = 8; the two micro-batches at CP 2 hold as many tokens in
    // different packings, so a plan kept from one serves the other wrongly.
    own.micro_batches = {4, 2, 2, 1};
    own.cp.dynamic_cp = own.micro_batches;
    own.micro_batch_lengths = {{8, 40, 16}, {4, 12}, {8, 8}, {5}};
    harness::RunSpec short_spans = harness::gate_matrix_spec(mode, 4, 1, DType::F64, cp::Format::Thd);
    short_spans.lengths = {8};  // spans of 2 tokens: the conv halo (3) reaches two ranks back
    for (const auto& [tag, spec] : {std::pair{"dynamic CP 4,2,1", dynamic},
                                    {"dynamic CP 4,2,2,1 own packings", own},
                                    {"spans of 2 tokens", short_spans}}) {
      const std::string label = std::string(cp::mode_name(mode)) + " " + tag;
      if (r.selected(label)) judge_runs(r, label, judged(spec), spec, kCpu.name, kCpu.factory);
    }
  }
  return r;
}

namespace {

// Each rule of the table tried at CP = 1, at CP > 1 and under dynamic CP (a static group of 4 declaring
// 1, 2, 4, the micro-batch on a sub-group of 2): rejected by its own rule where docs/DESIGN.md §3.1 says
// it holds at that size (most hold at any CP), accepted where it holds at CP > 1 only (SBHD with
// all_gather or a chunkwise batch, the length rules, chunkwise's determinism without dynamic CP). Written
// from §3.1, not from the table, so a rule checked at the wrong CP sizes fails here.
struct RuleAt {
  cp::Rule rule;
  std::string at;  // "cp=1", "cp>1", "dynamic"
  bool rejected;
  std::function<void(cp::IllegalRule&)> shape;
};

std::vector<RuleAt> rules_at_every_cp() {
  using cp::Rule;
  const auto cp1 = [](int tp) {
    return [tp](cp::IllegalRule& r) { r.config.cp = 1, r.config.tp = tp, r.config.dynamic_cp.clear(); };
  };
  const auto dyn = [](int tp) {
    return [tp](cp::IllegalRule& r) { r.config.cp = 4, r.config.tp = tp, r.config.dynamic_cp = {1, 2, 4}; };
  };
  // A micro-batch on a dynamic sub-group of 2 in a static group of 4.
  const auto on_sub_group = [](cp::IllegalRule& r) {
    r.config.cp = 4, r.config.dynamic_cp = {1, 2, 4};
    r.micro_batch.has_cp_group = true, r.micro_batch.local_cp_size = r.micro_batch.group_size = 2;
  };
  const auto lengths = [](std::vector<std::int64_t> l, bool group) {
    return [l, group](cp::IllegalRule& r) {
      r.micro_batch.lengths = l;
      if (!group) r.config.cp = 1, r.config.dynamic_cp.clear();
      else
        r.config.cp = 4, r.config.dynamic_cp = {1, 2, 4}, r.micro_batch.has_cp_group = true,
        r.micro_batch.local_cp_size = r.micro_batch.group_size = 2;
    };
  };
  const auto as_is = [](cp::IllegalRule&) {};
  return {
      {Rule::HeadwiseHeadsNotDivisibleByTpCp, "cp=1", true, cp1(8)},
      {Rule::HeadwiseHeadsNotDivisibleByTpCp, "dynamic", true,
       [](cp::IllegalRule& r) {
         r.config.dynamic_cp = {2, 8};
       }},
      {Rule::HeadsNotDivisibleByTp, "cp=1", true, cp1(8)},
      {Rule::HeadsNotDivisibleByTp, "dynamic", true,
       [](cp::IllegalRule& r) {
         r.config.dynamic_cp = {1, 2};
       }},
      {Rule::ChunkwiseWithAllgatherCp, "cp=1", true, cp1(1)},
      {Rule::ChunkwiseWithAllgatherCp, "dynamic", true, dyn(1)},
      {Rule::ChunkwiseDeterministicWithCp, "cp=1", false, cp1(1)},
      {Rule::ChunkwiseDeterministicWithCp, "dynamic", true, dyn(1)},
      {Rule::InferenceNotHeadwise, "cp=1", true, cp1(1)},
      {Rule::InferenceNotHeadwise, "dynamic", true, dyn(1)},
      {Rule::AllGatherDeterministic, "cp=1", true, cp1(1)},
      {Rule::AllGatherDeterministic, "dynamic", true, dyn(1)},
      {Rule::AllGatherSbhdWithCp, "cp=1", false, cp1(1)},
      {Rule::AllGatherSbhdWithCp, "dynamic", true, on_sub_group},
      {Rule::ChunkwiseSbhdBatch, "cp=1", false, cp1(1)},
      {Rule::ChunkwiseSbhdBatch, "dynamic", true, on_sub_group},
      {Rule::ThdBatchNotOne, "cp=1", true, cp1(1)},
      {Rule::ThdBatchNotOne, "dynamic", true, on_sub_group},
      {Rule::LengthsNotDivisibleByCp, "cp=1", false, lengths({16, 5}, false)},
      {Rule::LengthsNotDivisibleByCp, "dynamic", true, lengths({16, 5}, true)},
      {Rule::LengthsNotDivisibleByTwoCp, "cp=1", false, lengths({16, 6}, false)},
      {Rule::LengthsNotDivisibleByTwoCp, "dynamic", true, lengths({16, 6}, true)},
      {Rule::OnlyOneOfGroupAndLocalSize, "cp=1", true,
       [](cp::IllegalRule& r) { r.config.cp = 1, r.micro_batch.local_cp_size = 1; }},
      {Rule::DynamicCpSizeNotDividing, "cp=1", true,
       [](cp::IllegalRule& r) { r.config.cp = 1, r.config.dynamic_cp = {2}; }},
      {Rule::TpBelowOne, "cp>1", true, [](cp::IllegalRule& r) { r.config.cp = 2; }},
      {Rule::UnknownMode, "cp=1", true, cp1(1)},
      {Rule::UnknownMode, "dynamic", true, dyn(1)},
      {Rule::LocalCpSizeNotGroupSize, "dynamic", true, as_is},
  };
}

// The table's first row of `rule`.
const cp::IllegalRule& example_of(cp::Rule rule) {
  for (const auto& r : cp::illegal_rules())
    if (r.id == rule) return r;
  throw Error("no row of the illegal-combination table has rule " + std::to_string(static_cast<int>(rule)));
}

void rules_at_cp_sizes(StepResult& r) {
  for (const RuleAt& v : rules_at_every_cp()) {
    cp::IllegalRule rule = example_of(v.rule);
    v.shape(rule);
    const std::string label = rule.name + " at " + v.at;
    if (!r.selected(label)) continue;
    const cp::Rejection got = cp::check_example(rule);
    const bool ok =
        v.rejected ? got.rule == v.rule || (rule.stage == cp::Stage::Mode && !got.rule && got.message != "(accepted)")
                   : !got.rule.has_value() && got.message == "(accepted)";
    r.check(
        ok, label,
        std::string(v.rejected ? "expected its rule's rejection" : "expected acceptance") + ", got: " + got.message);
  }
}

}  // namespace

// docs/DESIGN.md §3.1: each illegal combination fails with a message naming the fix, raised by its own
// rule (the layer config's own check for Hv % Hk).
StepResult illegal_combinations(const StepOptions& options) {
  StepResult r(options);
  for (const cp::IllegalRule& rule : cp::illegal_rules()) {
    const cp::Rejection got = cp::check_example(rule);
    const bool by_rule = rule.stage == cp::Stage::LayerConfig ? !got.rule.has_value() : got.rule == rule.id;
    r.check(by_rule && got.message.find(rule.fragment) != std::string::npos, rule.name,
            "expected '" + rule.fragment + "', got: " + got.message);
  }
  rules_at_cp_sizes(r);
  return r;
}

namespace {

// Micro-batches of every CP run the layer fixtures of `dir` allow (fixtures/cp_runs.hpp): what
// `fixtures verify` must judge, counted here from the files.
int fixture_micro_batches(const std::string& dir) {
  const fixtures::Manifest m =
      fixtures::parse_manifest(read_file_text(dir + "/" + fixtures::kManifestName), fixtures::kManifestName);
  int n = 0;
  for (const auto& e : m.cases) {
    if (e.kind != "layer") continue;
    const fixtures::LayerFixture f =
        fixtures::layer_fixture(fixtures::inputs_of(read_safetensors(dir + "/" + e.file)), e.file);
    for (const auto& run : fixtures::allowed_runs(f)) n += std::max<int>(1, static_cast<int>(run.micro_batches.size()));
  }
  return n;
}

}  // namespace

// The committed regression fixtures (fixtures/data): the manifest holds, the oracle still gives the
// stored answers, and every CP run each case allows reproduces them. Counted in one unit: the
// directory, each case and each CP run is one case of the step.
StepResult fixture_verification(const StepOptions& options) {
  std::ostringstream log;
  const std::string dir = fixtures::committed_fixtures_dir();
  const fixtures::Verification v = fixtures::verify_fixtures(dir, false, log);
  StepResult r(options);
  r.cases = 1 + v.cases + v.cp_runs;
  r.failed = v.directory_problem + v.failed_cases + v.failed_cp_runs;
  r.detail = !v.problems.empty() ? v.problems.front() : !v.failures.empty() ? v.failures.front() : "";
  r.label = r.detail.substr(0, r.detail.find(':'));
  if (r.failed)
    r.reproduce =
        fault_prefix() + "gdn-verify fixtures verify --dir " + dir + (v.directory_problem ? "" : " --case " + r.label);
  if (!v.directory_problem) {
    const int want = fixture_micro_batches(dir);
    r.check(
        v.micro_batches == want, "every micro-batch judged",
        std::to_string(v.micro_batches) + " micro-batches judged, the fixtures' CP runs hold " + std::to_string(want));
  }
  return r;
}

// Two dumps of the same image are bitwise identical, every CP mode agrees with CP=1, and every dumped
// tensor is within its oracle gate.
StepResult probe_self_compare(const StepOptions& options) {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("gdnv_gate_probe_" + std::to_string(::getpid()));
  fs::remove_all(root);
  StepResult r(options);
  const std::vector<std::string> modes = options.quick_matrix()
                                             ? std::vector<std::string>{"cp1", "chunkwise"}
                                             : std::vector<std::string>{"cp1", "headwise", "chunkwise", "all_gather"};
  try {
    for (const char* image : {"a", "b"})
      for (const auto& mode : modes) {
        probes::DumpSpec spec;
        spec.mode = mode;
        spec.image = "gate";
        spec.case_name = "thd-short";
        run_world(mode == "cp1" ? 1 : 4, [&](Communicator& world) {
          probes::dump_rank(spec, (root / image).string(), "inproc", world, cpu::make_backend(spec.dtype));
        });
      }
    const auto same =
        probes::compare_images((root / "a").string(), (root / "b").string(), "", probes::load_policy("bitwise"));
    for (const auto& t : same.tensors)
      r.check(t.structure.empty() && t.pass, "redump " + t.file + ":" + t.name, "differs");
    const auto cross = probes::cross_mode((root / "a").string(), probes::load_policy("cp-vs-cp1"));
    for (const auto& t : cross.vs_cp1.tensors) r.check(t.pass, "cross-mode " + t.file + ":" + t.name, t.why);
    for (const auto& t : probes::judge_with_oracle((root / "a").string()).tensors)
      r.check(t.pass, "oracle " + t.file + ":" + t.name, t.why);
  } catch (const Error& e) {
    r.check(false, "dump", e.what());
  }
  fs::remove_all(root);
  return r;
}

// The mode matrix on the CUDA backend (fp32, bf16: the storage it supports); skipped, never passed,
// without the CUDA plugin or a usable device.
// Where the CUDA step cannot run: the same matrix, extreme inputs and multi-chunk spans on the emu
// backend (gpu/'s kernel math on host streams), so a bug in a gpu/ kernel fails the gate on a machine
// without a device. Skipped where the CUDA step runs them on the device.
StepResult emu_mode_matrix(const StepOptions& options) {
  StepResult r(options);
  if (gpu::cuda_plugin_unavailable_reason().empty()) {
    r.skip_reason = "the CUDA step runs gpu/'s kernels on the device";
    return r;
  }
  const MatrixBackend emu{"emu", gpu::make_emulated_backend};
  const std::vector<DType> dtypes =
      options.quick_matrix() ? std::vector<DType>{DType::BF16} : std::vector<DType>{DType::F32, DType::BF16};
  mode_matrix(r, dtypes, emu);
  extreme_inputs(r, emu);
  span_boundaries(r, dtypes, emu);
  if (!options.quick_matrix()) multi_chunk_spans(r, dtypes, emu);
  return r;
}

StepResult gpu_mode_matrix(const StepOptions& options) {
  StepResult r(options);
  if (const std::string reason = gpu::cuda_plugin_unavailable_reason(); !reason.empty()) {
    r.skip_reason = reason;
    return r;
  }
  const MatrixBackend cuda{"cuda", gpu::cuda_plugin().api->make_backend};
  mode_matrix(r, options.quick_matrix() ? std::vector<DType>{DType::BF16} : std::vector<DType>{DType::F32, DType::BF16},
              cuda);
  extreme_inputs(r, cuda);
  span_boundaries(r, {DType::BF16}, cuda);
  return r;
}

}  // namespace gdnv::cli
