// gdn-verify train: a small GDN language model trained for a few steps under every CP mode, static and
// dynamic, against cp1 in the same dtype, the noise band a legal reordering of cp1 gives, and the fp64
// oracle trajectory (docs/DESIGN.md §13).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <ostream>

#include "cli/command.hpp"
#include "cli/lists.hpp"
#include "comm/mpi.hpp"
#include "core/error.hpp"
#include "core/file.hpp"
#include "core/progress.hpp"
#include "core/text.hpp"
#include "cpu/backend.hpp"
#include "train/oracle.hpp"
#include "train/report.hpp"
#include "train/verdict.hpp"

namespace gdnv::cli {
namespace {

po::options_description train_options() {
  po::options_description o("train options");
  // clang-format off
  o.add_options()
      ("mode", po::value<std::string>(), "CP modes to train, comma-separated: cp1 | headwise | chunkwise | all_gather "
       "(default cp1,headwise,chunkwise,all_gather; cp1 and its reordered rerun always run)")
      ("modes", po::value<std::string>(), "deprecated spelling of --mode")
      ("cp", po::value<int>()->default_value(4), "static CP size: the world of every CP run")
      ("dynamic-cp", po::value<std::string>(), "also train each mode under dynamic CP over these sizes, e.g. 1,2,4 "
       "(divisors of --cp): each micro-batch at the smallest size whose per-rank share fits --rank-budget")
      ("dynamic", po::value<std::string>(), "deprecated spelling of --dynamic-cp")
      ("rank-budget", po::value<std::int64_t>()->default_value(0),
       "dynamic CP's tokens per rank (0: 7 --micro-batch-tokens / (4 --cp): micro-batches over 7/8 full at --cp, over 7/16 at half of it)")
      ("layers", po::value<int>()->default_value(2), "GDN layers")
      ("hidden", po::value<std::int64_t>()->default_value(64), "hidden_size")
      ("num-key-heads", po::value<std::int64_t>()->default_value(4), "linear_num_key_heads (Hk)")
      ("num-value-heads", po::value<std::int64_t>()->default_value(8), "linear_num_value_heads (Hv)")
      ("key-head-dim", po::value<std::int64_t>()->default_value(8), "linear_key_head_dim (dk)")
      ("value-head-dim", po::value<std::int64_t>()->default_value(8), "linear_value_head_dim (dv)")
      ("conv-width", po::value<std::int64_t>()->default_value(4), "linear_conv_kernel_dim (W)")
      ("vocab", po::value<std::int64_t>()->default_value(64), "vocabulary size V (the Markov chain's and the model's)")
      ("steps", po::value<int>()->default_value(8), "optimizer steps")
      ("docs-per-batch", po::value<std::int64_t>()->default_value(12), "documents per global batch")
      ("micro-batch-tokens", po::value<std::int64_t>()->default_value(128), "token budget of a micro-batch")
      ("max-doc-length", po::value<std::int64_t>()->default_value(128), "longest document (at most the budget)")
      ("lr", po::value<double>()->default_value(3e-3, "0.003"), "AdamW learning rate")
      ("dtype", po::value<std::string>()->default_value("bf16"), "compute dtype: fp64 | fp32 | bf16")
      ("seed", po::value<std::uint64_t>()->default_value(0), "seed of the model and the data")
      ("seeds", po::value<int>()->default_value(1), "run the whole comparison for seeds SEED .. SEED+N-1 and print "
       "per-run means")
      ("recompute", po::value<std::string>()->default_value("full"),
       "activation recompute: full (each layer's forward again before its backward) | none (all_gather needs full)")
      ("world", po::value<std::string>()->default_value("inproc"), "inproc (threads) | mpi (under mpirun -np >= --cp)")
      ("every", po::value<int>()->default_value(1), "print every k-th step in the table (and the last)")
      ("csv", po::value<std::string>(), "write step,mode,cp,loss,grad_norm,effective_tokens,update_norm to FILE")
      ("json", po::value<std::string>(), "write every run, the noise band and the verdicts as JSON to FILE")
      ("svg", po::value<std::string>(), "plot the loss curves and |dloss| against the noise band to FILE (gnuplot)")
      ("progress", po::bool_switch(), "progress on stderr, one line per run, also where stderr is no terminal (on a "
       "terminal it is always shown, one line rewritten: runs and steps done, the run now, elapsed, ETA)");
  // clang-format on
  return o;
}

train::Recompute parse_recompute(const std::string& name) {
  if (name == "full") return train::Recompute::Full;
  if (name == "none") return train::Recompute::None;
  throw ConfigError("--recompute '" + name + "' is not supported: use full or none");
}

// The value of option `name` or of its deprecated spelling `old` (the one spelling every command shares:
// run and plan's --mode and --dynamic-cp); a ConfigError when both are given.
std::optional<std::string> spelled(const po::variables_map& vm, const std::string& name, const std::string& old) {
  if (vm.count(name) && vm.count(old))
    throw ConfigError("--" + name + " and --" + old + " are one option (--" + old + " is its old spelling): pass --" +
                      name + " once");
  if (vm.count(name)) return vm[name].as<std::string>();
  if (vm.count(old)) return vm[old].as<std::string>();
  return std::nullopt;
}

std::string modes_of(const po::variables_map& vm) {
  return spelled(vm, "mode", "modes").value_or("cp1,headwise,chunkwise,all_gather");
}

std::vector<train::TrainMode> parse_modes(const std::string& text) {
  std::vector<train::TrainMode> modes;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    const std::size_t comma = std::min(text.find(',', begin), text.size());
    modes.push_back(train::parse_train_mode(text.substr(begin, comma - begin)));
    begin = comma + 1;
  }
  return modes;
}

train::ComparisonPlan plan_from(const po::variables_map& vm) {
  train::ComparisonPlan p;
  train::TrainSpec& s = p.base;
  s.model.layers = vm["layers"].as<int>();
  s.model.layer = layer_values(vm);
  s.model.vocab = s.data.vocab = vm["vocab"].as<std::int64_t>();
  s.data.docs_per_batch = vm["docs-per-batch"].as<std::int64_t>();
  s.data.micro_batch_tokens = vm["micro-batch-tokens"].as<std::int64_t>();
  s.data.max_length = vm["max-doc-length"].as<std::int64_t>();
  s.adam.lr = vm["lr"].as<double>();
  s.cp = vm["cp"].as<int>();
  s.rank_budget = vm["rank-budget"].as<std::int64_t>();
  s.dtype = parse_dtype_option(vm["dtype"].as<std::string>());
  s.steps = vm["steps"].as<int>();
  s.recompute = parse_recompute(vm["recompute"].as<std::string>());
  p.modes = parse_modes(modes_of(vm));
  if (const auto dynamic = spelled(vm, "dynamic-cp", "dynamic"))
    for (auto c : parse_int_list(*dynamic, "--dynamic-cp", "1,2,4")) p.dynamic.push_back(static_cast<int>(c));
  if (!(std::isfinite(s.adam.lr) && s.adam.lr > 0)) {
    char given[32];
    std::snprintf(given, sizeof given, "%g", s.adam.lr);
    throw ConfigError(std::string("--lr ") + given +
                      " is not a learning rate: give a finite positive number, e.g. --lr 3e-3");
  }
  if (vm["every"].as<int>() < 1) throw ConfigError("--every must be at least 1: print every k-th step");
  if (vm["seeds"].as<int>() < 1) throw ConfigError("--seeds must be at least 1: the number of seeds to run");
  // Every run the plan makes, checked before any runs.
  train::validate(s);
  for (const train::TrainSpec& run : train::mode_runs(p)) train::validate(run);
  return p;
}

}  // namespace

int train_main(const std::vector<std::string>& args, std::ostream& out) {
  const auto vm =
      parse_options("train", "[--mode M,...] [--cp W] [--dynamic-cp 1,2,4] [options]", train_options(), {}, args, out);
  if (!vm) return kPass;
  check_outputs(output_options(*vm, {"csv", "json", "svg"}));
  train::ComparisonPlan plan = plan_from(*vm);
  const std::string world = (*vm)["world"].as<std::string>();
  if (world != "inproc" && world != "mpi") throw ConfigError("--world '" + world + "' is not inproc or mpi");
  const int seeds = (*vm)["seeds"].as<int>();
  const std::uint64_t seed0 = (*vm)["seed"].as<std::uint64_t>();
  const bool mpi = world == "mpi";
  if (mpi) {
    const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
    if (!size) size = std::getenv("PMI_SIZE");
    if (!size || std::atoi(size) < plan.base.cp)
      throw ConfigError("--world mpi needs the process started by mpirun with at least --cp processes: mpirun -np " +
                        std::to_string(plan.base.cp) + " gdn-verify train ... --world mpi");
  }

  // gnuplot draws the SVG after the runs: its absence fails first, before any training.
  if (vm->count("svg") && std::system("gnuplot --version >/dev/null 2>&1") != 0)
    throw ConfigError("--svg " + (*vm)["svg"].as<std::string>() +
                      ": gnuplot failed: install gnuplot (apt-get install gnuplot-nox) or drop --svg");
  std::vector<train::Comparison> results;
  std::vector<unsigned long long> seed_values;
  bool root = true;
  // Per seed: the oracle, cp1, its reordered rerun and every mode run.
  const int runs = seeds * (3 + static_cast<int>(train::mode_runs(plan).size()));
  Progress progress("train", runs, "runs", progress_style((*vm)["progress"].as<bool>()), std::cerr);
  int done = 0;
  const auto starting = [&](const std::string& what) {
    if (root)
      progress.update(done, what + (seeds > 1 ? " seed " + std::to_string(seed0 + done / (runs / seeds)) : ""),
                      std::to_string(done * plan.base.steps) + "/" + std::to_string(runs * plan.base.steps) + " steps");
    ++done;
  };
  auto run_all = [&](const train::Runner& runner) {
    const train::Runner shown = [&](const train::TrainSpec& s) {
      starting((s.reordered ? std::string("cp1-reordered") : std::string(train::train_mode_name(s.mode))) + "@" +
               train::cp_label(s));
      return runner(s);
    };
    for (int i = 0; i < seeds; ++i) {
      train::ComparisonPlan p = plan;
      p.base.seed = p.base.data.seed = seed0 + static_cast<std::uint64_t>(i);
      starting("oracle (fp64)");
      const train::Trajectory oracle = root ? train::oracle_trajectory(p.base) : train::Trajectory{};
      results.push_back(train::compare(p, oracle, shown));
      seed_values.push_back(p.base.seed);
    }
    if (root) progress.finish(std::to_string(runs * plan.base.steps) + " steps");
  };
  try {
    if (!mpi) {
      run_all(train::train_in_process);
    } else {
      comm::run_mpi([&](comm::Communicator& comm) {
        root = comm.rank() == 0;
        // Each run on the first world_size(spec) processes; the others wait at the next run's split.
        run_all([&](const train::TrainSpec& s) {
          auto group = comm.split(comm.rank() < train::world_size(s) ? 0 : -1, comm.rank());
          if (!group) return train::Trajectory{};
          return train::train_rank(s, *group, cpu::make_backend(s.dtype));
        });
      });
      if (!root) return kPass;
    }
  } catch (const ConfigError&) {
    throw;
  } catch (const Error& e) {
    out << "the run did not complete: " << printable(e.what()) << "\nFAIL\n";
    return kNumericFailure;
  }

  const train::TrainSpec& s = plan.base;
  const ref::LayerConfig L(s.model.layer);
  out << "gdn-verify train: modes=" << modes_of(*vm) << " cp=" << s.cp
      << (plan.dynamic.empty() ? "" : " dynamic=" + comma_list(plan.dynamic)) << " layers=" << s.model.layers
      << " hidden=" << L.hidden() << " heads=" << L.Hk() << "/" << L.Hv() << " dk=" << L.dk() << " dv=" << L.dv()
      << " vocab=" << s.model.vocab << " steps=" << s.steps << " dtype=" << (*vm)["dtype"].as<std::string>()
      << " seed=" << seed0 << (seeds > 1 ? " seeds=" + std::to_string(seeds) : "")
      << " recompute=" << (*vm)["recompute"].as<std::string>() << " world=" << world << "\n";
  bool pass = true;
  for (std::size_t i = 0; i < results.size(); ++i) {
    if (seeds > 1) out << (i ? "\n" : "") << "seed " << seed_values[i] << "\n";  // a blank line between seeds
    train::print_table(results[i], (*vm)["every"].as<int>(), out);
    train::print_verdicts(results[i], out);
    pass = pass && results[i].pass;
  }
  if (seeds > 1) {
    out << "\n";
    train::print_seed_means(results, out);
  }
  const std::string svg = vm->count("svg") ? train::render_svg(results[0], (*vm)["svg"].as<std::string>()) : "";
  std::vector<std::pair<std::string, std::string>> files;
  if (vm->count("csv")) files.emplace_back((*vm)["csv"].as<std::string>(), train::csv(results));
  if (vm->count("json")) files.emplace_back((*vm)["json"].as<std::string>(), train::json(results, seed_values));
  if (vm->count("svg")) files.emplace_back((*vm)["svg"].as<std::string>(), svg);
  write_files_atomic(files);
  for (const char* file : {"csv", "json", "svg"})
    if (vm->count(file)) out << "wrote " << (*vm)[file].as<std::string>() << "\n";
  out << (pass ? "PASS" : "FAIL") << "\n";
  return pass ? kPass : kNumericFailure;
}

}  // namespace gdnv::cli
