// make_layer_file OUT.safetensors HIDDEN HK HV DK DV LEN...: a layer-level input file (docs/DESIGN.md §5)
// for `gdn-verify reference --in`, THD with the given sequence lengths packed, Megatron's initial
// parameters, hidden_states and grad_output ~ N(0, 1), all seeded 0. For the oracle's scale benchmarks:
//   make_layer_file layer.safetensors 4096 16 32 128 128 1024 2048 1024
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "reference/layer_io.hpp"

int main(int argc, char** argv) {
  using namespace gdnv;
  if (argc < 8) {
    std::cerr << "usage: make_layer_file OUT.safetensors HIDDEN HK HV DK DV LEN...\n";
    return 3;
  }
  const auto arg = [&](int i) { return std::stoll(argv[i]); };
  const ref::LayerConfig config({.hidden_size = arg(2),
                                 .linear_num_key_heads = arg(3),
                                 .linear_num_value_heads = arg(4),
                                 .linear_key_head_dim = arg(5),
                                 .linear_value_head_dim = arg(6)});
  std::vector<std::int64_t> cu{0};
  for (int i = 7; i < argc; ++i) cu.push_back(cu.back() + arg(i));
  const std::int64_t T = cu.back();
  ref::LayerCase c{config, ref::init_params(config, 0), ref::seeded_normal(0, "hidden_states", {T, 1, arg(2)}), cu,
                   ref::seeded_normal(0, "grad_output", {T, 1, arg(2)})};
  write_safetensors(argv[1], ref::write_layer_case(c));
  std::cout << "wrote " << argv[1] << ": T = " << T << ", " << cu.size() - 1 << " sequences\n";
  return 0;
}
