#include "train/report.hpp"

#include <algorithm>
#include <iomanip>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>

#include "core/error.hpp"
#include "core/file.hpp"
#include "core/gnuplot.hpp"

namespace gdnv::train {

std::vector<const Trajectory*> runs_of(const Comparison& c) {
  std::vector<const Trajectory*> runs{&c.cp1, &c.reordered};
  for (const Trajectory& t : c.modes) runs.push_back(&t);
  runs.push_back(&c.oracle);
  return runs;
}

std::string run_label(const Trajectory& t) {
  if (t.mode == "cp1" || t.mode == "oracle" || t.mode == "cp1-reordered") return t.mode;
  return t.mode + "@" + t.cp;
}

void print_table(const Comparison& c, int every, std::ostream& out) {
  const std::vector<const Trajectory*> runs = runs_of(c);
  out << "loss per step (" << dtype_name(c.dtype) << "; every " << every << " step" << (every == 1 ? "" : "s")
      << " and the last)\n"
      << std::left << std::setw(6) << "step" << std::setw(8) << "tokens";
  for (const Trajectory* t : runs)
    out << std::setw(std::max<int>(13, static_cast<int>(run_label(*t).size()) + 2)) << run_label(*t);
  out << "\n";
  const std::size_t steps = c.cp1.steps.size();
  for (std::size_t s = 0; s < steps; ++s) {
    if (s % static_cast<std::size_t>(every) != 0 && s + 1 != steps) continue;
    out << std::left << std::setw(6) << s << std::setw(8) << c.cp1.steps[s].effective_tokens;
    for (const Trajectory* t : runs) {
      std::ostringstream v;
      v << std::fixed << std::setprecision(6) << (s < t->steps.size() ? t->steps[s].loss : 0.0);
      out << std::setw(std::max<int>(13, static_cast<int>(run_label(*t).size()) + 2)) << v.str();
    }
    out << "\n";
  }
}

void print_verdicts(const Comparison& c, std::ostream& out) {
  const bool fp64 = c.dtype == DType::F64;
  out << std::scientific << std::setprecision(3);
  if (!fp64)
    out << "noise band (cp1-reordered vs cp1, per step |dloss|): max " << c.band.max << ", mean " << c.band.mean
        << " (floor " << c.band.floor << "); limit " << kBandFactor << " x band = " << c.band.limit
        << "; cp1 vs oracle max " << c.cp1_oracle_dev << "\n";
  out << std::left << std::setw(22) << "run" << std::right << std::setw(12) << "max|dloss|" << std::setw(12)
      << "mean|dloss|" << std::setw(12) << (fp64 ? "rel limit" : "limit") << std::setw(12) << "vs oracle"
      << std::setw(12) << "limit" << std::setw(9) << "time"
      << "  result\n";
  for (std::size_t i = 0; i < c.verdicts.size(); ++i) {
    const ModeVerdict& v = c.verdicts[i];
    out << std::left << std::setw(22) << run_label(c.modes[i]) << std::right << std::setw(12) << v.max_gap
        << std::setw(12) << v.mean_gap << std::setw(12) << v.limit << std::setw(12) << v.oracle_dev << std::setw(12)
        << (fp64 ? 0.0 : v.oracle_limit) << std::setw(7) << std::fixed << std::setprecision(2) << c.modes[i].seconds
        << " s" << std::scientific << std::setprecision(3) << "  " << (v.pass ? "pass" : "FAIL") << "\n";
    if (!v.pass) out << "    " << v.why << "\n";
  }
  if (!c.why.empty()) out << c.why << "\n";
  out << std::defaultfloat;
}

void print_seed_means(const std::vector<Comparison>& seeds, std::ostream& out) {
  struct Sums {
    double final_loss = 0, mean_loss = 0, max_gap = 0, mean_gap = 0;
  };
  std::map<std::string, Sums> sums;
  std::vector<std::string> order;
  const auto add_loss = [&](const Trajectory& t) {
    const std::string label = run_label(t);
    if (!sums.count(label)) order.push_back(label);
    double total = 0;
    for (const StepRecord& r : t.steps) total += r.loss;
    sums[label].final_loss += t.steps.empty() ? 0.0 : t.steps.back().loss;
    sums[label].mean_loss += t.steps.empty() ? 0.0 : total / static_cast<double>(t.steps.size());
  };
  for (const Comparison& c : seeds) {
    for (const Trajectory* t : runs_of(c)) add_loss(*t);
    sums["cp1-reordered"].max_gap += c.band.max;
    sums["cp1-reordered"].mean_gap += c.band.mean;
    for (std::size_t i = 0; i < c.verdicts.size(); ++i) {
      sums[run_label(c.modes[i])].max_gap += c.verdicts[i].max_gap;
      sums[run_label(c.modes[i])].mean_gap += c.verdicts[i].mean_gap;
    }
  }
  const double n = static_cast<double>(seeds.size());
  out << "means over " << seeds.size() << " seeds (|dloss| per step vs cp1; cp1-reordered's is the noise band)\n"
      << std::left << std::setw(22) << "run" << std::right << std::setw(13) << "final loss" << std::setw(13)
      << "mean loss" << std::setw(13) << "max|dloss|" << std::setw(13) << "mean|dloss|"
      << "\n";
  for (const std::string& label : order) {
    const Sums& s = sums[label];
    out << std::left << std::setw(22) << label << std::right << std::fixed << std::setprecision(6) << std::setw(13)
        << s.final_loss / n << std::setw(13) << s.mean_loss / n << std::scientific << std::setprecision(3);
    if (label == "cp1" || label == "oracle") out << std::setw(13) << "-" << std::setw(13) << "-";
    else out << std::setw(13) << s.max_gap / n << std::setw(13) << s.mean_gap / n;
    out << "\n";
  }
  out << std::defaultfloat;
}

std::string csv(const std::vector<Comparison>& seeds) {
  std::ostringstream o;
  o << "step,mode,cp,loss,grad_norm,effective_tokens,update_norm\n" << std::setprecision(17);
  for (const Comparison& c : seeds)
    for (const Trajectory* t : runs_of(c))
      for (const StepRecord& r : t->steps)
        o << r.step << "," << t->mode << "," << t->cp << "," << r.loss << "," << r.grad_norm << ","
          << r.effective_tokens << "," << r.update_norm << "\n";
  return o.str();
}

std::string json(const std::vector<Comparison>& seeds, const std::vector<unsigned long long>& seed_values) {
  nlohmann::json all = nlohmann::json::array();
  for (std::size_t i = 0; i < seeds.size(); ++i) {
    const Comparison& c = seeds[i];
    nlohmann::json runs = nlohmann::json::array();
    for (const Trajectory* t : runs_of(c)) {
      nlohmann::json steps = nlohmann::json::array();
      for (const StepRecord& r : t->steps)
        steps.push_back({{"step", r.step},
                         {"loss", r.loss},
                         {"grad_norm", r.grad_norm},
                         {"effective_tokens", r.effective_tokens},
                         {"update_norm", r.update_norm},
                         {"micro_batch_cp", r.cps}});
      runs.push_back({{"mode", t->mode}, {"cp", t->cp}, {"seconds", t->seconds}, {"steps", steps}});
    }
    nlohmann::json verdicts = nlohmann::json::array();
    for (std::size_t k = 0; k < c.verdicts.size(); ++k) {
      const ModeVerdict& v = c.verdicts[k];
      verdicts.push_back({{"mode", v.mode},
                          {"cp", v.cp},
                          {"pass", v.pass},
                          {"max_abs_dloss", v.max_gap},
                          {"mean_abs_dloss", v.mean_gap},
                          {"limit", v.limit},
                          {"oracle_deviation", v.oracle_dev},
                          {"oracle_limit", v.oracle_limit},
                          {"why", v.why}});
    }
    all.push_back({{"seed", seed_values.at(i)},
                   {"dtype", std::string(dtype_name(c.dtype))},
                   {"noise_band",
                    {{"max", c.band.max},
                     {"mean", c.band.mean},
                     {"floor", c.band.floor},
                     {"factor", kBandFactor},
                     {"limit", c.band.limit}}},
                   {"cp1_oracle_deviation", c.cp1_oracle_dev},
                   {"runs", runs},
                   {"verdicts", verdicts},
                   {"pass", c.pass},
                   {"why", c.why}});
  }
  return all.dump(2) + "\n";
}

std::string render_svg(const Comparison& c, const std::string& path) {
  const GnuplotSvg plot("train");
  const std::string& data_file = plot.data_file();
  std::ostringstream data, losses, gaps;
  data << std::setprecision(17);
  int series = 0;
  for (const Trajectory* t : runs_of(c)) {
    for (const StepRecord& r : t->steps) data << r.step << " " << r.loss << "\n";
    data << "\n\n";
    losses << (series ? ", " : "plot ") << "'" << data_file << "' index " << series
           << " using 1:2 with linespoints title '" << run_label(*t) << "'";
    ++series;
  }
  // |dloss| vs cp1 of the reordered run (the band) and of every CP run. A zero (step 0 shares cp1's
  // forward) has no place on a log scale and would stretch it to 1e-300: it is left out.
  std::vector<const Trajectory*> gap_runs{&c.reordered};
  for (const Trajectory& t : c.modes) gap_runs.push_back(&t);
  for (const Trajectory* t : gap_runs) {
    const std::vector<double> g = loss_gaps(*t, c.cp1);
    for (std::size_t s = 0; s < g.size(); ++s)
      if (g[s] > 0) data << s << " " << g[s] << "\n";
    data << "\n\n";
    gaps << (gaps.str().empty() ? "plot " : ", ") << "'" << data_file << "' index " << series
         << " using 1:2 with linespoints title '" << (t == &c.reordered ? "cp1-reordered (noise band)" : run_label(*t))
         << "'";
    ++series;
  }
  gaps << ", " << std::setprecision(6) << std::max(c.band.limit, 1e-300) << " with lines dashtype 2 title 'limit "
       << kBandFactor << " x band'";
  return plot.render(data.str(), 960, 900,
                     "set multiplot layout 2,1\nset grid\nset key right top\nset xlabel 'step'\nset ylabel 'training "
                     "loss (" +
                         std::string(dtype_name(c.dtype)) + ")'\n" + losses.str() +
                         "\nset logscale y\nset ylabel '|loss - loss of cp1|'\n" + gaps.str() + "\nunset multiplot\n",
                     "--svg " + path);
}

}  // namespace gdnv::train
