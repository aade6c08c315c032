// Gate step "illegal combinations" (docs/DESIGN.md §3.1): the table of cp/illegal.hpp, the one its
// GoogleTest (tests/cp_config_test.cpp) reads too, and each rule at the CP sizes where it holds.
#include <functional>

#include "cp/illegal.hpp"
#include "gate/steps.hpp"

namespace gdnv::gate {
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

// docs/DESIGN.md §3.1: each illegal combination fails with a message naming the fix, raised by its own
// rule (the layer config's own check for Hv % Hk).
StepResult run(const StepOptions& options) {
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

}  // namespace

const Step illegal_combinations{"illegal combinations", run};

}  // namespace gdnv::gate
