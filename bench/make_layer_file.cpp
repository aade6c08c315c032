// make_layer_file OUT.safetensors HIDDEN HK HV DK DV LEN...: a layer-level input file (docs/DESIGN.md §5)
// for `gdn-verify reference --in`, THD with the given sequence lengths packed, Megatron's initial
// parameters, hidden_states and grad_output ~ N(0, 1), all seeded 0. For the oracle's scale benchmarks:
//   make_layer_file layer.safetensors 4096 16 32 128 128 1024 2048 1024
#include <iostream>
#include <vector>

#include "bench/layer_args.hpp"
#include "core/safetensors.hpp"
#include "reference/layer_io.hpp"

namespace {

int make_layer_file(int argc, char** argv) {
  using namespace gdnv;
  if (argc < 8) {
    std::cerr << "usage: make_layer_file OUT.safetensors HIDDEN HK HV DK DV LEN...\n";
    return 3;
  }
  const bench::LayerArgs args = bench::parse_layer_args(argc, argv, 2);
  std::vector<std::int64_t> cu{0};
  for (const std::int64_t length : args.lengths) cu.push_back(cu.back() + length);
  const std::int64_t T = cu.back(), hidden = args.config.hidden();
  ref::LayerCase c{args.config, ref::init_params(args.config, 0),
                   ref::seeded_normal(0, "hidden_states", {T, 1, hidden}), cu,
                   ref::seeded_normal(0, "grad_output", {T, 1, hidden})};
  write_safetensors(argv[1], ref::write_layer_case(c));
  std::cout << "wrote " << argv[1] << ": T = " << T << ", " << cu.size() - 1 << " sequences\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return gdnv::bench::run_tool("make_layer_file", make_layer_file, argc, argv); }
