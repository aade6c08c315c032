// gdn-verify probe dump | compare | cross-mode | oracle: tensors dumped by a build ("image") on
// deterministic inputs, compared across images, across CP modes, and with the fp64 oracle.
#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <ostream>

#include "cli/command.hpp"
#include "cli/lists.hpp"
#include "cli/probe_reports.hpp"
#include "comm/inprocess.hpp"
#include "comm/mpi.hpp"
#include "core/error.hpp"
#include "core/file.hpp"
#include "gpu/cuda_plugin.hpp"
#include "probes/checks.hpp"
#include "probes/cross_mode_report.hpp"
#include "probes/image.hpp"
#include "probes/report.hpp"

namespace gdnv::cli {
namespace {

// Processes mpirun started (OpenMPI, or a PMI launcher), 0 outside mpirun.
int mpirun_size() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
    if (const char* v = std::getenv(var)) return std::atoi(v);
  return 0;
}

struct World {
  bool mpi = false;
  int size = 1;
};

// "mpi" or "inproc:W"; by default mpi under mpirun, else inproc with one rank for cp1 and two otherwise.
World parse_world(const std::string& given, const std::string& mode) {
  const int launched = mpirun_size();
  if (given.empty()) return launched ? World{true, launched} : World{false, mode == "cp1" ? 1 : 2};
  if (given == "mpi") {
    if (!launched)
      throw ConfigError("--world mpi needs the process started by mpirun: mpirun -np W gdn-verify probe dump ...");
    return {true, launched};
  }
  const std::string prefix = "inproc:";
  if (given.rfind(prefix, 0) != 0 || given.size() == prefix.size())
    throw ConfigError("--world '" + given + "' is not 'inproc:W' or 'mpi': e.g. --world inproc:4");
  const std::string digits = given.substr(prefix.size());
  if (digits.find_first_not_of("0123456789") != std::string::npos || std::atoi(digits.c_str()) < 1)
    throw ConfigError("--world '" + given + "': W must be a positive integer, e.g. --world inproc:4");
  if (launched > 1)
    throw ConfigError("--world " + given + " under mpirun with " + std::to_string(launched) +
                      " processes: drop --world (each MPI process is a rank) or run without mpirun");
  return {false, std::atoi(digits.c_str())};
}

// The geometry options in place of --case: ConfigError when --case is given too, or --lengths more than once.
harness::RunSpec dump_geometry(const po::variables_map& vm) {
  if (!vm["case"].defaulted())
    throw ConfigError("--case " + vm["case"].as<std::string>() +
                      " and geometry options given: a probe case fixes the geometry; give one or the other");
  const harness::RunSpec g = geometry_spec(vm);
  if (!g.micro_batch_lengths.empty())
    throw ConfigError("--lengths given " + std::to_string(g.micro_batch_lengths.size()) +
                      " times: a dump is one micro-batch; give one --lengths list");
  return g;
}

int dump_main(const std::vector<std::string>& args, std::ostream& out) {
  po::options_description o("probe dump options");
  // clang-format off
  o.add_options()
      ("mode", po::value<std::string>()->required(), "cp1 | headwise | chunkwise | all_gather")
      ("image", po::value<std::string>()->required(), "label of the build being probed, e.g. old or new")
      ("out", po::value<std::string>()->required(), "directory to write (one image of one case per directory)")
      ("world", po::value<std::string>()->default_value(""), "inproc:W (threads) or mpi (under mpirun; the default there)")
      ("dtype", po::value<std::string>()->default_value("fp32"), "storage dtype: fp64 | fp32 | bf16")
      ("case", po::value<std::string>()->default_value("thd-gva"),
       "thd-gva | thd-short | thd-odd (CP=1 only) | sbhd; or, in its place, the geometry options below (run's)")
      ("backend", po::value<std::string>()->default_value("cpu"),
       "compute backend: cpu | emu | cuda (emu and cuda: fp32 or bf16, --world inproc:W)")
      ("stages", po::bool_switch(),
       "also dump each rank's part of every named stage (stage::*, stage_grad::*; chunkwise: boundary_state), "
       "which the probe readers then judge and name the first divergence from");
  // clang-format on
  add_geometry_options(o);
  const auto vm =
      parse_options("probe dump", "--mode M --image LABEL --out DIR [--case C | geometry options]", o, {}, args, out);
  if (!vm) return kPass;
  probes::DumpSpec spec;
  spec.mode = (*vm)["mode"].as<std::string>();
  spec.image = (*vm)["image"].as<std::string>();
  spec.case_name = (*vm)["case"].as<std::string>();
  spec.dtype = parse_dtype_option((*vm)["dtype"].as<std::string>());
  spec.seed = (*vm)["seed"].as<std::uint64_t>();
  if (geometry_given(*vm)) spec.geometry = dump_geometry(*vm);
  if (spec.geometry) spec.case_name = probes::geometry_case_name(*spec.geometry);
  const std::string dir = (*vm)["out"].as<std::string>();
  spec.backend = (*vm)["backend"].as<std::string>();
  spec.stages = (*vm)["stages"].as<bool>();
  const World world = parse_world((*vm)["world"].as<std::string>(), spec.mode);
  check_output_directory("--out", dir);
  // Bad input fails here, before any rank starts.
  (void)probes::dump_run_spec(spec, world.size);
  const cp::BackendFactory factory = parse_backend_option(spec.backend);
  if (world.mpi && spec.backend == "emu")
    throw ConfigError(
        "--backend emu needs --world inproc:W: the MPI world moves host memory; run without mpirun, "
        "or use --backend cpu (or cuda, which runs under mpirun over NCCL)");
  harness::RankBackends ranks = harness::make_rank_backends(world.mpi ? 0 : world.size, factory, spec.dtype);
  if (!world.mpi) spec.run = probes::new_run_id();  // one process: every rank's thread shares it
  const auto body = [&](comm::Communicator& comm) {
    if (world.mpi && spec.backend == "cuda") {  // one GPU per process, collectives over NCCL
      spec.run = probes::shared_run_id(comm);   // over MPI, before the device world exists
      gpu::NcclRank rank = gpu::cuda_plugin().api->make_nccl_rank(comm, spec.dtype);
      probes::dump_rank(spec, dir, "nccl", *rank.comm, std::move(rank.backend));
    } else {
      probes::dump_rank(
          spec, dir, world.mpi ? "mpi" : "inproc", comm,
          world.mpi ? factory(spec.dtype) : std::move(ranks.backends[static_cast<std::size_t>(comm.rank())]));
    }
    if (comm.rank() == 0)
      out << "probe dump: image '" << spec.image << "', " << spec.mode << " on " << world.size << " rank(s) ("
          << (world.mpi ? "mpi" : "inproc") << "), case " << spec.case_name << ", " << dtype_name(spec.dtype) << " -> "
          << dir << "/{inputs.safetensors, " << spec.mode << ".rank"
          << (world.size == 1 ? "0" : "0.." + std::to_string(world.size - 1)) << ".safetensors, meta.json}\n";
  };
  if (world.mpi) comm::run_mpi(body);
  else comm::run_world(world.size, body, ranks.options);
  return kPass;
}

// A header line per judged image that names its library (docs/DESIGN.md §14), `label` before it; none for this
// project's own images. Read before the judging, so a malformed "library" is bad input before any report.
std::string library_header(const std::vector<std::pair<std::string, std::string>>& images) {
  std::string lines;
  for (const auto& [label, dir] : images)
    if (const auto library = probes::image_library(dir)) lines += label + probes::library_line(*library) + "\n";
  return lines;
}

int compare_images_main(const std::vector<std::string>& args, std::ostream& out) {
  po::options_description o("probe compare options");
  // clang-format off
  o.add_options()
      ("ref", po::value<std::string>()->required(), "the reference image's directory")
      ("cand", po::value<std::string>()->required(), "the candidate image's directory")
      ("mode", po::value<std::string>()->default_value(""), "compare only this mode's dumps (default: every mode of REF)")
      ("policy", po::value<std::string>()->default_value("cp1-vs-old"),
       "tolerance policy: cp1-vs-old | cp-vs-cp1 | bitwise | upstream-probe | a JSON file");
  // clang-format on
  add_report_options(o);
  const auto vm = parse_options("probe compare", "--ref DIR --cand DIR [--mode M] [--policy P]", o, {}, args, out);
  if (!vm) return kPass;
  check_outputs(report_outputs(*vm), {(*vm)["ref"].as<std::string>(), (*vm)["cand"].as<std::string>()});
  const auto start = Clock::now();
  const std::string ref = (*vm)["ref"].as<std::string>(), cand = (*vm)["cand"].as<std::string>();
  const std::string header = library_header({{"ref ", ref}, {"cand ", cand}});
  const probes::Policy policy = probes::load_policy((*vm)["policy"].as<std::string>());
  const probes::Comparison c = probes::compare_images(ref, cand, (*vm)["mode"].as<std::string>(), policy);
  out << header;
  return report(c, *vm, out, start);
}

int cross_mode_main(const std::vector<std::string>& args, std::ostream& out) {
  po::options_description o("probe cross-mode options");
  // clang-format off
  o.add_options()
      ("dir", po::value<std::string>()->required(), "an image directory holding a cp1 dump and CP modes' dumps")
      ("policy", po::value<std::string>()->default_value("cp-vs-cp1"),
       "tolerance policy of each mode vs cp1: cp-vs-cp1 | cp1-vs-old | bitwise | upstream-probe | a JSON file");
  // clang-format on
  add_listing_options(o);
  o.add_options()("json", po::value<std::string>(), "also write the report as JSON to FILE");
  const auto vm = parse_options("probe cross-mode", "--dir DIR [--policy P] [--json FILE]", o, {}, args, out);
  if (!vm) return kPass;
  check_outputs(output_options(*vm, {"json"}), {(*vm)["dir"].as<std::string>()});
  const auto start = Clock::now();
  const std::string header = library_header({{"", (*vm)["dir"].as<std::string>()}});
  const probes::CrossMode r =
      probes::cross_mode((*vm)["dir"].as<std::string>(), probes::load_policy((*vm)["policy"].as<std::string>()));
  if (vm->count("json")) write_files_atomic({{(*vm)["json"].as<std::string>(), probes::to_json(r)}});
  const probes::TextOptions options = listing(r.vs_cp1, *vm, start);
  out << header;
  probes::write_rows(r.vs_cp1, out, options);
  for (const auto& b : r.band_only) out << probes::band_only_line(b) << "\n";
  probes::write_deviation(r, out);
  out << (r.exit_code() == 0 ? "PASS" : "FAIL") << "\n";
  if (const std::string first = probes::first_failure(r); !first.empty()) out << first << "\n";
  out << probes::counts_line(r, options.seconds) << "\n";
  return r.exit_code();
}

int oracle_main(const std::vector<std::string>& args, std::ostream& out) {
  po::options_description o("probe oracle options");
  o.add_options()("dir", po::value<std::string>()->required(),
                  "an image directory: inputs.safetensors and <mode>.rank<r>.safetensors files");
  add_report_options(o);
  const auto vm = parse_options("probe oracle", "--dir DIR", o, {}, args, out);
  if (!vm) return kPass;
  const std::string dir = (*vm)["dir"].as<std::string>();
  check_outputs(report_outputs(*vm), {dir});
  const auto start = Clock::now();
  const std::string header = library_header({{"", dir}});
  std::vector<probes::ClassVerdict> classes;
  const probes::Comparison c = probes::judge_with_oracle(dir, &classes);
  out << header << "decay class (docs/DESIGN.md §4): declared "
      << harness::decay_class_name(probes::declared_decay_class(dir));
  for (const auto& v : classes)
    out << "; meets " << harness::decay_class_name(v.decays)
        << " gates: " << (v.outside ? "no (" + std::to_string(v.outside) + " outside)" : std::string("yes"));
  out << "\n";
  return report(c, *vm, out, start);
}

}  // namespace

int probe_main(const std::vector<std::string>& args, std::ostream& out) {
  const std::vector<std::pair<std::string, int (*)(const std::vector<std::string>&, std::ostream&)>> subcommands = {
      {"dump", dump_main}, {"compare", compare_images_main}, {"cross-mode", cross_mode_main}, {"oracle", oracle_main}};
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    out << "usage: gdn-verify probe dump|compare|cross-mode|oracle [options]   (each takes --help)\n";
    return args.empty() ? kBadInput : kPass;
  }
  for (const auto& [name, run] : subcommands)
    if (name == args[0]) return run({args.begin() + 1, args.end()}, out);
  throw ConfigError("unknown probe subcommand '" + args[0] + "': use dump, compare, cross-mode or oracle");
}

void add_listing_options(po::options_description& o) {
  o.add_options()("failures-only", po::bool_switch(),
                  "list only the tensors that fail or mismatch in structure (the default on a terminal when any "
                  "does)")("all", po::bool_switch(), "list every tensor (the default in a pipe or file)");
}

probes::TextOptions listing(const probes::Comparison& c, const po::variables_map& vm, Clock::time_point start) {
  if (vm["failures-only"].as<bool>() && vm["all"].as<bool>())
    throw ConfigError("--failures-only and --all contradict each other: pass one of them");
  const bool terminal_default = ::isatty(STDOUT_FILENO) && c.exit_code() != 0 && !vm["all"].as<bool>();
  return {vm["failures-only"].as<bool>() || terminal_default,
          std::chrono::duration<double>(Clock::now() - start).count()};
}

void add_report_options(po::options_description& o) {
  o.add_options()("json", po::value<std::string>(), "also write the report as JSON to FILE")(
      "markdown", po::value<std::string>(), "also write the report as a markdown table to FILE");
  add_listing_options(o);
}

std::vector<OutputPath> report_outputs(const po::variables_map& vm) { return output_options(vm, {"json", "markdown"}); }

int report(const probes::Comparison& c, const po::variables_map& vm, std::ostream& out, Clock::time_point start) {
  const probes::TextOptions options = listing(c, vm, start);
  std::vector<std::pair<std::string, std::string>> files;
  if (vm.count("json")) files.emplace_back(vm["json"].as<std::string>(), probes::to_json(c));
  if (vm.count("markdown")) files.emplace_back(vm["markdown"].as<std::string>(), probes::to_markdown(c));
  write_files_atomic(files);
  probes::write_text(c, out, options);
  return c.exit_code();
}

}  // namespace gdnv::cli
