// A clean build passes every named stage (reference/layer.hpp) in every mode, dtype, layout and TP size of
// the gate's CP mode matrix (gate/cp_mode_matrix.cpp), each stage within its oracle_gates gate.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "cpu/backend.hpp"
#include "harness/verdict.hpp"

namespace gdnv::cp {
using namespace harness;
namespace {

// The gate's matrix spec with its stages recorded, seeded.
RunSpec matrix_spec(CpMode mode, int W, int tp, DType dtype, Format format, std::uint64_t seed) {
  RunSpec s = gate_matrix_spec(mode, W, tp, dtype, format);
  s.seed = seed;
  s.stages = true;
  return s;
}

RC_GTEST_PROP(Stages, EveryStagePassesInEveryLegalCaseOfTheGateMatrix, ()) {
  const auto mode = *rc::gen::element(CpMode::Headwise, CpMode::Chunkwise, CpMode::AllGather);
  const int W = *rc::gen::element(1, 2, 4);
  const int tp = *rc::gen::element(1, 2);
  const DType dtype = *rc::gen::element(DType::F64, DType::F32, DType::BF16);
  const Format format = *rc::gen::element(Format::Thd, Format::Sbhd);
  const auto seed = *rc::gen::inRange<std::uint64_t>(0, 1000);
  const RunSpec spec = matrix_spec(mode, W, tp, dtype, format, seed);
  try {
    validate_run(spec);
  } catch (const ConfigError&) {
    RC_DISCARD("illegal in docs/DESIGN.md §3.1");
  }
  RC_LOG() << mode_name(mode) << " W=" << W << " tp=" << tp << " " << dtype_name(dtype) << " " << format_name(format)
           << " seed=" << seed << "\n";
  const Case k = make_case(spec);
  const auto runs = run_in_process(spec, k, cpu::make_backend);
  const Answer oracle = oracle_answer(k, stage_request(spec, runs.at(0).cp_size));
  const auto verdicts = judge_answer(oracle, runs.at(0).answer, oracle_gates(k, oracle, dtype));
  RC_ASSERT(verdicts.size() == oracle.stages.size() + 2 + oracle.grads.size());
  for (const TensorVerdict& v : verdicts)
    if (!v.pass) RC_FAIL(v.name + ": rel_rms " + std::to_string(v.m.rel_rms) + " >= gate " + std::to_string(v.gate));
}

}  // namespace
}  // namespace gdnv::cp
