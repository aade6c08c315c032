#include "cli/lists.hpp"

#include <charconv>

#include "core/error.hpp"
#include "cpu/backend.hpp"
#include "gpu/cuda_plugin.hpp"
#include "gpu/kernel_backend.hpp"

namespace gdnv::cli {

std::vector<std::int64_t> parse_int_list(const std::string& text, const std::string& option,
                                         const std::string& example) {
  std::vector<std::int64_t> values;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    const std::size_t comma = std::min(text.find(',', begin), text.size());
    std::int64_t v = 0;
    const char* first = text.data() + begin;
    const char* last = text.data() + comma;
    const auto res = std::from_chars(first, last, v);
    if (first == last || res.ec != std::errc() || res.ptr != last)
      throw ConfigError(option + ": '" + text.substr(begin, comma - begin) +
                        "' is not an integer; give a comma-separated list like " + example);
    values.push_back(v);
    begin = comma + 1;
  }
  return values;
}

std::vector<OutputPath> output_options(const boost::program_options::variables_map& vm,
                                       std::initializer_list<const char*> names) {
  std::vector<OutputPath> outputs;
  for (const char* name : names)
    if (vm.count(name)) outputs.push_back({std::string("--") + name, vm[name].as<std::string>()});
  return outputs;
}

cp::BackendFactory parse_backend_option(const std::string& name) {
  if (name == "cpu") return cpu::make_backend;
  if (name == "emu") return gpu::make_emulated_backend;
  if (name != "cuda") throw ConfigError("--backend '" + name + "' is not supported: use cpu, emu or cuda");
  const gpu::CudaPlugin& cuda = gpu::cuda_plugin();
  if (!cuda.api) throw ConfigError("--backend cuda: " + cuda.problem + "; " + cuda.fix + ", or use --backend cpu");
  if (const std::string reason = cuda.api->unavailable_reason(); !reason.empty())
    throw ConfigError("--backend cuda: no CUDA device: " + reason +
                      "; run on a machine with an NVIDIA GPU and driver (and a CUDA build), or use --backend cpu");
  return cuda.api->make_backend;
}

ref::LayerConfig::Values layer_values(const boost::program_options::variables_map& vm) {
  ref::LayerConfig::Values v;
  v.hidden_size = vm["hidden"].as<std::int64_t>();
  v.linear_num_key_heads = vm["num-key-heads"].as<std::int64_t>();
  v.linear_num_value_heads = vm["num-value-heads"].as<std::int64_t>();
  v.linear_key_head_dim = vm["key-head-dim"].as<std::int64_t>();
  v.linear_value_head_dim = vm["value-head-dim"].as<std::int64_t>();
  v.linear_conv_kernel_dim = vm["conv-width"].as<std::int64_t>();
  return v;
}

cp::CpConfig cp_flags(const boost::program_options::variables_map& vm) {
  cp::CpConfig c;
  c.tp = vm["tp"].as<int>();
  c.deterministic = vm["deterministic"].as<bool>();
  c.allgather_cp = vm["allgather-cp"].as<bool>();
  c.inference = vm["inference"].as<bool>();
  return c;
}

}  // namespace gdnv::cli
