// The gate's "verdict known answers" step: the judge judged (docs/DESIGN.md §11). Pairs of tensors with
// differences of known size and sign go through the metrics, the policy verdict of `compare`, the
// structural checks and the CP matrix's judgement with its first-divergence line, and each answer is the
// one written here from the definition (docs/DESIGN.md §4); every oracle_gates gate is recomputed from
// its stated formula. tests/judge_gate_test runs the same step in ctest.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <optional>
#include <set>
#include <tuple>

#include "core/error.hpp"
#include "core/metrics.hpp"
#include "gate/cp_mode_matrix.hpp"
#include "gate/steps.hpp"
#include "harness/verdict.hpp"
#include "harness/world.hpp"
#include "probes/compare.hpp"
#include "probes/policy.hpp"

namespace gdnv::gate {
namespace {

// x with every digit that tells it apart (%.17g): known answers print the exact values they compare.
std::string round_trip(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  return buf;
}

// |got - want| <= tol |want| (tol 0: equal), else "<what> <got>, expected <want>".
std::string expect_near(const std::string& what, double got, double want, double tol = 0) {
  if (std::abs(got - want) <= tol * std::abs(want)) return "";
  return what + " " + round_trip(got) + ", expected " + round_trip(want);
}
std::string expect_eq(const std::string& what, const std::string& got, const std::string& want) {
  return got == want ? "" : what + " '" + got + "', expected '" + want + "'";
}

// The first non-empty reason.
std::string first(std::initializer_list<std::string> whys) {
  for (const auto& w : whys)
    if (!w.empty()) return w;
  return "";
}

// ref: x_i = 1 + i over [4, 6] (rms sqrt(sum (1 + i)^2 / 24), max 24 at index 23).
Tensor ramp() {
  Tensor t(DType::F64, {4, 6});
  for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, 1.0 + static_cast<double>(i));
  return t;
}
Tensor scaled(const Tensor& t, double s) {
  Tensor out = t;
  for (std::int64_t i = 0; i < t.numel(); ++i) out.set(i, s * t.get(i));
  return out;
}

// ---- metrics and the policy verdict (probes/compare.hpp) under cp-vs-cp1: atol 2e-3, rtol 1e-2 ----

// cand = -ref: the difference is 2 ref, so rel_rms = 2, max_abs = 2 max|ref| = 48 at index 23, the
// cosine -1 (1 - cos = 2), snr 10 log10(1/4), every element outside its bound.
std::string sign_flip() {
  const Tensor x = ramp();
  const probes::TensorResult t =
      probes::compare_tensor("x", x, scaled(x, -1), probes::load_policy("cp-vs-cp1").rule_for("x"));
  return first({expect_near("1 - cos", t.m.one_minus_cos, 2, 1e-15), expect_near("rel_rms", t.m.rel_rms, 2, 1e-12),
                expect_near("max_abs", t.m.max_abs, 48), expect_near("max_abs_index", t.m.max_abs_index, 23),
                expect_near("max_rel", t.m.max_rel, 2), expect_near("snr_db", t.m.snr_db, 10 * std::log10(0.25), 1e-15),
                expect_near("mismatched", static_cast<double>(t.mismatched), 24),
                expect_eq("verdict", t.why, "24 elements outside atol + rtol |ref|")});
}

// cand = 2 ref: the same rel_rms and 1 - cos = 0 (the sign tells the two apart).
std::string doubled() {
  const Tensor x = ramp();
  const Metrics m = compare(x, scaled(x, 2));
  return first({expect_near("1 - cos", m.one_minus_cos, 0, 0), expect_near("rel_rms", m.rel_rms, 1, 1e-12)});
}

// One NaN at index 7: counted, excluded from the numeric metrics (all zero), and the verdict.
std::string single_nan() {
  const Tensor x = ramp();
  Tensor c = x;
  c.set(7, std::numeric_limits<double>::quiet_NaN());
  const probes::TensorResult t = probes::compare_tensor("x", x, c, probes::load_policy("cp-vs-cp1").rule_for("x"));
  return first({expect_near("nan_cand", static_cast<double>(t.m.nan_cand), 1),
                expect_near("nan_ref", static_cast<double>(t.m.nan_ref), 0), expect_near("rel_rms", t.m.rel_rms, 0),
                expect_eq("verdict", t.why, "1 elements NaN/Inf on one side only"),
                t.pass ? "a NaN passed the policy" : ""});
}

// Element 5 (ref 6) moved to its bound atol + rtol |ref| = 0.062 times (1 -+ 1e-9): inside, then outside.
std::string element_at_bound(double side) {
  const Tensor x = ramp();
  Tensor c = x;
  c.set(5, 6 + (2e-3 + 1e-2 * 6) * (1 + side * 1e-9));
  const probes::TensorResult t = probes::compare_tensor("x", x, c, probes::load_policy("cp-vs-cp1").rule_for("x"));
  if (side < 0) return first({expect_eq("verdict", t.why, ""), expect_near("mismatched", t.mismatched, 0)});
  return first({expect_near("mismatched", static_cast<double>(t.mismatched), 1),
                expect_near("max_abs_index", static_cast<double>(t.m.max_abs_index), 5),
                expect_eq("verdict", t.why, "1 elements outside atol + rtol |ref|")});
}

// Policy "bitwise" (exact): -0 against +0 is numerically equal but not the same bytes, so it fails.
std::string signed_zero() {
  const Tensor x = ramp();
  Tensor ref = x, c = x;
  ref.set(3, 0.0), c.set(3, -0.0);
  const probes::TensorResult t = probes::compare_tensor("x", ref, c, probes::load_policy("bitwise").rule_for("x"));
  return first({t.numeric_equal ? "" : "-0 and +0 not numerically equal",
                expect_eq("verdict", t.why, "not bitwise identical (policy: exact)")});
}

// Policy "upstream-probe" (norm-wise): one bound atol + rtol max|ref| = 2e-4 + 2e-3 x 24 = 0.0482 for
// every element, so element 0 (ref 1) may move by 0.0482 (1 - 1e-9) but not by 0.0482 (1 + 1e-9).
std::string normwise_bound() {
  const Tensor x = ramp();
  std::string why;
  for (double side : {-1.0, 1.0}) {
    Tensor c = x;
    c.set(0, 1 + (2e-4 + 2e-3 * 24) * (1 + side * 1e-9));
    const probes::TensorResult t =
        probes::compare_tensor("x", x, c, probes::load_policy("upstream-probe").rule_for("x"));
    why = first({why, expect_eq(side < 0 ? "inside: verdict" : "outside: verdict", t.why,
                                side < 0 ? "" : "1 elements outside atol + rtol max|ref|")});
  }
  return why;
}

// A policy of min_cos 0.999 alone fails a sign flip (cos -1) and passes a doubling (cos 1); one of
// max_rel_rms 0.1 passes cand = 1.09 ref (rel_rms 0.09) and fails 1.11 ref.
std::string cosine_and_rel_rms_rules() {
  const Tensor x = ramp();
  probes::Rule cos_rule, rms_rule;
  cos_rule.min_cos = 0.999;
  rms_rule.max_rel_rms = 0.1;
  const auto why = [&](const probes::Rule& rule, double s) {
    return probes::compare_tensor("x", x, scaled(x, s), rule).why;
  };
  return first({expect_eq("cos, flipped", why(cos_rule, -1), "cosine below min_cos"),
                expect_eq("cos, doubled", why(cos_rule, 2), ""), expect_eq("rel_rms 0.09", why(rms_rule, 1.09), ""),
                expect_eq("rel_rms 0.11", why(rms_rule, 1.11), "rel_rms above max_rel_rms")});
}

// Tolerances and their decade histogram: errors 2^-9 = 1.95e-3 at element 2 (ref 3) and 2^-16 = 1.5e-5
// at element 4 (ref 5), both exact in fp64, 22 exact: min_atol 2^-9, min_rtol 2^-9 / 3,
// "0:22 1e-05:1 1e-03:1".
std::string tolerance_histogram() {
  const Tensor x = ramp();
  Tensor c = x;
  c.set(2, 3 + 0x1p-9), c.set(4, 5 - 0x1p-16);
  const Tolerances t = tolerances(x, c);
  return first({expect_near("min_atol", t.min_atol, 0x1p-9), expect_near("min_rtol", t.min_rtol, 0x1p-9 / 3, 1e-15),
                expect_eq("histogram", decade_histogram(t), "0:22 1e-05:1 1e-03:1")});
}

// REF {a, b, d [4, 6]}, CAND {a, c, d [6, 4]}: a compared and equal; b missing, c only in CAND and d of
// a permuted shape are structural mismatches: exit code 2.
std::string structure() {
  TensorFile ref, cand;
  const Tensor x = ramp();
  ref.tensors = {{"a", x}, {"b", x}, {"d", x}};
  cand.tensors = {{"a", x}, {"c", x}, {"d", x.reshaped({6, 4})}};
  probes::Comparison c;
  probes::compare_files(ref, cand, probes::load_policy("cp-vs-cp1"), "", c);
  std::string got;
  for (const auto& t : c.tensors)
    got += t.name + "=" + (t.structure.empty() ? (t.pass ? "pass" : "fail") : t.structure) + ";";
  return first({expect_eq("results", got, "a=pass;b=missing in CAND;d=REF F64 [4, 6], CAND F64 [6, 4];c=only in CAND;"),
                expect_near("exit code", c.exit_code(), 2), expect_near("compared", c.compared(), 1)});
}

// ---- the CP matrix's judgement and first-divergence line (harness/verdict.hpp) ----

// The gate matrix's case at W = 4, fp64 (gates 1e-10), and the rows CP rank r holds.
struct DivergenceCase {
  harness::Case k =
      harness::make_case(harness::gate_matrix_spec(cp::CpMode::Headwise, 4, 1, DType::F64, cp::Format::Thd));
  harness::Answer oracle = harness::oracle_answer(k);
  std::vector<std::int64_t> rows(int r) const { return harness::zigzag_rows(k, 4, r); }
  // "a..b" over `v`, and where the contiguous spans holding those THD tokens are not rank r's alone, the
  // line's " zigzag; contiguous rank(s) i, j": span s is tokens [s T/4, (s+1) T/4) (docs/DESIGN.md §2).
  std::string rows_of(int r, std::vector<std::int64_t> v = {}) const {
    if (v.empty()) v = rows(r);
    const std::int64_t T = k.hidden.dim(0);
    std::set<std::int64_t> spans;
    for (const std::int64_t t : v) spans.insert(t / (T / 4));
    std::string also;
    for (const std::int64_t s : spans)
      also += (also.empty() ? std::string(" zigzag; contiguous rank") + (spans.size() > 1 ? "s " : " ") : ", ") +
              std::to_string(s);
    if (spans == std::set<std::int64_t>{r}) also.clear();
    return std::to_string(*std::min_element(v.begin(), v.end())) + ".." +
           std::to_string(*std::max_element(v.begin(), v.end())) + also;
  }
};

std::string line_of(const DivergenceCase& c, const harness::Answer& got,
                    std::vector<harness::TensorVerdict>* verdicts = nullptr) {
  const auto v = harness::judge_answer(c.oracle, got, harness::oracle_gates(c.k, c.oracle, DType::F64));
  if (verdicts) *verdicts = v;
  harness::MicroBatchRun run;
  run.cp_size = 4;
  run.answer = got;
  const auto d = harness::first_divergence(v, c.oracle, run, c.k);
  return d ? harness::divergence_line(*d) : "(all pass)";
}

std::string rel(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3e", v);
  return buf;
}

// out's rows on rank 2 times 1.5: that rank's rel_rms is 0.5, every one of its rows over the gate.
std::string rank_scaled(const DivergenceCase& c) {
  harness::Answer got = c.oracle;
  const std::int64_t width = got.out.numel() / got.out.dim(0);
  for (auto row : c.rows(2))
    for (std::int64_t j = 0; j < width; ++j) got.out.set(row * width + j, 1.5 * got.out.get(row * width + j));
  return expect_eq(
      "line", line_of(c, got),
      "first divergence: out (forward, rank 2 of 4, rows " + c.rows_of(2) + "): rel_rms 5.000e-01 > gate 1.000e-10");
}

// grad_hidden's shards of ranks 1 and 3 swapped (a permuted rank): out passes, grad_hidden diverges
// first on rank 1, by rms(ref_3 - ref_1) / rms(ref_1) over its rows.
std::string ranks_swapped(const DivergenceCase& c) {
  harness::Answer got = c.oracle;
  const Tensor& ref = c.oracle.grad_hidden;
  const std::int64_t width = ref.numel() / ref.dim(0);
  const auto a = c.rows(1), b = c.rows(3);
  double err2 = 0, ref2 = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    for (std::int64_t j = 0; j < width; ++j) {
      const double ra = ref.get(a[i] * width + j), rb = ref.get(b[i] * width + j);
      got.grad_hidden.set(a[i] * width + j, rb);
      got.grad_hidden.set(b[i] * width + j, ra);
      err2 += (rb - ra) * (rb - ra);
      ref2 += ra * ra;
    }
  return expect_eq("line", line_of(c, got),
                   "first divergence: grad_hidden (backward, rank 1 of 4, rows " + c.rows_of(1) + "): rel_rms " +
                       rel(std::sqrt(err2 / ref2)) + " > gate 1.000e-10");
}

// grad::A_log negated: summed over every rank; rel_rms 2 and 1 - cos = 2 in its verdict.
std::string gradient_flipped(const DivergenceCase& c) {
  harness::Answer got = c.oracle;
  got.grads.at(ref::kALog) = scaled(got.grads.at(ref::kALog), -1);
  std::vector<harness::TensorVerdict> v;
  const std::string line = line_of(c, got, &v);
  double one_minus_cos = -1;
  for (const auto& t : v)
    if (t.name == std::string("grad::") + ref::kALog) one_minus_cos = t.m.one_minus_cos;
  return first(
      {expect_eq("line", line,
                 "first divergence: grad::A_log (backward, every rank of 4, rows 0.." +
                     std::to_string(got.grads.at(ref::kALog).dim(0) - 1) + "): rel_rms 2.000e+00 > gate 1.000e-10"),
       expect_near("1 - cos", one_minus_cos, 2, 1e-15)});
}

// One NaN in out, in rank 0's first row: nan/inf on rank 0, that row alone.
std::string nan_in_rank(const DivergenceCase& c) {
  harness::Answer got = c.oracle;
  const std::int64_t row = c.rows(0).front(), width = got.out.numel() / got.out.dim(0);
  got.out.set(row * width + 1, std::numeric_limits<double>::quiet_NaN());
  return expect_eq("line", line_of(c, got),
                   "first divergence: out (forward, rank 0 of 4, rows " + c.rows_of(0, {row}) +
                       "): nan/inf 1.000e+00 > gate 0.000e+00");
}

// The CP matrices' own judgement (first_tensor_outside_gate) on the same case: out within 0.9 and 1.1
// times its fp64 gate 1e-10 (scaled by 1 + 0.9e-10 and 1 + 1.1e-10), a negated gradient, a NaN, a
// gradient missing from the run.
std::string matrix_judge(const DivergenceCase& c) {
  const auto gates = harness::oracle_gates(c.k, c.oracle, DType::F64);
  const auto judged = [&](const std::function<void(harness::Answer&)>& change) {
    harness::Answer got = c.oracle;
    change(got);
    return first_tensor_outside_gate(c.oracle, got, gates);
  };
  const auto out_times = [](double s) { return [s](harness::Answer& a) { a.out = scaled(a.out, s); }; };
  return first({expect_eq("identical", judged([](harness::Answer&) {}), ""),
                expect_eq("out 0.9 gate", judged(out_times(1 + 0.9e-10)), ""),
                expect_eq("out 1.1 gate", judged(out_times(1 + 1.1e-10)), "out: rel_rms 1.100e-10 >= gate 1.000e-10"),
                expect_eq("negated", judged([](harness::Answer& a) {
                            a.grads.at(ref::kALog) = scaled(a.grads.at(ref::kALog), -1);
                          }),
                          "grad::A_log: rel_rms 2.000e+00 >= gate 1.000e-10"),
                expect_eq("NaN", judged([](harness::Answer& a) { a.grad_hidden.set(3, std::nan("")); }),
                          "grad_hidden: 1 NaN, 0 Inf"),
                expect_eq("missing", judged([](harness::Answer& a) { a.grads.erase(ref::kDtBias); }),
                          "grad::dt_bias: missing from the run")});
}

// A candidate equal to the oracle passes, with no divergence.
std::string identical(const DivergenceCase& c) { return expect_eq("line", line_of(c, c.oracle), "(all pass)"); }

// ---- oracle_gates from docs/DESIGN.md §4's formula ----

// Storage dtype: gate_t = max(floor, 4 delta kappa_t), delta = 2^-p / sqrt(3) (p = 9 bf16, 24 fp32),
// floor 2e-2 (bf16) or 1e-5 (fp32); fp64: 1e-10 for every tensor. On the gate matrix's W = 1 case.
std::string gates_from_formula() {
  harness::RunSpec spec = harness::gate_matrix_spec(cp::CpMode::Headwise, 1, 1, DType::F64, cp::Format::Thd);
  spec.lengths = {9, 5};
  const harness::Case k = harness::make_case(spec);
  const harness::Answer oracle = harness::oracle_answer(k);
  const auto kappa = harness::condition_numbers(k, oracle);
  const std::size_t tensors = 2 + oracle.grads.size();
  if (kappa.size() != tensors)
    return "kappa for " + std::to_string(kappa.size()) + " tensors, expected " + std::to_string(tensors);
  for (const auto& [dtype, p, floor] : {std::tuple{DType::BF16, 9, 2e-2}, {DType::F32, 24, 1e-5}}) {
    const auto gates = harness::oracle_gates(k, oracle, dtype);
    if (gates.size() != tensors) return std::string(dtype_name(dtype)) + ": " + std::to_string(gates.size()) + " gates";
    const double delta = std::ldexp(1.0, -p) / std::sqrt(3.0);
    for (const auto& [name, kap] : kappa)
      if (auto why = expect_near(std::string(dtype_name(dtype)) + " gate of " + name, gates.at(name),
                                 std::max(floor, 4 * delta * kap), 1e-12);
          !why.empty())
        return why;
  }
  const auto f64 = harness::oracle_gates(k, oracle, DType::F64);
  for (const auto& [name, kap] : kappa)
    if (auto why = expect_near("F64 gate of " + name, f64.at(name), 1e-10); !why.empty()) return why;
  return "";
}

StepResult run(const StepOptions& options) {
  StepResult r(options);
  r.check_case("metrics sign flip", sign_flip);
  r.check_case("metrics doubled", doubled);
  r.check_case("metrics single NaN", single_nan);
  r.check_case("policy element inside its bound", [] { return element_at_bound(-1); });
  r.check_case("policy element just past its bound", [] { return element_at_bound(1); });
  r.check_case("policy bitwise signed zero", signed_zero);
  r.check_case("policy norm-wise bound", normwise_bound);
  r.check_case("policy cosine and rel_rms rules", cosine_and_rel_rms_rules);
  r.check_case("tolerances and their histogram", tolerance_histogram);
  r.check_case("compare missing, extra and permuted-shape tensors", structure);
  std::optional<DivergenceCase> c;
  const auto with_case = [&](std::string (*f)(const DivergenceCase&)) {
    return [&c, f] {
      if (!c) c.emplace();
      return f(*c);
    };
  };
  r.check_case("first divergence identical", with_case(identical));
  r.check_case("first divergence one rank scaled", with_case(rank_scaled));
  r.check_case("first divergence ranks swapped", with_case(ranks_swapped));
  r.check_case("first divergence gradient negated", with_case(gradient_flipped));
  r.check_case("first divergence single NaN", with_case(nan_in_rank));
  r.check_case("CP matrix judgement at its gates", with_case(matrix_judge));
  r.check_case("oracle gates from their formula", gates_from_formula);
  return r;
}

}  // namespace

const Step verdict_known_answers{"verdict known answers", run};

}  // namespace gdnv::gate
