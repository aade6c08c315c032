// gdn-verify reference --in IN --out OUT: the fp64 oracle on a kernel-level file (gated delta rule, or the
// causal conv1d when IN holds x and weight) or a layer-level file (GatedDeltaNet layer, when IN holds
// hidden_states), docs/DESIGN.md §5. Forward always; the backward when IN holds do or dy (kernel) or
// grad_output (layer); with --stages (layer files) also the
// layer's named stages, stage::<s> and stage_grad::<s> (docs/DESIGN.md §1.3).
#include <iostream>
#include <ostream>
#include <utility>

#include "cli/command.hpp"
#include "core/file.hpp"
#include "core/progress.hpp"
#include "core/safetensors.hpp"
#include "reference/kernel_io.hpp"
#include "reference/layer_io.hpp"

namespace gdnv::cli {
namespace {

ref::GdrForm parse_form(const std::string& name) {
  if (name == "chunked") return ref::GdrForm::Chunked;
  if (name == "recurrent") return ref::GdrForm::Recurrent;
  throw ConfigError("gdn-verify reference: --form '" + name + "' is not one of chunked, recurrent");
}

int write_result(const TensorFile& result, const std::string& out_path, std::ostream& out) {
  write_safetensors(out_path, result);
  out << "reference: " << result.metadata.at("source") << "\n";
  for (const auto& [name, t] : result.tensors) out << "  " << name << " " << shape_str(t.shape()) << "\n";
  out << "wrote " << out_path << "\n";
  return kPass;
}

}  // namespace

int reference_main(const std::vector<std::string>& args, std::ostream& out) {
  po::options_description options("reference options");
  options.add_options()("in", po::value<std::string>()->required(),
                        "kernel-level input: q k v g beta [initial_state cu_seqlens do dht], or conv1d: x weight "
                        "[bias initial_state cu_seqlens dy dht]; or layer-level: hidden_states, the parameters by "
                        "name [cu_seqlens grad_output], config in metadata")(
      "out", po::value<std::string>()->required(),
      "output, all F64: o final_state [dq dk dv dg dbeta dh0]; conv1d: y final_state [dx dweight dbias dh0]; "
      "or out [grad_hidden grad::<param>]")("form", po::value<std::string>()->default_value("chunked"),
                                            "chunked (WY/UT, the fast oracle) or recurrent (token by token)")(
      "stages", po::bool_switch(),
      "layer-level input only: also write the named stages, stage::<s> [N, ...] and (with grad_output) "
      "stage_grad::<s>, token rows in the order of out")(
      "progress", po::bool_switch(),
      "on stderr, a line when the computation starts and when it ends, also where stderr is no terminal (on a "
      "terminal the elapsed time always ticks while it runs)");
  const auto vm =
      parse_options("reference", "--in IN.safetensors --out OUT.safetensors [--form chunked|recurrent] [--stages]",
                    options, {}, args, out);
  if (!vm) return kPass;
  const std::string in_path = (*vm)["in"].as<std::string>(), out_path = (*vm)["out"].as<std::string>();
  check_outputs({{"--out", out_path}}, {in_path});
  const ref::GdrForm form = parse_form((*vm)["form"].as<std::string>());
  const bool stages = (*vm)["stages"].as<bool>();
  // A real-size layer takes minutes: the terminal sees the time go by (stderr; stdout stays the report),
  // until the result is computed.
  const TensorFile result = [&]() -> TensorFile {
    const Ticker ticker("reference: " + in_path, progress_style((*vm)["progress"].as<bool>()), std::cerr);
    ref::GdrCase c;
    {
      TensorFile input = read_safetensors(in_path);  // freed once the case owns the tensors it needs
      if (ref::is_layer_file(input)) return ref::run_layer_file(std::move(input), in_path, form, stages);
      if (stages)
        throw ConfigError(in_path +
                          ": --stages names the layer's stages and needs a layer-level input (with hidden_states); "
                          "drop --stages for a kernel-level file");
      if (ref::is_conv_file(input)) return ref::run_conv_case(ref::take_conv_case(input, in_path));
      c = ref::take_gdr_case(input, in_path);
    }
    return ref::run_gdr_case(c, form);
  }();
  return write_result(result, out_path, out);
}

}  // namespace gdnv::cli
