#pragma once
// Option values shared by the commands: integer lists, the storage dtype, the backend, the layer geometry.
#include <cstdint>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/file.hpp"
#include "cp/backend.hpp"
#include "cp/cp_config.hpp"
#include "harness/run_spec.hpp"
#include "reference/layer_config.hpp"

namespace gdnv::cli {

// "0,16,40" -> {0, 16, 40}; ConfigError naming `option` and showing `example` on anything else.
std::vector<std::int64_t> parse_int_list(const std::string& text, const std::string& option,
                                         const std::string& example);

// The output options among `names` ("json" -> --json FILE) that were given, for check_outputs.
std::vector<OutputPath> output_options(const boost::program_options::variables_map& vm,
                                       std::initializer_list<const char*> names);

// --backend: "cpu" | "emu" (gpu/'s kernels on host streams) | "cuda" (loads the CUDA plugin,
// gpu/cuda_plugin.hpp). `cuda` without the plugin or a usable device is a ConfigError naming the fix,
// before any case is built.
cp::BackendFactory parse_backend_option(const std::string& name);

// The layer geometry from --hidden, --num-key-heads, --num-value-heads, --key-head-dim,
// --value-head-dim and --conv-width (layernorm epsilon 1e-6, no conv bias).
ref::LayerConfig::Values layer_values(const boost::program_options::variables_map& vm);

// The input geometry options `run` and `probe dump` share, with run's defaults: --format, --lengths
// (repeatable: one list per micro-batch), --seq-len, --batch, layer_values' options, --conv-bias, --gates, --seed.
void add_geometry_options(boost::program_options::options_description& o);
// Whether the command line gave any of them other than --seed (probe dump: a geometry in place of --case).
bool geometry_given(const boost::program_options::variables_map& vm);
// A RunSpec's layer, format, lengths (one list: lengths; several: micro_batch_lengths), seq_len, batch,
// gates and seed from them (mode, CP sizes and dtype are the caller's). ConfigError for an SBHD --seq-len
// or --batch below 1, a negative THD length, or THD lengths without a token.
harness::RunSpec geometry_spec(const boost::program_options::variables_map& vm);

// --tp, --deterministic, --allgather-cp and --inference (mode and CP sizes are the caller's).
cp::CpConfig cp_flags(const boost::program_options::variables_map& vm);

// A bad-input message as the CLI prints it: an illegal combination's (the upstream layer's words, its fix in
// the layer's kwargs, docs/DESIGN.md §3.1) followed by the same fix in this CLI's flags.
std::string in_cli_flags(const ConfigError& e);

}  // namespace gdnv::cli
