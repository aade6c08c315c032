#pragma once
// The shared harness of the CP property suites: generated geometry, the RunSpec it stands for, and
// the judgement of a run against the fp64 oracle (per-tensor relative RMS within harness::oracle_gates).
#include <rapidcheck.h>

#include <cstdio>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "core/metrics.hpp"
#include "cpu/backend.hpp"
#include "harness/world.hpp"

namespace gdnv::cp::testing {
using namespace harness;

struct Geometry {
  int W, tp;
  std::int64_t Hk, group, dk, dv, hidden, conv;
  Format format;
  std::vector<std::int64_t> lengths;  // THD
  std::int64_t seq_len, batch;        // SBHD
  GateRegime gates = GateRegime::Default;
};

inline const char* regime_name(GateRegime r) {
  return r == GateRegime::Weak ? "weak" : r == GateRegime::Strong ? "strong" : "default";
}

inline std::ostream& operator<<(std::ostream& os, const Geometry& g) {
  os << "W=" << g.W << " tp=" << g.tp << " Hk=" << g.Hk << " Hv=" << g.Hk * g.group << " dk=" << g.dk << " dv=" << g.dv
     << " hidden=" << g.hidden << " conv=" << g.conv << " gates=" << regime_name(g.gates) << " ";
  if (g.format == Format::Sbhd) return os << "sbhd S=" << g.seq_len << " B=" << g.batch;
  os << "thd lengths=";
  for (auto L : g.lengths) os << L << ",";
  return os;
}

// Sequence lengths, multiples of 2W: up to `max_seqs` of 2W * [1, max_mult]. With max_mult = 1 and one
// sequence every contiguous span is 2 tokens, shorter than the conv halo: it reaches several ranks.
// At W = 1 nothing is split, so any length in [2, 2 max_mult + 1], odd ones too (not 1: a lone token
// has no state to decay, g's gradient would be zero and the judge rightly refuses a zero reference).
inline std::vector<std::int64_t> gen_lengths(int W, int max_seqs) {
  const auto max_mult = *rc::gen::element<std::int64_t>(1, 4, 4);
  const int n = *rc::gen::inRange(1, max_seqs + 1);
  std::vector<std::int64_t> lengths;
  for (int i = 0; i < n; ++i)
    lengths.push_back(W == 1 ? *rc::gen::inRange<std::int64_t>(2, 2 * max_mult + 2)
                             : 2 * W * *rc::gen::inRange<std::int64_t>(1, max_mult + 1));
  return lengths;
}

// W in {1,2,3,4,8}, TP 1 or 2, GVA 1/2/4, dims not powers of two, conv widths 2..5, every gate
// regime, several sequences (which straddle ranks in the contiguous layout).
inline rc::Gen<Geometry> gen_geometry(bool sbhd_allowed) {
  return rc::gen::exec([sbhd_allowed] {
    Geometry g;
    g.W = *rc::gen::element(1, 2, 3, 4, 8);
    g.tp = *rc::gen::element(1, 1, 2);
    g.group = *rc::gen::element<std::int64_t>(1, 2, 4);
    g.Hk = g.W * g.tp * *rc::gen::element<std::int64_t>(1, 1, 2);  // headwise needs Hk % (tp*W) == 0
    g.dk = *rc::gen::element<std::int64_t>(4, 6, 12);
    g.dv = *rc::gen::element<std::int64_t>(4, 10, 20);
    g.hidden = *rc::gen::element<std::int64_t>(12, 24, 40);
    g.conv = *rc::gen::element<std::int64_t>(2, 4, 4, 5);
    g.gates = *rc::gen::element(GateRegime::Default, GateRegime::Weak, GateRegime::Strong);
    g.format = sbhd_allowed && *rc::gen::arbitrary<bool>() ? Format::Sbhd : Format::Thd;
    g.lengths = gen_lengths(g.W, 3);
    g.seq_len = gen_lengths(g.W, 1).front();
    g.batch = *rc::gen::inRange<std::int64_t>(1, 3);
    return g;
  });
}

inline RunSpec spec_of(const Geometry& g, CpMode mode, DType dtype, std::uint64_t seed) {
  RunSpec s;
  s.layer = {g.hidden, g.Hk, g.Hk * g.group, g.dk, g.dv, g.conv, 1e-6, false};
  s.cp.mode = mode;
  s.cp.cp = g.W;
  s.cp.tp = g.tp;
  s.dtype = dtype;
  s.format = g.format;
  s.lengths = g.lengths;
  s.seq_len = g.seq_len;
  s.batch = g.batch;
  s.gates = g.gates;
  s.seed = seed;
  return s;
}

// docs/DESIGN.md §3.1 for the generated geometry (heads are generated legal).
inline bool legal(const Geometry& g, CpMode mode) {
  if (g.W == 1 || g.format == Format::Thd) return true;
  if (mode == CpMode::AllGather) return false;       // all_gather: THD only at CP > 1
  return mode != CpMode::Chunkwise || g.batch == 1;  // chunkwise SBHD: batch 1
}

inline constexpr CpMode kModes[] = {CpMode::Headwise, CpMode::Chunkwise, CpMode::AllGather};

// (name, reference, candidate) for every tensor of an answer.
inline std::vector<std::tuple<std::string, const Tensor&, const Tensor&>> pairs(const Answer& ref, const Answer& got) {
  std::vector<std::tuple<std::string, const Tensor&, const Tensor&>> out{
      {"out", ref.out, got.out}, {"grad_hidden", ref.grad_hidden, got.grad_hidden}};
  for (const auto& [name, t] : ref.grads) out.emplace_back("grad::" + name, t, got.grads.at(name));
  return out;
}

// The oracle's answer for a case and the gate of each tensor: computed once, shared by every mode.
struct Judge {
  Case k;
  Answer oracle;
  std::map<std::string, double> gates;

  explicit Judge(const RunSpec& spec) : Judge(make_case(spec), spec.dtype) {}
  Judge(Case c, DType dtype) : k(std::move(c)), oracle(oracle_answer(k)), gates(oracle_gates(k, oracle, dtype)) {}

  // Relative RMS against the oracle of every tensor of `got`, and a message for each outside its gate.
  std::map<std::string, double> measure(const Answer& got, const std::string& what,
                                        std::vector<std::string>& failures) const {
    std::map<std::string, double> rel;
    for (const auto& [name, ref, cand] : pairs(oracle, got)) {
      const Metrics m = compare(ref, cand);
      rel[name] = m.rel_rms;
      char buf[128];
      std::snprintf(buf, sizeof buf, ": rel_rms %.3e >= gate %.3e", m.rel_rms, gates.at(name));
      if (!(m.ref_rms > 0.0)) failures.push_back(what + " " + name + ": the oracle's tensor is zero");
      else if (!(m.rel_rms < gates.at(name))) failures.push_back(what + " " + name + buf);
    }
    return rel;
  }

  // As measure, failing the property on the first tensor outside its gate.
  std::map<std::string, double> check(const Answer& got, const std::string& what) const {
    std::vector<std::string> failures;
    auto rel = measure(got, what, failures);
    if (!failures.empty()) RC_FAIL(failures.front());
    return rel;
  }
};

// Runs `spec` (mode and CP sizes as given) and checks every micro-batch against the oracle.
inline std::vector<MicroBatchRun> run_and_check(const Judge& judge, const RunSpec& spec,
                                                std::vector<std::map<std::string, double>>* rel = nullptr) {
  auto runs = run_in_process(spec, judge.k, cpu::make_backend);
  for (const auto& run : runs) {
    const auto r = judge.check(run.answer, std::string(mode_name(spec.cp.mode)) + " cp=" + std::to_string(run.cp_size));
    if (rel) rel->push_back(r);
  }
  return runs;
}

}  // namespace gdnv::cp::testing
