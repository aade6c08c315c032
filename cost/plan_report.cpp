#include "cost/plan_report.hpp"

#include <algorithm>
#include <iomanip>
#include <sstream>
#include <tuple>

#include "core/gnuplot.hpp"

namespace gdnv::cost {
namespace {

constexpr cp::CpMode kModes[] = {cp::CpMode::Headwise, cp::CpMode::Chunkwise, cp::CpMode::AllGather};
constexpr comm::Collective kKinds[] = {comm::Collective::AllToAllV, comm::Collective::AllGather,
                                       comm::Collective::ReduceScatter, comm::Collective::AllReduce};

std::string fixed(double v, int digits) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(digits) << v;
  return s.str();
}

double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

std::string traffic_cell(const comm::Traffic& t) {
  return t.calls ? std::to_string(t.calls) + " x " + fixed(mib(static_cast<double>(t.bytes_sent)), 2) + " MiB" : "-";
}

std::string csv_quoted(const std::string& s) {
  std::string q = "\"";
  for (char ch : s) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return q + "\"";
}

}  // namespace

// nccl-tests' columns for the busiest rank's collectives, per mode, direction, kind and group: calls, the
// bytes the time model charges (the larger of sent and received, summed over the calls), the modeled
// time, algbw = bytes / time and busbw = algbw x the kind's bus factor (cost/roofline.hpp).
void print_plan_collectives(const std::vector<PlanRow>& rows, const HardwareProfile& hw, int tp, std::ostream& out) {
  out << "collectives of that rank (nccl-tests columns: algbw = bytes / time, busbw = algbw x 2(n-1)/n for "
         "all_reduce, x (n-1)/n otherwise)\n"
      << std::left << std::setw(12) << "mode" << std::setw(5) << "dir" << std::setw(16) << "collective" << std::setw(7)
      << "group" << std::right << std::setw(6) << "ranks" << std::setw(7) << "calls" << std::setw(14) << "bytes"
      << std::setw(11) << "time us" << std::setw(12) << "algbw GB/s" << std::setw(12) << "busbw GB/s"
      << "\n";
  for (const PlanRow& r : rows) {
    if (!r.illegal.empty()) continue;
    for (int dir = 0; dir < 2; ++dir) {
      const PhaseCost& p = dir ? r.cost.backward : r.cost.forward;
      std::vector<std::tuple<comm::Collective, Group, int>> keys;
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
            seconds += call_time(c, hw, tp, r.mb_cp);
          }
        const double algbw = seconds > 0 ? bytes / seconds / 1e9 : 0;
        out << std::left << std::setw(12) << cp::mode_name(r.mode) << std::setw(5) << (dir ? "bwd" : "fwd")
            << std::setw(16) << comm::collective_name(kind) << std::setw(7) << (group == Group::Tp ? "tp" : "cp")
            << std::right << std::setw(6) << size << std::setw(7) << calls << std::setw(14)
            << static_cast<std::int64_t>(bytes) << std::setw(11) << fixed(seconds * 1e6, 1) << std::setw(12)
            << fixed(algbw, 2) << std::setw(12) << fixed(algbw * bus_factor(kind, size), 2) << "\n";
      }
    }
  }
}

void print_plan_table(const std::vector<PlanRow>& rows, int layers, std::ostream& out) {
  out << std::left << std::setw(12) << "mode" << std::setw(5) << "dir";
  for (comm::Collective k : kKinds) out << std::setw(18) << comm::collective_name(k);
  out << std::right << std::setw(6) << "syncs" << std::setw(11) << "GFLOP" << std::setw(10) << "act MiB"
      << std::setw(10) << "comm ms" << std::setw(12) << "compute ms" << std::setw(10) << "total ms"
      << "\n";
  for (const PlanRow& r : rows) {
    const std::string mode(cp::mode_name(r.mode));
    if (!r.illegal.empty()) {
      out << std::left << std::setw(12) << mode << "illegal: " << r.illegal << "\n";
      continue;
    }
    for (int dir = 0; dir < 2; ++dir) {
      const PhaseCost& p = dir ? r.cost.backward : r.cost.forward;
      const PhaseTime& t = dir ? r.bwd : r.fwd;
      out << std::left << std::setw(12) << mode << std::setw(5) << (dir ? "bwd" : "fwd");
      for (comm::Collective k : kKinds) out << std::setw(18) << traffic_cell(p.comm[k]);
      out << std::right << std::setw(6) << p.comm.host_syncs << std::setw(11) << fixed(p.flops() / 1e9, 1)
          << std::setw(10) << (dir ? "-" : fixed(mib(static_cast<double>(r.cost.saved_bytes)), 1)) << std::setw(10)
          << fixed(t.comm_s * 1e3, 3) << std::setw(12) << fixed(t.compute_s * 1e3, 3) << std::setw(10)
          << fixed(t.total() * 1e3, 3) << "\n";
    }
  }
  const PlanRow* fastest = nullptr;
  for (const PlanRow& r : rows)
    if (r.illegal.empty() && (!fastest || r.total_s() < fastest->total_s())) fastest = &r;
  if (!fastest) return;
  out << "fastest: " << cp::mode_name(fastest->mode) << ", " << fixed(fastest->total_s() * 1e3, 3)
      << " ms per layer fwd+bwd; " << layers << " layer" << (layers == 1 ? "" : "s") << ": "
      << fixed(fastest->total_s() * 1e3 * layers, 3) << " ms, activations "
      << fixed(mib(static_cast<double>(fastest->cost.saved_bytes)) * layers / 1024.0, 3) << " GiB per rank\n";
}

void print_plan_sweep(const std::vector<PlanRow>& rows, std::ostream& out) {
  out << std::right << std::setw(4) << "cp" << std::setw(6) << "mb cp" << std::setw(9) << "tokens"
      << "  " << std::left << std::setw(12) << "mode" << std::right << std::setw(10) << "fwd ms" << std::setw(10)
      << "bwd ms" << std::setw(10) << "total ms" << std::setw(11) << "GFLOP" << std::setw(10) << "act MiB"
      << std::setw(11) << "comm MiB"
      << "\n";
  for (const PlanRow& r : rows) {
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

std::string plan_csv(const std::vector<PlanRow>& rows, int tp) {
  std::ostringstream out;
  out << "cp,tp,micro_batch,micro_batch_cp,tokens,mode,legal,busiest_world_rank";
  for (const char* dir : {"fwd", "bwd"}) {
    for (comm::Collective k : kKinds)
      out << "," << dir << "_" << comm::collective_name(k) << "_calls," << dir << "_" << comm::collective_name(k)
          << "_bytes_sent," << dir << "_" << comm::collective_name(k) << "_bytes_recv";
    out << "," << dir << "_host_syncs," << dir << "_flops," << dir << "_hbm_bytes," << dir << "_comm_ms," << dir
        << "_compute_ms";
  }
  out << ",route_builds,saved_activation_bytes,total_ms,message\n";
  for (const PlanRow& r : rows) {
    out << r.cp << "," << tp << "," << r.micro_batch << "," << r.mb_cp << "," << r.tokens << ","
        << cp::mode_name(r.mode) << "," << (r.illegal.empty() ? "true" : "false") << "," << r.world_rank;
    for (int dir = 0; dir < 2; ++dir) {
      const PhaseCost& p = dir ? r.cost.backward : r.cost.forward;
      const PhaseTime& t = dir ? r.bwd : r.fwd;
      for (comm::Collective k : kKinds)
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
std::string plan_svg(const std::vector<PlanRow>& rows, const std::string& path) {
  const GnuplotSvg svg("plan");
  const std::string& data_file = svg.data_file();
  std::ostringstream data, plot;
  std::vector<int> cps;
  for (const PlanRow& r : rows)
    if (std::find(cps.begin(), cps.end(), r.cp) == cps.end()) cps.push_back(r.cp);
  int series = 0;
  for (cp::CpMode mode : kModes)
    for (int cp_size : cps) {
      std::ostringstream points;
      for (const PlanRow& r : rows)
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

}  // namespace gdnv::cost
