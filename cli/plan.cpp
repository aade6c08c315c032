// gdn-verify plan: the cost of each CP mode for a geometry the user may not be able to run, from the
// per-mode cost models (cost/cost.hpp, exact for collectives) and a roofline over a hardware profile
// (cost/roofline.hpp); which modes are legal, with run's messages; optionally over a grid of CP sizes
// and sequence lengths, as CSV and as a gnuplot SVG of time per layer against sequence length.
#include <algorithm>
#include <charconv>
#include <filesystem>
#include <ostream>
#include <sstream>

#include "cli/command.hpp"
#include "cli/lists.hpp"
#include "core/file.hpp"
#include "cost/plan_report.hpp"
#include "cost/roofline.hpp"
#include "harness/world.hpp"

namespace gdnv::cli {
namespace {

using cp::CpMode;
using cp::Format;
using Row = cost::PlanRow;

constexpr CpMode kModes[] = {CpMode::Headwise, CpMode::Chunkwise, CpMode::AllGather};

po::options_description plan_options() {
  po::options_description o("plan options");
  // clang-format off
  o.add_options()
      ("hidden", po::value<std::int64_t>()->required(), "hidden_size")
      ("num-key-heads", po::value<std::int64_t>()->required(), "linear_num_key_heads (Hk)")
      ("num-value-heads", po::value<std::int64_t>()->required(), "linear_num_value_heads (Hv)")
      ("key-head-dim", po::value<std::int64_t>()->required(), "linear_key_head_dim (dk)")
      ("value-head-dim", po::value<std::int64_t>()->required(), "linear_value_head_dim (dv)")
      ("conv-width", po::value<std::int64_t>()->default_value(4), "linear_conv_kernel_dim")
      ("tp", po::value<int>()->required(), "tensor-parallel size")
      ("cp", po::value<int>()->required(), "static CP size")
      ("format", po::value<std::string>()->default_value("thd"), "thd (packed sequences) | sbhd (--seq-len, --batch)")
      ("lengths", po::value<std::vector<std::string>>(),
       "THD sequence lengths of a micro-batch, e.g. 32768 or 8192,8192,16384; with --dynamic-cp once for every "
       "micro-batch, or once per micro-batch in its order, each padded for its own CP size")
      ("length-dist", po::value<std::string>(), "THD: a file of 'LENGTH [COUNT]' lines, the micro-batch's sequences")
      ("seq-len", po::value<std::int64_t>(), "SBHD sequence length S")
      ("batch", po::value<std::int64_t>()->default_value(1), "SBHD batch B")
      ("dynamic-cp", po::value<std::string>(), "one micro-batch per listed CP size, e.g. 1,2,4 (divisors of --cp)")
      ("mode", po::value<std::string>(), "only this linear_cp_mode: headwise | chunkwise | all_gather (an illegal one is an error, as in run)")
      ("layers", po::value<int>()->default_value(1), "GDN layers per model (scales time and activations)")
      ("dtype", po::value<std::string>()->default_value("bf16"), "storage dtype: bf16 | fp32 | fp64")
      ("hw", po::value<std::string>()->default_value("h200"), "hardware profile: h200, or a JSON file of overrides")
      ("sweep", po::value<std::vector<std::string>>()->composing(),
       "a grid axis: cp=1,2,4,8 or seq=4k..128k (doubling; k = 1024); repeat for several axes")
      ("csv", po::value<std::string>(), "write every row to FILE as CSV")
      ("svg", po::value<std::string>(), "plot predicted time per layer against sequence length to FILE (gnuplot)")
      ("deterministic", po::bool_switch(), "request deterministic mode (validation matrix)")
      ("allgather-cp", po::bool_switch(), "request allgather_cp (validation matrix)")
      ("inference", po::bool_switch(), "request inference (validation matrix)");
  // clang-format on
  return o;
}

// "LENGTH [COUNT]" lines; blank lines and '#' comments skipped.
std::vector<std::int64_t> read_length_dist(const std::string& path) {
  if (!std::filesystem::is_regular_file(path))
    throw ConfigError("--length-dist " + path + ": no such file: write one 'LENGTH [COUNT]' line per sequence length");
  std::istringstream in(read_file_text(path));
  std::vector<std::int64_t> lengths;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    line = line.substr(0, line.find('#'));
    std::istringstream fields(line);
    std::int64_t length = 0, count = 1;
    std::string extra;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (!(fields >> length) || (!(fields >> count) && !fields.eof()) || (fields >> extra) || length < 0 || count < 1)
      throw ConfigError("--length-dist " + path + ":" + std::to_string(n) + ": '" + line +
                        "' is not 'LENGTH [COUNT]' (a length >= 0, a count >= 1)");
    lengths.insert(lengths.end(), static_cast<std::size_t>(count), length);
  }
  if (lengths.empty()) throw ConfigError("--length-dist " + path + ": no lengths: write 'LENGTH [COUNT]' lines");
  return lengths;
}

// "4096", "4k" (x1024), "1m" (x1024^2).
std::int64_t parse_size(const std::string& text, const std::string& option) {
  std::int64_t v = 0;
  const char* end = text.data() + text.size();
  const auto res = std::from_chars(text.data(), end, v);
  std::int64_t scale = 1;
  if (res.ptr + 1 == end && (*res.ptr == 'k' || *res.ptr == 'K')) scale = 1024;
  else if (res.ptr + 1 == end && (*res.ptr == 'm' || *res.ptr == 'M')) scale = 1024 * 1024;
  else if (res.ptr != end) v = 0;
  if (res.ec != std::errc() || v <= 0)
    throw ConfigError(option + ": '" + text + "' is not a positive size: write e.g. 4096, 4k or 1m");
  return v * scale;
}

// "a..b" doubles from a up to b; otherwise a comma list.
std::vector<std::int64_t> parse_axis(const std::string& values, const std::string& option) {
  std::vector<std::int64_t> out;
  if (const auto dots = values.find(".."); dots != std::string::npos) {
    const std::int64_t lo = parse_size(values.substr(0, dots), option),
                       hi = parse_size(values.substr(dots + 2), option);
    if (hi < lo) throw ConfigError(option + ": range '" + values + "' ends below its start: write LOW..HIGH");
    for (std::int64_t v = lo; v <= hi; v *= 2) out.push_back(v);
    return out;
  }
  std::size_t begin = 0;
  while (begin <= values.size()) {
    const std::size_t comma = std::min(values.find(',', begin), values.size());
    out.push_back(parse_size(values.substr(begin, comma - begin), option));
    begin = comma + 1;
  }
  return out;
}

struct Grid {
  std::vector<int> cps;
  std::vector<std::int64_t> seqs;  // empty: the lengths given
};

Grid parse_grid(const po::variables_map& vm) {
  Grid grid{{vm["cp"].as<int>()}, {}};
  if (!vm.count("sweep")) return grid;
  for (const std::string& axis : vm["sweep"].as<std::vector<std::string>>()) {
    const auto eq = axis.find('=');
    const std::string key = axis.substr(0, eq == std::string::npos ? axis.size() : eq);
    const std::string option = "--sweep " + axis;
    if (eq == std::string::npos || (key != "cp" && key != "seq"))
      throw ConfigError(option + ": expected cp=LIST or seq=LIST, e.g. --sweep cp=1,2,4,8 --sweep seq=4k..128k");
    const auto values = parse_axis(axis.substr(eq + 1), option);
    if (key == "seq") grid.seqs = values;
    else grid.cps.assign(values.begin(), values.end());
  }
  return grid;
}

// --lengths once (every micro-batch's packing) or once per --dynamic-cp entry (each micro-batch's own).
void read_lengths(const po::variables_map& vm, harness::RunSpec& s) {
  const auto& lists = vm["lengths"].as<std::vector<std::string>>();
  const std::size_t micro_batches =
      vm.count("dynamic-cp") ? parse_int_list(vm["dynamic-cp"].as<std::string>(), "--dynamic-cp", "1,2,4").size() : 1;
  if (lists.size() > 1 && lists.size() != micro_batches)
    throw ConfigError("--lengths given " + std::to_string(lists.size()) + " times for " +
                      std::to_string(micro_batches) + " micro-batch(es)" +
                      (vm.count("dynamic-cp") ? " (--dynamic-cp " + vm["dynamic-cp"].as<std::string>() + ")" : "") +
                      ": give one --lengths for every micro-batch, or one per --dynamic-cp entry in its order");
  if (lists.size() > 1 && vm.count("sweep"))
    for (const std::string& axis : vm["sweep"].as<std::vector<std::string>>())
      if (axis.rfind("seq=", 0) == 0)
        throw ConfigError("--sweep " + axis + " gives every micro-batch one sequence: drop it, or give one --lengths");
  for (const auto& list : lists) {
    auto lengths = parse_int_list(list, "--lengths", "32768");
    if (lists.size() == 1) s.lengths = std::move(lengths);
    else s.micro_batch_lengths.push_back(std::move(lengths));
  }
}

harness::RunSpec base_spec(const po::variables_map& vm, bool seq_sweep) {
  harness::RunSpec s;
  s.layer = layer_values(vm);
  s.cp = cp_flags(vm);
  s.dtype = parse_dtype_option(vm["dtype"].as<std::string>());
  s.format = cp::parse_format(vm["format"].as<std::string>());
  s.batch = vm["batch"].as<std::int64_t>();
  if (vm.count("lengths") && vm.count("length-dist"))
    throw ConfigError("both --lengths and --length-dist given: use one of them");
  if (s.format == Format::Thd) {
    if (vm.count("lengths")) read_lengths(vm, s);
    else if (vm.count("length-dist")) s.lengths = read_length_dist(vm["length-dist"].as<std::string>());
    else if (!seq_sweep)
      throw ConfigError("no sequence lengths: give --lengths 32768, --length-dist FILE, or --sweep seq=4k..128k");
  } else if (vm.count("seq-len")) {
    s.seq_len = vm["seq-len"].as<std::int64_t>();
  } else if (!seq_sweep) {
    throw ConfigError("SBHD input needs --seq-len S (or --sweep seq=4k..128k)");
  }
  if (vm.count("dynamic-cp"))
    for (auto c : parse_int_list(vm["dynamic-cp"].as<std::string>(), "--dynamic-cp", "1,2,4")) {
      s.cp.dynamic_cp.push_back(static_cast<int>(c));
      s.micro_batches.push_back(static_cast<int>(c));
    }
  return s;
}

std::vector<Row> plan_point(const harness::RunSpec& spec, const cost::HardwareProfile& hw) {
  std::vector<Row> rows;
  std::vector<cost::CostGeometry> geometries;
  Row base{spec.cp.cp, spec.cp.cp, 0, 0, spec.cp.mode, "", 0, {}, {}, {}};
  base.tokens = spec.format == Format::Thd ? 0 : spec.seq_len * spec.batch;
  for (auto L : harness::lengths_of(spec, 0)) base.tokens += L;
  try {
    geometries = harness::planned_micro_batches(spec);
  } catch (const ConfigError& e) {
    base.illegal = in_cli_flags(e);
    return {base};
  }
  for (std::size_t m = 0; m < geometries.size(); ++m) {
    Row best = base;
    best.micro_batch = static_cast<int>(m);
    best.mb_cp = geometries[m].cp_size;
    best.tokens = geometries[m].cu.back();
    bool first = true;
    for (int w = 0; w < spec.cp.tp * spec.cp.cp; ++w) {
      Row r = best;
      r.world_rank = w;
      r.cost = cost::layer_cost(geometries[m], harness::place_of(spec, w, r.mb_cp));
      r.fwd = cost::phase_time(r.cost.forward, hw, spec.dtype, spec.cp.tp, r.mb_cp);
      r.bwd = cost::phase_time(r.cost.backward, hw, spec.dtype, spec.cp.tp, r.mb_cp);
      if (first || r.total_s() > best.total_s()) best = r;
      first = false;
    }
    rows.push_back(best);
  }
  return rows;
}

}  // namespace

int plan_main(const std::vector<std::string>& args, std::ostream& out) {
  const auto vm = parse_options("plan",
                                "--hidden N --num-key-heads N ... --tp T --cp W (--lengths L,... | "
                                "--length-dist FILE | --sweep seq=...) [options]",
                                plan_options(), {}, args, out);
  if (!vm) return kPass;
  std::vector<std::string> inputs;
  for (const char* file : {"hw", "length-dist"})
    if (vm->count(file)) inputs.push_back((*vm)[file].as<std::string>());
  check_outputs(output_options(*vm, {"csv", "svg"}), inputs);
  const Grid grid = parse_grid(*vm);
  const harness::RunSpec base = base_spec(*vm, !grid.seqs.empty());
  const cost::HardwareProfile hw = cost::load_hardware((*vm)["hw"].as<std::string>());
  const int layers = (*vm)["layers"].as<int>();
  if (layers < 1) throw ConfigError("--layers " + std::to_string(layers) + " is invalid: give at least 1 layer");
  std::vector<CpMode> modes(std::begin(kModes), std::end(kModes));
  if (vm->count("mode")) modes = {cp::parse_mode((*vm)["mode"].as<std::string>())};
  const bool sweep = grid.cps.size() > 1 || !grid.seqs.empty();

  std::vector<Row> rows;
  for (int c : grid.cps)
    for (std::size_t s = 0; s < std::max<std::size_t>(1, grid.seqs.size()); ++s)
      for (CpMode mode : modes) {
        harness::RunSpec spec = base;
        spec.cp.cp = c;
        spec.cp.mode = mode;
        if (!grid.seqs.empty()) {
          if (spec.format == Format::Thd) spec.lengths = {grid.seqs[s]};
          else spec.seq_len = grid.seqs[s];
        }
        for (Row& r : plan_point(spec, hw)) rows.push_back(std::move(r));
      }
  // One mode asked for and illegal: the error run gives.
  if (vm->count("mode") && !sweep && !rows.front().illegal.empty()) throw ConfigError(rows.front().illegal);

  const ref::LayerConfig L(base.layer);
  out << "gdn-verify plan: hidden=" << L.hidden() << " Hk=" << L.Hk() << " Hv=" << L.Hv() << " dk=" << L.dk()
      << " dv=" << L.dv() << " conv=" << L.W() << " tp=" << base.cp.tp << " cp=" << (*vm)["cp"].as<int>()
      << " dtype=" << (*vm)["dtype"].as<std::string>() << " layers=" << layers << " hw=" << hw.name << " ("
      << hw.gpus_per_node << " GPUs per node)\n"
      << "per rank (the busiest), per layer and micro-batch; bytes are those a rank sends\n";
  if (sweep) {
    cost::print_plan_sweep(rows, out);
  } else {
    for (int m = 0, n = static_cast<int>(std::max<std::size_t>(1, base.micro_batches.size())); m < n; ++m) {
      std::vector<Row> of_mb;
      for (const Row& r : rows)
        if (r.micro_batch == m || !r.illegal.empty()) of_mb.push_back(r);
      const Row& any = of_mb.front();
      const std::vector<std::int64_t>& lengths = harness::lengths_of(base, static_cast<std::size_t>(m));
      std::int64_t tokens = base.format == Format::Thd ? 0 : base.seq_len * base.batch;
      for (auto length : lengths) tokens += length;
      out << "micro-batch " << m + 1 << "/" << n
          << ": cp=" << (base.micro_batches.empty() ? any.cp : base.micro_batches[m]) << ", " << tokens << " tokens ("
          << (base.format == Format::Thd
                  ? std::to_string(lengths.size()) + (lengths.size() == 1 ? " sequence" : " packed sequences") + ", THD"
                  : "SBHD " + std::to_string(base.seq_len) + " x " + std::to_string(base.batch))
          << ")\n";
      cost::print_plan_table(of_mb, layers, out);
      cost::print_plan_collectives(of_mb, hw, base.cp.tp, out);
    }
  }
  const bool any_legal = std::any_of(rows.begin(), rows.end(), [](const Row& r) { return r.illegal.empty(); });
  if (!any_legal)
    throw ConfigError("no linear_cp_mode is legal for this geometry: change it as the messages above say");
  const std::string svg = vm->count("svg") ? cost::plan_svg(rows, (*vm)["svg"].as<std::string>()) : "";
  std::vector<std::pair<std::string, std::string>> files;
  if (vm->count("csv")) files.emplace_back((*vm)["csv"].as<std::string>(), cost::plan_csv(rows, base.cp.tp));
  if (vm->count("svg")) files.emplace_back((*vm)["svg"].as<std::string>(), svg);
  write_files_atomic(files);
  for (const char* file : {"csv", "svg"})
    if (vm->count(file)) out << "wrote " << (*vm)[file].as<std::string>() << "\n";
  return kPass;
}

}  // namespace gdnv::cli
