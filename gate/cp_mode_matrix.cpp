// Gate step "CP mode matrix (cpu)" and the matrix the emu and cuda steps run too: every legal CP mode,
// size, dtype, format and TP size in-process against the oracle, each tensor within its oracle gate.
#include <cstdio>
#include <map>

#include "core/metrics.hpp"
#include "core/text.hpp"
#include "cpu/backend.hpp"
#include "gate/cp_mode_matrix.hpp"
#include "gate/reproduce.hpp"
#include "gate/steps.hpp"
#include "harness/verdict.hpp"

namespace gdnv::gate {
namespace {

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
                 const MatrixDraw& draw) {
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

}  // namespace

void mode_matrix(StepResult& r, const std::vector<DType>& dtypes, const MatrixBackend& backend) {
  mode_matrix(r, dtypes, backend, kFirstDraw);
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

namespace {

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

}  // namespace

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

namespace {

const MatrixBackend kCpu{"cpu", cpu::make_backend};

// Every legal (mode, W, dtype, format, TP) on a small GVA geometry with weak gates (CP=1 also with odd
// lengths), plus dynamic CP (micro-batches of CP 4, 2, 1 in a static group of 4, on one packing and
// each on its own, padded for its own CP size only), chunkwise spans shorter than the conv halo and the
// extreme inputs, in-process, every tensor against the oracle.
StepResult run(const StepOptions& options) {
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

}  // namespace

const Step cp_mode_matrix{"CP mode matrix (cpu)", run};

}  // namespace gdnv::gate
