#include "cli/lists.hpp"

#include <charconv>

#include "core/error.hpp"
#include "cp/illegal.hpp"
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

namespace {

// The options geometry_given looks for: every geometry option but --seed.
constexpr const char* kGeometryOptions[] = {"format",         "lengths",       "seq-len",         "batch",
                                            "hidden",         "num-key-heads", "num-value-heads", "key-head-dim",
                                            "value-head-dim", "conv-width",    "conv-bias",       "gates"};

}  // namespace

void add_geometry_options(boost::program_options::options_description& o) {
  namespace po = boost::program_options;
  // clang-format off
  o.add_options()
      ("format", po::value<std::string>()->default_value("thd"), "thd (packed, --lengths) | sbhd (--seq-len, --batch)")
      ("lengths", po::value<std::vector<std::string>>()->default_value({"128,64"}, "128,64"),
       "THD sequence lengths; with --dynamic-cp once for every micro-batch, or once per micro-batch in its "
       "order, each padded for its own CP size (--lengths 8,40,16 --lengths 4,12 --lengths 5)")
      ("seq-len", po::value<std::int64_t>()->default_value(64), "SBHD sequence length S")
      ("batch", po::value<std::int64_t>()->default_value(1), "SBHD batch B")
      ("hidden", po::value<std::int64_t>()->default_value(64), "hidden_size")
      ("num-key-heads", po::value<std::int64_t>()->default_value(2), "linear_num_key_heads (Hk)")
      ("num-value-heads", po::value<std::int64_t>()->default_value(4), "linear_num_value_heads (Hv)")
      ("key-head-dim", po::value<std::int64_t>()->default_value(16), "linear_key_head_dim (dk)")
      ("value-head-dim", po::value<std::int64_t>()->default_value(16), "linear_value_head_dim (dv)")
      ("conv-width", po::value<std::int64_t>()->default_value(4), "linear_conv_kernel_dim (W)")
      ("conv-bias", po::bool_switch(), "the conv1d has a bias (conv1d.bias)")
      ("seed", po::value<std::uint64_t>()->default_value(0), "seed of parameters and inputs")
      ("gates", po::value<std::string>()->default_value("default"),
       "decay regime of the gates: default (A in [1,16]) | weak (g ~ 0) | strong (A in [8,32]) | extreme (every "
       "op at the edge of its range: a + dt_bias +-1e3, A 1e3, beta logits +-50, zero and 1e-30 q/k rows, hidden "
       "rows of 0 and 1e4)");
  // clang-format on
}

bool geometry_given(const boost::program_options::variables_map& vm) {
  for (const char* name : kGeometryOptions)
    if (vm.count(name) && !vm[name].defaulted()) return true;
  return false;
}

harness::RunSpec geometry_spec(const boost::program_options::variables_map& vm) {
  harness::RunSpec s;
  s.layer = layer_values(vm);
  s.layer.conv_bias = vm["conv-bias"].as<bool>();
  s.format = cp::parse_format(vm["format"].as<std::string>());
  s.seq_len = vm["seq-len"].as<std::int64_t>();
  s.batch = vm["batch"].as<std::int64_t>();
  s.seed = vm["seed"].as<std::uint64_t>();
  s.gates = harness::parse_gate_regime(vm["gates"].as<std::string>());
  if (s.format == cp::Format::Sbhd) {
    if (s.seq_len < 1 || s.batch < 1)
      throw ConfigError(
          "--seq-len " + std::to_string(s.seq_len) + " --batch " + std::to_string(s.batch) +
          ": SBHD needs at least one token in each of at least one sequence, e.g. --seq-len 64 --batch 1");
    return s;
  }
  const auto& lists = vm["lengths"].as<std::vector<std::string>>();
  for (const auto& list : lists) {
    auto lengths = parse_int_list(list, "--lengths", "256,128");
    std::int64_t tokens = 0;
    for (auto L : lengths) {
      if (L < 0)
        throw ConfigError("--lengths " + list + ": a sequence length is negative; give token counts like 40,200,16");
      tokens += L;
    }
    if (tokens == 0) throw ConfigError("--lengths " + list + " holds no token: give token counts like 40,200,16");
    if (lists.size() == 1) s.lengths = std::move(lengths);
    else s.micro_batch_lengths.push_back(std::move(lengths));
  }
  return s;
}

cp::CpConfig cp_flags(const boost::program_options::variables_map& vm) {
  cp::CpConfig c;
  c.tp = vm["tp"].as<int>();
  c.deterministic = vm["deterministic"].as<bool>();
  c.allgather_cp = vm["allgather-cp"].as<bool>();
  c.inference = vm["inference"].as<bool>();
  return c;
}

namespace {

// An illegal combination's fix in this CLI's flags, for the rules the flags can reach ("" for the others).
std::string cli_fix(cp::Rule rule) {
  switch (rule) {
    case cp::Rule::HeadwiseHeadsNotDivisibleByTpCp:
      return "--mode chunkwise or all_gather, or a smaller --tp x --cp";
    case cp::Rule::ChunkwiseWithAllgatherCp:
      return "drop --allgather-cp, or --mode all_gather";
    case cp::Rule::ChunkwiseDeterministicWithCp:
    case cp::Rule::ChunkwiseDeterministicWithDynamicCp:
    case cp::Rule::AllGatherDeterministic:
      return "--mode headwise, or drop --deterministic";
    case cp::Rule::InferenceNotHeadwise:
      return "--mode headwise, or drop --inference";
    case cp::Rule::AllGatherSbhdWithCp:
      return "--format thd, or --mode headwise or chunkwise";
    case cp::Rule::ChunkwiseSbhdBatch:
      return "--format thd or --batch 1, or --mode headwise";
    default:
      return "";
  }
}

}  // namespace

std::string in_cli_flags(const ConfigError& e) {
  const auto* illegal = dynamic_cast<const cp::IllegalCombination*>(&e);
  const std::string fix = illegal ? cli_fix(illegal->rule()) : "";
  return e.what() + (fix.empty() ? "" : " (in gdn-verify's flags: " + fix + ")");
}

}  // namespace gdnv::cli
