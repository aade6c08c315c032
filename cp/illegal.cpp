#include "cp/illegal.hpp"

#include "reference/layer_config.hpp"

namespace gdnv::cp {
namespace {

struct Flags {
  int tp = 1, cp = 1;
  std::vector<int> dynamic_cp = {};
  bool deterministic = false, allgather_cp = false, inference = false;
};

IllegalRule rule(Rule id, std::string name, std::string fragment, Stage stage, std::string mode, const Flags& f) {
  IllegalRule r;
  r.id = id;
  r.name = std::move(name);
  r.fragment = std::move(fragment);
  r.stage = stage;
  r.mode = std::move(mode);
  r.config.tp = f.tp;
  r.config.cp = f.cp;
  r.config.dynamic_cp = f.dynamic_cp;
  r.config.deterministic = f.deterministic;
  r.config.allgather_cp = f.allgather_cp;
  r.config.inference = f.inference;
  return r;
}

IllegalRule with_heads(IllegalRule r, std::int64_t Hk, std::int64_t Hv) {
  r.Hk = Hk;
  r.Hv = Hv;
  return r;
}

IllegalRule with_micro_batch(IllegalRule r, MicroBatchShape mb) {
  r.micro_batch = std::move(mb);
  return r;
}

std::vector<IllegalRule> make_rules() {
  const Stage S = Stage::Static, M = Stage::MicroBatch;
  const auto thd = [](std::vector<std::int64_t> lengths, std::int64_t batch = 1, bool group = false, int local = 0,
                      int group_size = 0) {
    return MicroBatchShape{Format::Thd, batch, std::move(lengths), group, local, group_size};
  };
  const auto sbhd = [](std::int64_t batch) { return MicroBatchShape{Format::Sbhd, batch, {16}, false, 0, 0}; };
  return {
      rule(Rule::UnknownMode, "a mode other than headwise, chunkwise, all_gather, including auto",
           "use one of 'headwise', 'chunkwise', 'all_gather' (the mode is static; there is no 'auto')", Stage::Mode,
           "auto", {}),
      with_heads(rule(Rule::HvNotMultipleOfHk, "Hv % Hk != 0", "a multiple of linear_num_key_heads", Stage::LayerConfig,
                      "headwise", {}),
                 3, 8),
      rule(Rule::HeadwiseHeadsNotDivisibleByTpCp, "headwise with Hk or Hv not divisible by tp * cp",
           "use linear_cp_mode='chunkwise' or 'all_gather', or a smaller tp*cp", S, "headwise", {.cp = 8}),
      rule(Rule::HeadsNotDivisibleByTp, "chunkwise with heads not divisible by tp",
           "choose a tensor-parallel size that divides both head counts", S, "chunkwise", {.tp = 8, .cp = 2}),
      rule(Rule::HeadsNotDivisibleByTp, "all_gather with heads not divisible by tp",
           "choose a tensor-parallel size that divides both head counts", S, "all_gather", {.tp = 8, .cp = 2}),
      rule(Rule::ChunkwiseWithAllgatherCp, "chunkwise with allgather_cp",
           "set allgather_cp=False or use linear_cp_mode='all_gather'", S, "chunkwise",
           {.cp = 2, .allgather_cp = true}),
      rule(Rule::ChunkwiseDeterministicWithCp, "chunkwise with deterministic when CP > 1",
           "not deterministic with CP>1 or dynamic CP (its state fold order depends on the rank split): use "
           "linear_cp_mode='headwise', or deterministic=False",
           S, "chunkwise", {.cp = 2, .deterministic = true}),
      rule(Rule::ChunkwiseDeterministicWithCp, "chunkwise with deterministic when dynamic CP is declared",
           "not deterministic with CP>1 or dynamic CP (its state fold order depends on the rank split): use "
           "linear_cp_mode='headwise', or deterministic=False",
           S, "chunkwise", {.cp = 1, .dynamic_cp = {1}, .deterministic = true}),
      with_micro_batch(
          rule(Rule::ChunkwiseDeterministicWithDynamicCp, "chunkwise with deterministic on a dynamic-CP micro-batch",
               "not deterministic with dynamic CP: use linear_cp_mode='headwise'", M, "chunkwise",
               {.cp = 2, .deterministic = true}),
          thd({16, 8}, 1, true, 2, 2)),
      rule(Rule::InferenceNotHeadwise, "chunkwise with inference", "use linear_cp_mode='headwise' for inference", S,
           "chunkwise", {.cp = 2, .inference = true}),
      rule(Rule::InferenceNotHeadwise, "all_gather with inference", "use linear_cp_mode='headwise' for inference", S,
           "all_gather", {.cp = 2, .inference = true}),
      rule(Rule::AllGatherDeterministic, "all_gather with deterministic",
           "'all_gather' is not deterministic (its backward reduce-scatters gradients): use linear_cp_mode='headwise', "
           "or deterministic=False",
           S, "all_gather", {.cp = 2, .deterministic = true}),
      with_micro_batch(rule(Rule::AllGatherSbhdWithCp, "all_gather with SBHD input at CP > 1",
                            "supports THD input only when CP>1: use THD input, or linear_cp_mode='headwise' or "
                            "'chunkwise'",
                            M, "all_gather", {.cp = 2}),
                       sbhd(1)),
      with_micro_batch(rule(Rule::ChunkwiseSbhdBatch, "chunkwise with SBHD batch > 1 at CP > 1",
                            "with SBHD input needs batch == 1 (got 2): use THD (packed) input, or "
                            "linear_cp_mode='headwise'",
                            M, "chunkwise", {.cp = 2}),
                       sbhd(2)),
      with_micro_batch(rule(Rule::ThdBatchNotOne, "THD with batch != 1",
                            "THD input needs batch == 1 (got 2): pack the sequences along T with cu_seqlens", M,
                            "headwise", {.cp = 2}),
                       thd({16, 8}, 2)),
      with_micro_batch(
          rule(Rule::LengthsNotDivisibleByCp, "sequence lengths not divisible by cp",
               "not divisible by cp = 4: pad each sequence to a multiple of 2*cp = 8", M, "headwise", {.cp = 4}),
          thd({16, 6})),
      with_micro_batch(rule(Rule::LengthsNotDivisibleByTwoCp, "sequence lengths not divisible by 2 cp",
                            "not divisible by 2*cp = 8 (zigzag layout): pad each sequence to a multiple of 8", M,
                            "headwise", {.cp = 4}),
                       thd({16, 12})),
      with_micro_batch(rule(Rule::LocalCpSizeNotGroupSize, "local_cp_size different from the group's size",
                            "pass the group's size as local_cp_size", M, "headwise", {.cp = 4}),
                       thd({16, 8}, 1, true, 2, 4)),
      with_micro_batch(rule(Rule::OnlyOneOfGroupAndLocalSize, "only one of cp_group, local_cp_size given",
                            "only one of cp_group and local_cp_size is set: pass both for a dynamic-CP micro-batch, "
                            "or neither",
                            M, "headwise", {.cp = 4}),
                       thd({16, 8}, 1, false, 2, 0)),
      rule(Rule::DynamicCpSizeNotDividing, "a declared dynamic CP size that does not divide the static one",
           "dynamic CP size 3 does not divide the static CP size 4: use divisors of 4", S, "headwise",
           {.cp = 4, .dynamic_cp = {3}}),
      with_micro_batch(
          rule(Rule::DynamicCpSizeNotDividing, "a micro-batch's CP size that does not divide the static one",
               "dynamic CP size 3 does not divide the static CP size 4: use divisors of 4", M, "headwise", {.cp = 4}),
          thd({18}, 1, true, 3, 3)),
      rule(Rule::TpBelowOne, "tp < 1", "the tensor-parallel size must be >= 1", S, "headwise", {.tp = 0}),
      rule(Rule::CpBelowOne, "cp < 1", "the context-parallel size must be >= 1", S, "headwise", {.cp = 0}),
  };
}

void run_checks(const IllegalRule& r) {
  CpConfig config = r.config;
  config.mode = parse_mode(r.mode);
  const ref::LayerConfig layer({32, r.Hk, r.Hv, 8, 8, 4, 1e-6, false});
  if (r.stage == Stage::Static) validate_static(config, layer);
  if (r.stage == Stage::MicroBatch) (void)validate_micro_batch(config, layer, r.micro_batch);
}

}  // namespace

const std::vector<IllegalRule>& illegal_rules() {
  static const std::vector<IllegalRule> rules = make_rules();
  return rules;
}

Rejection check_example(const IllegalRule& rule) {
  try {
    run_checks(rule);
  } catch (const IllegalCombination& e) {
    return {e.rule(), e.what()};
  } catch (const ConfigError& e) {
    return {std::nullopt, e.what()};
  }
  return {};
}

}  // namespace gdnv::cp
