#pragma once
// The outputs of `gdn-verify train` (docs/DESIGN.md §13): the terminal table (every
// k-th step, then one verdict line per run), CSV, JSON, and an SVG drawn by gnuplot (the loss curves of
// every run and the oracle, and each run's |dloss| against the noise band).
#include <iosfwd>
#include <string>
#include <vector>

#include "train/verdict.hpp"

namespace gdnv::train {

// Every run of a comparison in table order: cp1, cp1-reordered, the CP runs, the oracle.
std::vector<const Trajectory*> runs_of(const Comparison& c);
// "chunkwise@4", "headwise@1/2/4", "cp1", "oracle".
std::string run_label(const Trajectory& t);

void print_table(const Comparison& c, int every, std::ostream& out);
void print_verdicts(const Comparison& c, std::ostream& out);
// Per run (cp1, cp1-reordered, each mode, the oracle), the means over seeds of its final and mean loss and,
// against cp1, of its max and mean per-step |dloss| (upstream's dynamic-CP table).
void print_seed_means(const std::vector<Comparison>& seeds, std::ostream& out);

// Columns step,mode,cp,loss,grad_norm,effective_tokens,update_norm; one row per run and step (and seed,
// as the `seed` of the JSON: the CSV of several seeds repeats the header's columns per seed block).
std::string csv(const std::vector<Comparison>& seeds);
std::string json(const std::vector<Comparison>& seeds, const std::vector<unsigned long long>& seed_values);
// The SVG text (for the first seed), from gnuplot; ConfigError naming the fix when gnuplot fails.
std::string render_svg(const Comparison& c, const std::string& path);

}  // namespace gdnv::train
