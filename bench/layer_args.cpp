#include "bench/layer_args.hpp"

#include <iostream>
#include <stdexcept>

#include "core/error.hpp"

namespace gdnv::bench {

namespace {

std::int64_t positive(char** argv, int i) {
  const std::string s = argv[i];
  std::size_t end = 0;
  try {
    const long long v = std::stoll(s, &end);
    if (end == s.size() && v > 0) return v;
  } catch (const std::logic_error&) {  // stoll: not a number, or out of range
  }
  throw ConfigError("argument " + std::to_string(i) + " '" + s +
                    "' is not a positive integer: give the dims and lengths");
}

}  // namespace

LayerArgs parse_layer_args(int argc, char** argv, int first) {
  std::vector<std::int64_t> v;
  for (int i = first; i < argc; ++i) v.push_back(positive(argv, i));
  return {ref::LayerConfig({.hidden_size = v[0],
                            .linear_num_key_heads = v[1],
                            .linear_num_value_heads = v[2],
                            .linear_key_head_dim = v[3],
                            .linear_value_head_dim = v[4]}),
          std::vector<std::int64_t>(v.begin() + 5, v.end())};
}

int run_tool(const char* tool, int (*body)(int, char**), int argc, char** argv) {
  try {
    return body(argc, argv);
  } catch (const Error& e) {
    std::cerr << tool << ": " << e.what() << "\n";
    return 3;
  }
}

}  // namespace gdnv::bench
