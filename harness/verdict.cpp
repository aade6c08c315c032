#include "harness/verdict.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>

#include "layouts/partition.hpp"

namespace gdnv::harness {
namespace {

const Tensor* find_tensor(const Answer& a, const std::string& name) {
  if (name == "out") return &a.out;
  if (name == "grad_hidden") return &a.grad_hidden;
  if (name.starts_with("grad::")) {
    const auto it = a.grads.find(name.substr(6));
    return it == a.grads.end() ? nullptr : &it->second;
  }
  const auto it = a.stages.find(name);
  return it == a.stages.end() ? nullptr : &it->second;
}

// The sequence position of natural row `row` of tensor `name`: THD the packed token; SBHD `out` and
// `grad_hidden` rows are s B + b, a stage's b S + s (docs/DESIGN.md §13).
std::int64_t position_of(const Case& c, const std::string& name, std::int64_t row) {
  if (c.cu_seqlens) return row;
  const std::int64_t S = c.hidden.dim(0), B = c.hidden.dim(1);
  return name == "out" || name == "grad_hidden" ? row / B : row % S;
}

std::set<std::int64_t> positions_in(const Case& c, layouts::Layout layout, int W, int r) {
  const std::vector<std::int64_t> p = c.cu_seqlens ? layouts::thd_partition(layout, *c.cu_seqlens, W, r).positions()
                                                   : layouts::sbhd_partition(layout, c.hidden.dim(0), W, r).positions();
  return {p.begin(), p.end()};
}

}  // namespace

Divergence divergence_at(const std::string& name, int rank, int world) {
  Divergence d;
  d.name = name;
  d.backward = ref::is_backward_tensor(name);
  d.rank = rank;
  d.world = world;
  return d;
}

void name_layouts(Divergence& d, const Case& c, const std::vector<std::int64_t>& held,
                  const std::vector<std::int64_t>& named) {
  if (d.rank < 0 || d.world < 2) return;
  std::set<std::int64_t> rows, hot;
  for (const std::int64_t row : held) rows.insert(position_of(c, d.name, row));
  for (const std::int64_t row : named) hot.insert(position_of(c, d.name, row));
  using layouts::Layout;
  for (const auto& [mine, other] :
       {std::pair{Layout::zigzag, Layout::contiguous}, {Layout::contiguous, Layout::zigzag}}) {
    if (positions_in(c, mine, d.world, d.rank) != rows) continue;
    d.layout = mine == Layout::zigzag ? "zigzag" : "contiguous";
    for (int r = 0; r < d.world; ++r) {
      const std::set<std::int64_t> theirs = positions_in(c, other, d.world, r);
      if (std::any_of(hot.begin(), hot.end(), [&](std::int64_t p) { return theirs.contains(p); }))
        d.other_ranks.push_back(r);
    }
    if (d.other_ranks == std::vector<int>{d.rank}) d.other_ranks.clear();
    return;
  }
}

std::vector<StagePiece> pieces_of(const std::string& name, const MicroBatchRun& run, const Case& c) {
  if (const auto it = run.stage_pieces.find(name); it != run.stage_pieces.end()) return it->second;
  std::vector<StagePiece> out;
  if (name != "out" && name != "grad_hidden") return out;
  for (int r = 0; r < run.cp_size; ++r) {
    StagePiece p{r, {}, {}};
    for (const std::int64_t row : zigzag_rows(c, run.cp_size, r)) {
      if (c.cu_seqlens) p.rows.push_back(row);
      else
        for (std::int64_t b = 0; b < c.hidden.dim(1); ++b) p.rows.push_back(row * c.hidden.dim(1) + b);
    }
    out.push_back(std::move(p));
  }
  return out;
}

namespace {

struct RankError {
  double err2 = 0, ref2 = 0;
  std::int64_t n = 0, nonfinite = 0;
  std::vector<std::int64_t> hot_rows, rows;
};

// Each CP rank's share of the error of ref vs cand over the elements its pieces cover.
std::map<int, RankError> rank_errors(const Tensor& ref, const Tensor& cand, const std::vector<StagePiece>& pieces,
                                     double row_level2) {
  std::map<int, RankError> out;
  const std::int64_t width = ref.numel() / ref.dim(0);
  for (const StagePiece& p : pieces) {
    RankError& e = out[p.cp_rank];
    const auto cols = static_cast<std::int64_t>(p.cols.empty() ? width : p.cols.size());
    for (const std::int64_t row : p.rows) {
      double row_err2 = 0;
      bool bad = false;
      for (std::int64_t j = 0; j < cols; ++j) {
        const std::int64_t at = row * width + (p.cols.empty() ? j : p.cols[static_cast<std::size_t>(j)]);
        const double r = ref.get(at), x = cand.get(at);
        if (!std::isfinite(x) || !std::isfinite(r)) {
          bad = bad || !std::isfinite(x);
          e.nonfinite += !std::isfinite(x);
          continue;
        }
        row_err2 += (x - r) * (x - r);
        e.ref2 += r * r;
        ++e.n;
      }
      e.err2 += row_err2;
      e.rows.push_back(row);
      if (bad || row_err2 / static_cast<double>(cols) > row_level2) e.hot_rows.push_back(row);
    }
  }
  return out;
}

TensorVerdict missing_verdict(const std::string& name, double gate) {
  TensorVerdict v{name, {}, gate, false, {}, true};
  v.m.rel_rms = std::numeric_limits<double>::infinity();
  return v;
}

}  // namespace

std::vector<TensorVerdict> judge_answer(const Answer& oracle, const Answer& got,
                                        const std::map<std::string, double>& gates) {
  std::vector<std::string> grads;
  for (const auto& [name, t] : oracle.grads) grads.push_back("grad::" + name);
  std::vector<TensorVerdict> out;
  for (const std::string& name : ref::judged_order(grads)) {
    const Tensor* ref = find_tensor(oracle, name);
    const Tensor* cand = find_tensor(got, name);
    if (!ref) continue;
    if (!cand) {
      if (!name.starts_with("stage")) out.push_back(missing_verdict(name, gates.at(name)));
      continue;
    }
    TensorVerdict v{name, compare(*ref, *cand), gates.at(name), false, tolerances(*ref, *cand)};
    v.pass = v.m.rel_rms < v.gate && v.m.nan_cand == 0 && v.m.inf_cand == 0;
    out.push_back(std::move(v));
  }
  return out;
}

std::optional<Divergence> first_divergence(const std::vector<TensorVerdict>& verdicts, const Answer& oracle,
                                           const MicroBatchRun& run, const Case& c) {
  const auto failing = std::find_if(verdicts.begin(), verdicts.end(), [](const TensorVerdict& v) { return !v.pass; });
  if (failing == verdicts.end()) return std::nullopt;
  const TensorVerdict& v = *failing;
  if (v.missing) {
    Divergence d = divergence_at(v.name, -1, run.cp_size);
    d.row_end = find_tensor(oracle, v.name)->dim(0) - 1;
    d.metric = "missing";
    return d;
  }
  const bool nonfinite = v.m.nan_cand + v.m.inf_cand > 0;
  Divergence d = divergence_at(v.name, -1, run.cp_size);
  d.metric = nonfinite ? "nan/inf" : "rel_rms";
  d.value = nonfinite ? static_cast<double>(v.m.nan_cand + v.m.inf_cand) : v.m.rel_rms;
  d.gate = nonfinite ? 0.0 : v.gate;
  const Tensor& ref = *find_tensor(oracle, v.name);
  const Tensor& cand = *find_tensor(run.answer, v.name);
  d.row_end = ref.dim(0) - 1;
  const double level = v.gate * v.m.ref_rms;
  for (auto& [rank, e] : rank_errors(ref, cand, pieces_of(v.name, run, c), level * level)) {
    const double rel =
        std::sqrt(e.err2 / std::max<double>(1, e.n)) / (std::sqrt(e.ref2 / std::max<double>(1, e.n)) + 1e-12);
    const bool fails = nonfinite ? e.nonfinite > 0 : rel >= v.gate;
    if (!fails || e.rows.empty()) continue;
    const auto& rows = e.hot_rows.empty() ? e.rows : e.hot_rows;
    d.rank = rank;
    d.row_begin = *std::min_element(rows.begin(), rows.end());
    d.row_end = *std::max_element(rows.begin(), rows.end());
    name_layouts(d, c, e.rows, rows);
    if (!nonfinite) d.value = rel;
    else d.value = static_cast<double>(e.nonfinite);
    break;
  }
  return d;
}

std::string divergence_line(const Divergence& d) {
  char numbers[96];
  std::snprintf(numbers, sizeof numbers, "%.3e > gate %.3e", d.value, d.gate);
  const std::string rank = d.rank < 0 ? "every rank of " + std::to_string(d.world)
                                      : "rank " + std::to_string(d.rank) + " of " + std::to_string(d.world);
  std::string also;
  for (const int r : d.other_ranks)
    also += (also.empty() ? " " + d.layout + "; " + (d.layout == "zigzag" ? "contiguous" : "zigzag") + " rank" +
                                (d.other_ranks.size() > 1 ? "s " : " ")
                          : ", ") +
            std::to_string(r);
  return "first divergence: " + d.name + " (" + (d.backward ? "backward" : "forward") + ", " + rank + ", rows " +
         std::to_string(d.row_begin) + ".." + std::to_string(d.row_end) + also +
         "): " + (d.metric == "missing" ? "missing from the run" : d.metric + " " + numbers);
}

nlohmann::json divergence_json(const Divergence& d) {
  return {{"tensor", d.name},
          {"direction", d.backward ? "backward" : "forward"},
          {"rank", d.rank},
          {"world", d.world},
          {"rows", {d.row_begin, d.row_end}},
          {"metric", d.metric},
          {"value", d.value},
          {"gate", d.gate},
          {"layout", d.layout},
          {"other_layout_ranks", d.other_ranks},
          {"line", divergence_line(d)}};
}

std::optional<Divergence> find_first_divergence(const RunSpec& spec, const BackendFactory& factory) {
  RunSpec s = spec;
  s.stages = true;
  const std::vector<Case> cases = make_cases(s);
  const std::vector<MicroBatchRun> runs = run_in_process(s, cases, factory);
  for (std::size_t m = 0; m < runs.size(); ++m) {
    const Case& k = cases[cases.size() == 1 ? 0 : m];
    const Answer oracle = oracle_answer(k, stage_request(s, runs[m].cp_size));
    const auto d =
        first_divergence(judge_answer(oracle, runs[m].answer, oracle_gates(k, oracle, s.dtype)), oracle, runs[m], k);
    if (d) return d;
  }
  return std::nullopt;
}

std::string first_divergence_line(const RunSpec& spec, const BackendFactory& factory) {
  try {
    const auto d = find_first_divergence(spec, factory);
    return d ? divergence_line(*d) : "";
  } catch (const ConfigError&) {
    throw;
  } catch (const Error&) {
    return "";
  }
}

JudgedRun run_and_judge(const CheckedRun& run, const cp::BackendFactory& factory) {
  const RunSpec& spec = run.spec;
  JudgedRun e;
  // One case per micro-batch when each has its own packing (and then its own oracle), else one for all.
  e.cases = make_cases(spec);
  e.runs = run_in_process(run, e.cases, factory);
  for (std::size_t i = 0; i < e.runs.size(); ++i) {
    const Case& k = e.cases[e.cases.size() == 1 ? 0 : i];
    e.oracles.push_back(oracle_answer(k, stage_request(spec, e.runs[i].cp_size)));
    e.verdicts.push_back(judge_answer(e.oracles[i], e.runs[i].answer, oracle_gates(k, e.oracles[i], spec.dtype)));
    for (const auto& v : e.verdicts[i]) e.pass = e.pass && v.pass;
  }
  return e;
}

}  // namespace gdnv::harness
