#pragma once
// Static CP configuration of a GdnCpLayer and the illegal-combination matrix of docs/DESIGN.md §3.1. Every
// rule is checked before any tensor math or collective; each message names the fix.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "reference/layer_config.hpp"

namespace gdnv::cp {

enum class CpMode { Headwise, Chunkwise, AllGather };
enum class Format { Thd, Sbhd };

// "headwise", "chunkwise", "all_gather"; anything else (including "auto") is a ConfigError.
CpMode parse_mode(std::string_view name);
std::string_view mode_name(CpMode mode);
Format parse_format(std::string_view name);  // "thd" | "sbhd"
std::string_view format_name(Format format);

struct CpConfig {
  CpMode mode = CpMode::Headwise;  // linear_cp_mode, static for the process
  int tp = 1;                      // tensor-parallel size
  int cp = 1;                      // static (maximum) CP size
  std::vector<int> dynamic_cp;     // CP sizes micro-batches may use besides `cp` (each divides it)
  bool deterministic = false;
  bool allgather_cp = false;  // Megatron's all-gather-based CP attention option
  bool inference = false;
};

// Rules that depend on the configuration alone (construction time).
void validate_static(const CpConfig& cp, const ref::LayerConfig& layer);

// What one micro-batch brings: its format and geometry, and how its CP group was given.
struct MicroBatchShape {
  Format format = Format::Thd;
  std::int64_t batch = 1;             // B (THD: must be 1)
  std::vector<std::int64_t> lengths;  // THD: per-sequence lengths; SBHD: {S}
  bool has_cp_group = false;          // a per-micro-batch group was passed
  int local_cp_size = 0;              // 0 = not given
  int group_size = 0;                 // size of the per-micro-batch group when given
};

// Rules for one micro-batch, at the CP size it runs with (the per-micro-batch group's, else the
// static one), which it returns; lengths divisible by 2*cp only when that size is > 1.
int validate_micro_batch(const CpConfig& cp, const ref::LayerConfig& layer, const MicroBatchShape& mb);
// How many times validate_micro_batch has ruled in this process: a test counts the rulings of a run with it.
std::uint64_t micro_batch_rulings();

}  // namespace gdnv::cp
