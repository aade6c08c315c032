// The CP harness's RunSpec: CP=1 accepts any length, and each micro-batch of a dynamic-CP run has its
// own packing, validated at its own CP size, its own inputs and its own oracle.
#include <gtest/gtest.h>

#include "core/error.hpp"
#include "core/metrics.hpp"
#include "cpu/backend.hpp"
#include "harness/verdict.hpp"
#include "harness/world.hpp"
#include "layouts/validate.hpp"

namespace gdnv::cp {
using namespace harness;
namespace {

using Ints = std::vector<std::int64_t>;

// CP 4, 2, 1 in a static group of 4, each micro-batch padded for its own size only (the upstream
// dynamic-CP job): 4, 12 are not multiples of 2*4 and 5 not of 2*2.
RunSpec dynamic_spec() {
  RunSpec s;
  s.layer = {24, 4, 8, 6, 10, 4, 1e-6, false};
  s.cp.mode = CpMode::Headwise;
  s.cp.cp = 4;
  s.cp.dynamic_cp = {1, 2};
  s.dtype = DType::F64;
  s.micro_batches = {4, 2, 1};
  s.micro_batch_lengths = {{8, 40, 16}, {4, 12}, {5}};
  return s;
}

template <class F>
std::string config_error_of(F&& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(Harness, Cp1AcceptsAnyLength) {
  for (CpMode mode : {CpMode::Headwise, CpMode::Chunkwise, CpMode::AllGather}) {
    RunSpec thd = dynamic_spec();
    thd.cp = {};
    thd.cp.mode = mode;
    thd.micro_batches.clear();
    thd.micro_batch_lengths.clear();
    thd.lengths = {5, 9, 1};
    RunSpec sbhd = thd;
    sbhd.format = Format::Sbhd;
    sbhd.seq_len = 7;
    sbhd.batch = 2;
    for (const RunSpec& s : {thd, sbhd}) {
      EXPECT_EQ(config_error_of([&] { validate_run(s); }), "(accepted)") << mode_name(mode);
      EXPECT_EQ(config_error_of([&] { (void)planned_micro_batches(s); }), "(accepted)") << mode_name(mode);
    }
  }
}

TEST(Harness, EachMicroBatchIsValidatedAtItsOwnCpSize) {
  EXPECT_EQ(config_error_of([] { validate_run(dynamic_spec()); }), "(accepted)");
  const auto planned = planned_micro_batches(dynamic_spec());
  ASSERT_EQ(planned.size(), 3u);
  EXPECT_EQ(planned[0].cu, (Ints{0, 8, 48, 64}));
  EXPECT_EQ(planned[1].cu, (Ints{0, 4, 16}));
  EXPECT_EQ(planned[1].cp_size, 2);
  EXPECT_EQ(planned[2].cu, (Ints{0, 5}));
  RunSpec shared = dynamic_spec();  // one packing for every micro-batch: 4, 12 is no packing for CP 4
  shared.micro_batch_lengths.clear();
  shared.lengths = {4, 12};
  EXPECT_EQ(config_error_of([&] { validate_run(shared); }),
            "micro-batch 1/3 (cp=4, lengths 4,12): sequence lengths 4,12 are not divisible by 2*cp = 8 (zigzag "
            "layout): pad each sequence to a multiple of 8");
}

TEST(Harness, OneLengthsListPerMicroBatch) {
  RunSpec s = dynamic_spec();
  s.micro_batch_lengths.pop_back();
  const std::string message =
      "2 lists of sequence lengths for 3 micro-batch(es): give one list per micro-batch, in "
      "micro-batch order";
  EXPECT_EQ(config_error_of([&] { validate_run(s); }), message);
  EXPECT_EQ(config_error_of([&] { (void)planned_micro_batches(s); }), message);
}

// Micro-batch 0's inputs are those of a one-micro-batch run of its packing, the parameters are
// shared, and every answer is within the fp64 gate of its own case's oracle.
TEST(Harness, EachMicroBatchRunsOnItsOwnInputsAgainstItsOwnOracle) {
  const RunSpec s = dynamic_spec();
  const std::vector<Case> cases = make_cases(s);
  ASSERT_EQ(cases.size(), 3u);
  EXPECT_EQ(cases[1].cu_seqlens, (Ints{0, 4, 16}));
  EXPECT_EQ(cases[2].hidden.shape(), (Shape{5, 1, 24}));
  RunSpec single = s;
  single.micro_batches.clear();
  single.micro_batch_lengths.clear();
  single.lengths = {8, 40, 16};
  EXPECT_TRUE(cases[0].hidden.bitwise_equal(make_case(single).hidden));
  for (const auto& [name, t] : cases[0].params) EXPECT_TRUE(t.bitwise_equal(cases[2].params.at(name))) << name;

  const auto runs = run_in_process(s, cases, cpu::make_backend);
  ASSERT_EQ(runs.size(), 3u);
  for (std::size_t m = 0; m < runs.size(); ++m) {
    EXPECT_EQ(runs[m].cp_size, s.micro_batches[m]);
    const Answer oracle = oracle_answer(cases[m]);
    const auto gates = oracle_gates(cases[m], oracle, s.dtype);
    EXPECT_LT(compare(oracle.out, runs[m].answer.out).rel_rms, gates.at("out")) << m;
    EXPECT_LT(compare(oracle.grad_hidden, runs[m].answer.grad_hidden).rel_rms, gates.at("grad_hidden")) << m;
    for (const auto& [name, t] : oracle.grads)
      EXPECT_LT(compare(t, runs[m].answer.grads.at(name)).rel_rms, gates.at("grad::" + name)) << m << " " << name;
  }
}

// A run that lacks a tensor the oracle has is judged failing, never skipped: the verdict a mutant that
// drops a gradient would otherwise pass.
TEST(Verdict, ATensorTheRunLacksFailsAsMissing) {
  RunSpec s;
  s.layer = {24, 4, 8, 6, 10, 4, 1e-6, false};
  s.lengths = {8, 4};
  s.dtype = DType::F64;
  const Case k = make_case(s);
  const Answer oracle = oracle_answer(k);
  MicroBatchRun run;
  run.answer = oracle;
  run.answer.grads.erase("A_log");
  const auto verdicts = judge_answer(oracle, run.answer, oracle_gates(k, oracle, s.dtype));
  ASSERT_EQ(verdicts.size(), 2 + oracle.grads.size());
  for (const TensorVerdict& v : verdicts) {
    EXPECT_EQ(v.missing, v.name == "grad::A_log") << v.name;
    EXPECT_EQ(v.pass, v.name != "grad::A_log") << v.name;
  }
  const auto d = first_divergence(verdicts, oracle, run, k);
  ASSERT_TRUE(d);
  EXPECT_EQ(divergence_line(*d),
            "first divergence: grad::A_log (backward, every rank of 1, rows 0..7): missing from the run");
}

// The cu_seqlens walk: each micro-batch is ruled on (docs/DESIGN.md §3.1) and its cu_seqlens checked once,
// then every rank plans the checked micro-batch as it is: once per run in one process, whether the run
// checks its cases or runs what validate_run checked, and once per rank where each rank checks for itself
// (one process per rank, as under MPI).
TEST(Harness, EachMicroBatchIsRuledOnOnceAndItsCuSeqlensCheckedOncePerRank) {
  const RunSpec s = dynamic_spec();  // 3 micro-batches on 4 ranks
  const std::vector<Case> cases = make_cases(s);
  struct Counts {
    std::uint64_t rulings = micro_batch_rulings(), checks = layouts::cu_seqlens_checks();
    std::pair<std::uint64_t, std::uint64_t> since() const {
      return {micro_batch_rulings() - rulings, layouts::cu_seqlens_checks() - checks};
    }
  };
  using Pair = std::pair<std::uint64_t, std::uint64_t>;
  {
    const Counts counts;
    (void)run_in_process(s, cases, cpu::make_backend);
    EXPECT_EQ(counts.since(), (Pair{3, 3}));
  }
  {
    const Counts counts;
    (void)run_in_process(validate_run(s), cases, cpu::make_backend);
    EXPECT_EQ(counts.since(), (Pair{3, 3}));
  }
  const Counts counts;
  RankBackends ranks = make_rank_backends(4, cpu::make_backend, s.dtype);
  comm::run_world(
      4,
      [&](comm::Communicator& world) {
        (void)run_rank(validate_run(s), cases, std::move(ranks.backends[static_cast<std::size_t>(world.rank())]),
                       world);
      },
      ranks.options);
  EXPECT_EQ(counts.since(), (Pair{4 * 3, 4 * 3}));
}

TEST(Harness, RunInProcessTakesOneCasePerMicroBatchOrOneForAll) {
  const RunSpec s = dynamic_spec();
  std::vector<Case> two = make_cases(s);
  two.pop_back();
  EXPECT_EQ(config_error_of([&] { (void)run_in_process(s, two, cpu::make_backend); }),
            "2 cases for 3 micro-batch(es): give one per micro-batch (make_cases), or one for all");
  // One case for all, packed for CP 2: the CP 4 micro-batch rejects it before any rank starts.
  EXPECT_EQ(config_error_of([&] { (void)run_in_process(s, make_case(s, 1), cpu::make_backend); }),
            "micro-batch 1/3 (cp=4, lengths 4,12): sequence lengths 4,12 are not divisible by 2*cp = 8 (zigzag "
            "layout): pad each sequence to a multiple of 8");
}

}  // namespace
}  // namespace gdnv::cp
