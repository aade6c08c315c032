// gdn-verify plan: the cost of each CP mode for a geometry the user may not be able to run, from the
// per-mode cost models (cost/cost.hpp, exact for collectives) and a roofline over a hardware profile
// (cost/roofline.hpp); which modes are legal, with run's messages; optionally over a grid of CP sizes
// and sequence lengths, as CSV and as a gnuplot SVG of time per layer against sequence length.
#include <algorithm>
#include <charconv>
#include <filesystem>
#include <iomanip>
#include <ostream>
#include <sstream>
#include <tuple>

#include "cli/command.hpp"
#include "cli/lists.hpp"
#include "core/file.hpp"
#include "core/gnuplot.hpp"
#include "cost/roofline.hpp"
#include "harness/world.hpp"

namespace gdnv::cli {
namespace {

using cp::CpMode;
using cp::Format;

constexpr CpMode kModes[] = {CpMode::Headwise, CpMode::Chunkwise, CpMode::AllGather};
constexpr Collective kKinds[] = {Collective::AllToAllV, Collective::AllGather, Collective::ReduceScatter,
                                 Collective::AllReduce};

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

// One mode at one grid point and micro-batch: the busiest rank's cost, or why the mode is illegal.
struct Row {
  int cp = 0, mb_cp = 0, micro_batch = 0;
  std::int64_t tokens = 0;
  CpMode mode{};
  std::string illegal;  // run's message; empty when legal
  int world_rank = 0;
  cost::RankCost cost;
  cost::PhaseTime fwd, bwd;
  double total_s() const { return fwd.total() + bwd.total(); }
};

std::vector<Row> plan_point(const harness::RunSpec& spec, const cost::HardwareProfile& hw) {
  std::vector<Row> rows;
  std::vector<cost::CostGeometry> geometries;
  Row base{spec.cp.cp, spec.cp.cp, 0, 0, spec.cp.mode, "", 0, {}, {}, {}};
  base.tokens = spec.format == Format::Thd ? 0 : spec.seq_len * spec.batch;
  for (auto L : harness::lengths_of(spec, 0)) base.tokens += L;
  try {
    geometries = harness::planned_micro_batches(spec);
  } catch (const ConfigError& e) {
    base.illegal = e.what();
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

std::string fixed(double v, int digits) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(digits) << v;
  return s.str();
}

double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

std::string traffic_cell(const Traffic& t) {
  return t.calls ? std::to_string(t.calls) + " x " + fixed(mib(static_cast<double>(t.bytes_sent)), 2) + " MiB" : "-";
}

// nccl-tests' columns for the busiest rank's collectives, per mode, direction, kind and group: calls, the
// bytes the time model charges (the larger of sent and received, summed over the calls), the modeled
// time, algbw = bytes / time and busbw = algbw x the kind's bus factor (cost/roofline.hpp).
void print_collectives(const std::vector<Row>& rows, const cost::HardwareProfile& hw, int tp, std::ostream& out) {
  out << "collectives of that rank (nccl-tests columns: algbw = bytes / time, busbw = algbw x 2(n-1)/n for "
         "all_reduce, x (n-1)/n otherwise)\n"
      << std::left << std::setw(12) << "mode" << std::setw(5) << "dir" << std::setw(16) << "collective" << std::setw(7)
      << "group" << std::right << std::setw(6) << "ranks" << std::setw(7) << "calls" << std::setw(14) << "bytes"
      << std::setw(11) << "time us" << std::setw(12) << "algbw GB/s" << std::setw(12) << "busbw GB/s"
      << "\n";
  for (const Row& r : rows) {
    if (!r.illegal.empty()) continue;
    for (int dir = 0; dir < 2; ++dir) {
      const cost::PhaseCost& p = dir ? r.cost.backward : r.cost.forward;
      std::vector<std::tuple<Collective, cost::Group, int>> keys;
      for (const auto& c : p.calls)
        if (std::find(keys.begin(), keys.end(), std::tuple{c.kind, c.group, c.size}) == keys.end())
          keys.emplace_back(c.kind, c.group, c.size);
      for (const auto& [kind, group, size] : keys) {
        int calls = 0;
        double bytes = 0, seconds = 0;
        for (const auto& c : p.calls)
          if (c.kind == kind && c.group == group && c.size == size) {
            ++calls;
            bytes += static_cast<double>(std::max(c.sent, c.recv));
            seconds += cost::call_time(c, hw, tp, r.mb_cp);
          }
        const double algbw = seconds > 0 ? bytes / seconds / 1e9 : 0;
        out << std::left << std::setw(12) << cp::mode_name(r.mode) << std::setw(5) << (dir ? "bwd" : "fwd")
            << std::setw(16) << collective_name(kind) << std::setw(7) << (group == cost::Group::Tp ? "tp" : "cp")
            << std::right << std::setw(6) << size << std::setw(7) << calls << std::setw(14)
            << static_cast<std::int64_t>(bytes) << std::setw(11) << fixed(seconds * 1e6, 1) << std::setw(12)
            << fixed(algbw, 2) << std::setw(12) << fixed(algbw * cost::bus_factor(kind, size), 2) << "\n";
      }
    }
  }
}

void print_table(const std::vector<Row>& rows, int layers, std::ostream& out) {
  out << std::left << std::setw(12) << "mode" << std::setw(5) << "dir";
  for (Collective k : kKinds) out << std::setw(18) << collective_name(k);
  out << std::right << std::setw(6) << "syncs" << std::setw(11) << "GFLOP" << std::setw(10) << "act MiB"
      << std::setw(10) << "comm ms" << std::setw(12) << "compute ms" << std::setw(10) << "total ms"
      << "\n";
  for (const Row& r : rows) {
    const std::string mode(cp::mode_name(r.mode));
    if (!r.illegal.empty()) {
      out << std::left << std::setw(12) << mode << "illegal: " << r.illegal << "\n";
      continue;
    }
    for (int dir = 0; dir < 2; ++dir) {
      const cost::PhaseCost& p = dir ? r.cost.backward : r.cost.forward;
      const cost::PhaseTime& t = dir ? r.bwd : r.fwd;
      out << std::left << std::setw(12) << mode << std::setw(5) << (dir ? "bwd" : "fwd");
      for (Collective k : kKinds) out << std::setw(18) << traffic_cell(p.comm[k]);
      out << std::right << std::setw(6) << p.comm.host_syncs << std::setw(11) << fixed(p.flops() / 1e9, 1)
          << std::setw(10) << (dir ? "-" : fixed(mib(static_cast<double>(r.cost.saved_bytes)), 1)) << std::setw(10)
          << fixed(t.comm_s * 1e3, 3) << std::setw(12) << fixed(t.compute_s * 1e3, 3) << std::setw(10)
          << fixed(t.total() * 1e3, 3) << "\n";
    }
  }
  const Row* fastest = nullptr;
  for (const Row& r : rows)
    if (r.illegal.empty() && (!fastest || r.total_s() < fastest->total_s())) fastest = &r;
  if (!fastest) return;
  out << "fastest: " << cp::mode_name(fastest->mode) << ", " << fixed(fastest->total_s() * 1e3, 3)
      << " ms per layer fwd+bwd; " << layers << " layer" << (layers == 1 ? "" : "s") << ": "
      << fixed(fastest->total_s() * 1e3 * layers, 3) << " ms, activations "
      << fixed(mib(static_cast<double>(fastest->cost.saved_bytes)) * layers / 1024.0, 3) << " GiB per rank\n";
}

void print_sweep(const std::vector<Row>& rows, std::ostream& out) {
  out << std::right << std::setw(4) << "cp" << std::setw(6) << "mb cp" << std::setw(9) << "tokens"
      << "  " << std::left << std::setw(12) << "mode" << std::right << std::setw(10) << "fwd ms" << std::setw(10)
      << "bwd ms" << std::setw(10) << "total ms" << std::setw(11) << "GFLOP" << std::setw(10) << "act MiB"
      << std::setw(11) << "comm MiB"
      << "\n";
  for (const Row& r : rows) {
    out << std::right << std::setw(4) << r.cp << std::setw(6) << r.mb_cp << std::setw(9) << r.tokens << "  "
        << std::left << std::setw(12) << cp::mode_name(r.mode) << std::right;
    if (!r.illegal.empty()) {
      out << "illegal: " << r.illegal << "\n";
      continue;
    }
    const double sent = static_cast<double>(r.cost.forward.comm.bytes_sent() + r.cost.backward.comm.bytes_sent());
    out << std::setw(10) << fixed(r.fwd.total() * 1e3, 3) << std::setw(10) << fixed(r.bwd.total() * 1e3, 3)
        << std::setw(10) << fixed(r.total_s() * 1e3, 3) << std::setw(11)
        << fixed((r.cost.forward.flops() + r.cost.backward.flops()) / 1e9, 1) << std::setw(10)
        << fixed(mib(static_cast<double>(r.cost.saved_bytes)), 1) << std::setw(11) << fixed(mib(sent), 1) << "\n";
  }
}

std::string csv_quoted(const std::string& s) {
  std::string q = "\"";
  for (char ch : s) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return q + "\"";
}

std::string csv(const std::vector<Row>& rows, int tp) {
  std::ostringstream out;
  out << "cp,tp,micro_batch,micro_batch_cp,tokens,mode,legal,busiest_world_rank";
  for (const char* dir : {"fwd", "bwd"}) {
    for (Collective k : kKinds)
      out << "," << dir << "_" << collective_name(k) << "_calls," << dir << "_" << collective_name(k) << "_bytes_sent,"
          << dir << "_" << collective_name(k) << "_bytes_recv";
    out << "," << dir << "_host_syncs," << dir << "_flops," << dir << "_hbm_bytes," << dir << "_comm_ms," << dir
        << "_compute_ms";
  }
  out << ",route_builds,saved_activation_bytes,total_ms,message\n";
  for (const Row& r : rows) {
    out << r.cp << "," << tp << "," << r.micro_batch << "," << r.mb_cp << "," << r.tokens << ","
        << cp::mode_name(r.mode) << "," << (r.illegal.empty() ? "true" : "false") << "," << r.world_rank;
    for (int dir = 0; dir < 2; ++dir) {
      const cost::PhaseCost& p = dir ? r.cost.backward : r.cost.forward;
      const cost::PhaseTime& t = dir ? r.bwd : r.fwd;
      for (Collective k : kKinds)
        out << "," << p.comm[k].calls << "," << p.comm[k].bytes_sent << "," << p.comm[k].bytes_recv;
      out << "," << p.comm.host_syncs << "," << p.flops() << "," << p.bytes() << "," << t.comm_s * 1e3 << ","
          << t.compute_s * 1e3;
    }
    out << "," << r.cost.route_builds << "," << r.cost.saved_bytes << "," << r.total_s() * 1e3 << ","
        << csv_quoted(r.illegal) << "\n";
  }
  return out.str();
}

// gnuplot draws one line per (mode, static CP size) of total ms per layer against tokens; returns the
// SVG text (written by the caller, after everything that can fail).
std::string render_svg(const std::vector<Row>& rows, const std::string& path) {
  const GnuplotSvg svg("plan");
  const std::string& data_file = svg.data_file();
  std::ostringstream data, plot;
  std::vector<int> cps;
  for (const Row& r : rows)
    if (std::find(cps.begin(), cps.end(), r.cp) == cps.end()) cps.push_back(r.cp);
  int series = 0;
  for (CpMode mode : kModes)
    for (int cp_size : cps) {
      std::ostringstream points;
      for (const Row& r : rows)
        if (r.mode == mode && r.cp == cp_size && r.illegal.empty() && r.micro_batch == 0)
          points << r.tokens << " " << r.total_s() * 1e3 << "\n";
      if (points.str().empty()) continue;
      data << points.str() << "\n\n";
      plot << (series ? ", " : "plot ") << "'" << data_file << "' index " << series
           << " using 1:2 with linespoints title '" << cp::mode_name(mode) << " cp=" << cp_size << "'";
      ++series;
    }
  return svg.render(data.str(), 960, 600,
                    "set logscale xy 2\nset key left top\nset grid\nset xlabel 'sequence length (tokens per "
                    "micro-batch)'\nset ylabel 'predicted ms per layer, fwd+bwd'\n" +
                        plot.str() + "\n",
                    "--svg " + path);
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
    print_sweep(rows, out);
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
      print_table(of_mb, layers, out);
      print_collectives(of_mb, hw, base.cp.tp, out);
    }
  }
  const bool any_legal = std::any_of(rows.begin(), rows.end(), [](const Row& r) { return r.illegal.empty(); });
  if (!any_legal)
    throw ConfigError("no linear_cp_mode is legal for this geometry: change it as the messages above say");
  const std::string svg = vm->count("svg") ? render_svg(rows, (*vm)["svg"].as<std::string>()) : "";
  std::vector<std::pair<std::string, std::string>> files;
  if (vm->count("csv")) files.emplace_back((*vm)["csv"].as<std::string>(), csv(rows, base.cp.tp));
  if (vm->count("svg")) files.emplace_back((*vm)["svg"].as<std::string>(), svg);
  write_files_atomic(files);
  for (const char* file : {"csv", "svg"})
    if (vm->count(file)) out << "wrote " << (*vm)[file].as<std::string>() << "\n";
  return kPass;
}

}  // namespace gdnv::cli
