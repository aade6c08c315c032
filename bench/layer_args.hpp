#pragma once
// The arguments layer_roofline and make_layer_file share (HIDDEN HK HV DK DV LEN...), and their bad-input
// rule (docs/DESIGN.md §12): one line naming what is wrong and how to fix it, exit code 3.
#include <cstdint>
#include <string>
#include <vector>

#include "reference/layer_config.hpp"

namespace gdnv::bench {

struct LayerArgs {
  ref::LayerConfig config;
  std::vector<std::int64_t> lengths;
};

// argv[first .. first + 4] as the dims, the rest as sequence lengths (the caller checks there are some);
// throws ConfigError naming the first argument that is not a positive integer, or the geometry LayerConfig
// refuses.
LayerArgs parse_layer_args(int argc, char** argv, int first);

// Runs body(); a gdnv::Error it throws is printed as "<tool>: <message>" and gives exit code 3.
int run_tool(const char* tool, int (*body)(int, char**), int argc, char** argv);

}  // namespace gdnv::bench
