#pragma once
// One layer run judged against the fp64 oracle, for the tests that run the harness on a backend.
#include <string>

#include <gtest/gtest.h>

#include "core/metrics.hpp"
#include "harness/world.hpp"

namespace gdnv::cp::testing {
using namespace harness;

// Every tensor of spec's (single) micro-batch within its oracle gate and free of NaN and Inf, which
// rel_rms alone would miss: it covers the finite elements only.
inline void expect_matches_oracle_without_nan_or_inf(const RunSpec& spec, const BackendFactory& factory) {
  const Case k = make_case(spec);
  const Answer oracle = oracle_answer(k);
  const auto gates = oracle_gates(k, oracle, spec.dtype);
  const Answer got = run_in_process(spec, k, factory).at(0).answer;
  const auto check = [&](const std::string& name, const Tensor& want, const Tensor& cand) {
    const Metrics m = compare(want, cand);
    EXPECT_TRUE(m.rel_rms < gates.at(name) && m.nan_cand == 0 && m.inf_cand == 0)
        << name << ": rel RMS " << m.rel_rms << " gate " << gates.at(name) << " NaN " << m.nan_cand << " Inf "
        << m.inf_cand;
  };
  check("out", oracle.out, got.out);
  check("grad_hidden", oracle.grad_hidden, got.grad_hidden);
  for (const auto& [name, t] : oracle.grads) check("grad::" + name, t, got.grads.at(name));
}

}  // namespace gdnv::cp::testing
