// Gate step "judge on third-party images": the probe readers (`probe oracle`, `probe cross-mode`, `probe
// compare`) judged on images built on disk, each with a defect of known effect and the verdict written from
// docs/DESIGN.md §4, §5 and §8, in the third-party policy (meta.json names an `adapter`) and in ours: the
// image's integrity (rank files at the world's boundary, one replica off on each rank in turn, files of
// another run), NaN and Inf among finite values on either side, the band-only rule just inside and
// outside its bounds, the third-party deviation bound from its definition, a cross-mode failure that is
// numeric only (and the CLI's exit code for it), and the cumsum-decay class's gates recomputed from their
// formula by a route of the step's own.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/math/distributions/fisher_f.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/inprocess.hpp"
#include "core/error.hpp"
#include "core/file.hpp"
#include "core/rng.hpp"
#include "cpu/backend.hpp"
#include "gate/steps.hpp"
#include "harness/oracle.hpp"
#include "probes/checks.hpp"
#include "probes/image.hpp"
#include "reference/gated_delta_rule.hpp"
#include "reference/layer.hpp"

namespace gdnv::gate {
namespace {
namespace fs = std::filesystem;

constexpr int kWorld = 4;  // the chunkwise dump's ranks

// The images' case: THD 16 and 8 tokens (multiples of 2W at W = 4), hidden 16, Hk = Hv = 2, dk = dv = 4,
// fp64, so a value set from the oracle is stored exactly and the kernel gate is 1e-10.
harness::RunSpec image_geometry() {
  harness::RunSpec s;
  s.layer = {16, 2, 2, 4, 4, 4, 1e-6, false};
  s.lengths = {16, 8};
  return s;
}

// The two policies an image is read in: ours (meta.json without an adapter) and the third party's.
struct Flavour {
  const char* label;
  bool third_party;
};
constexpr Flavour kFlavours[] = {{"ours", false}, {"third-party", true}};

void dump(const fs::path& dir, const std::string& mode, int W) {
  probes::DumpSpec spec;
  spec.mode = mode;
  spec.image = "judge";
  spec.geometry = image_geometry();
  spec.case_name = probes::geometry_case_name(*spec.geometry);
  spec.dtype = DType::F64;
  spec.run = probes::new_run_id();
  comm::run_world(W, [&](comm::Communicator& world) {
    probes::dump_rank(spec, dir.string(), "inproc", world, cpu::make_backend(spec.dtype));
  });
}

void edit_meta(const fs::path& dir, const std::function<void(nlohmann::json&)>& edit) {
  const std::string path = (dir / "meta.json").string();
  nlohmann::json meta = nlohmann::json::parse(read_file_text(path));
  edit(meta);
  write_file_atomic(path, meta.dump(2) + "\n");
}

void edit_rank_file(const fs::path& dir, const std::string& mode, int rank,
                    const std::function<void(TensorFile&)>& edit) {
  const std::string path = probes::rank_file(dir.string(), mode, rank);
  TensorFile f = read_safetensors(path);
  edit(f);
  write_safetensors(path, f);
}

// The step's scratch directory: the clean images of each flavour, and a copy per case to break.
class Images {
 public:
  Images() : root_(fs::temp_directory_path() / ("gdnv_gate_judge_" + std::to_string(::getpid()))) {
    fs::remove_all(root_);
    for (const Flavour& f : kFlavours) {
      const fs::path dir = clean(f);
      dump(dir, "cp1", 1);
      dump(dir, "chunkwise", kWorld);
      if (f.third_party) edit_meta(dir, [](nlohmann::json& meta) { meta["adapter"] = "gate"; });
    }
  }
  ~Images() { fs::remove_all(root_); }
  Images(const Images&) = delete;
  Images& operator=(const Images&) = delete;

  fs::path clean(const Flavour& f) const { return root_ / (std::string("clean-") + f.label); }
  // A fresh copy of the clean image of `f` for the case running to break (cases run one at a time), named
  // the same for every case so that a failure's detail does not depend on which cases ran before it.
  fs::path copy(const Flavour& f) const {
    const fs::path dir = root_ / "case";
    fs::remove_all(dir);
    fs::copy(clean(f), dir);
    return dir;
  }
  fs::path root() const { return root_; }

 private:
  fs::path root_;
};

// ---- the CLI: what a user runs, exit code included -----------------------------------------------------

// This binary when it is gdn-verify, else (a test's process) GDNV_BIN's; "" when neither.
std::string cli_binary() {
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  if (fs::path(self).filename() == "gdn-verify") return self;
  const char* bin = std::getenv("GDNV_BIN");
  return bin ? bin : "";
}

// `gdn-verify probe <args>`'s exit status, or why it did not run.
struct CliRun {
  int status = -1;
  std::string why;
};
CliRun run_probe(const std::string& args, const fs::path& log) {
  const std::string bin = cli_binary();
  if (bin.empty()) return {-1, "no gdn-verify binary to run the CLI: run from gdn-verify or set GDNV_BIN"};
  const int rc = std::system((bin + " probe " + args + " > " + log.string() + " 2>&1").c_str());
  if (rc == -1 || !WIFEXITED(rc)) return {-1, "gdn-verify probe " + args + " did not exit normally"};
  return {WEXITSTATUS(rc), ""};
}

// "" when `gdn-verify probe <args>` exits with `want` (docs/DESIGN.md §5), else what it did.
std::string expect_cli(const std::string& args, int want, const fs::path& scratch) {
  const CliRun r = run_probe(args, scratch / "cli.log");
  if (!r.why.empty()) return r.why;
  if (r.status == want) return "";
  return "gdn-verify probe " + args + " exited " + std::to_string(r.status) + ", expected " + std::to_string(want);
}

// ---- what the readers say ----------------------------------------------------------------------------

std::string first_of(std::initializer_list<std::string> whys) {
  for (const auto& w : whys)
    if (!w.empty()) return w;
  return "";
}

std::string expect_exit(const std::string& reader, int got, int want) {
  return got == want ? "" : reader + " exit code " + std::to_string(got) + ", expected " + std::to_string(want);
}

// The first result of `c` for dump `file` that is structural (structural) or failing, or nullptr.
const probes::TensorResult* failing_in(const probes::Comparison& c, const std::string& file, bool structural) {
  for (const auto& t : c.tensors)
    if (t.file == file && (structural ? !t.structure.empty() : t.structure.empty() && !t.pass)) return &t;
  return nullptr;
}

// The files of `c` with a failing or structural result, as a set.
std::set<std::string> failing_files(const probes::Comparison& c) {
  std::set<std::string> files;
  for (const auto& t : c.tensors)
    if (!t.structure.empty() || !t.pass) files.insert(t.file);
  return files;
}

std::string files_str(const std::set<std::string>& files) {
  std::string s;
  for (const auto& f : files) s += (s.empty() ? "" : ", ") + f;
  return "{" + s + "}";
}

// `reader`'s comparison exits 2 and names `file` as what keeps the image from being whole.
std::string expect_structural(const std::string& reader, const probes::Comparison& c, int exit_code,
                              const std::string& file) {
  if (exit_code != 2) return expect_exit(reader, exit_code, 2);
  if (!failing_in(c, file, true))
    return reader + " exits 2 without naming " + file + " (it names " + files_str(failing_files(c)) + ")";
  return "";
}

// Every reader on a broken image `dir` (compare against the clean `ref`): exit 2 naming `file`.
std::string structural_verdicts(const fs::path& ref, const fs::path& dir, const std::string& file) {
  const probes::CrossMode cross = probes::cross_mode(dir.string(), probes::load_policy("cp-vs-cp1"));
  const probes::Comparison oracle = probes::judge_with_oracle(dir.string());
  const probes::Comparison cmp =
      probes::compare_images(ref.string(), dir.string(), "", probes::load_policy("cp1-vs-old"));
  return first_of({expect_structural("cross-mode", cross.vs_cp1, cross.exit_code(), file),
                   expect_structural("oracle", oracle, oracle.exit_code(), file),
                   expect_structural("compare", cmp, cmp.exit_code(), file)});
}

std::string rank_name(const std::string& mode, int r) { return mode + ".rank" + std::to_string(r) + ".safetensors"; }

// ---- image integrity (docs/DESIGN.md §8, whole images) ---------------------------------------------------

void integrity_cases(StepResult& r, const Images& images) {
  for (const Flavour& f : kFlavours) {
    const std::string tag = std::string(" (") + f.label + ")";
    const fs::path clean = images.clean(f);
    r.check_case("clean image passes every reader" + tag, [&] {
      const probes::CrossMode cross = probes::cross_mode(clean.string(), probes::load_policy("cp-vs-cp1"));
      const probes::Comparison same =
          probes::compare_images(clean.string(), clean.string(), "", probes::load_policy("bitwise"));
      return first_of({expect_exit("cross-mode", cross.exit_code(), 0),
                       expect_exit("oracle", probes::judge_with_oracle(clean.string()).exit_code(), 0),
                       expect_exit("compare", same.exit_code(), 0)});
    });
    // A rank file past the declared world (r = W: the first index outside 0..W-1), and one written rank01.
    for (const auto& [label, stray] :
         {std::pair{"stray chunkwise.rank4 in a world of 4", rank_name("chunkwise", 4)},
          std::pair{"stray chunkwise.rank01", std::string("chunkwise.rank01.safetensors")}})
      r.check_case(label + tag, [&, stray = stray] {
        const fs::path dir = images.copy(f);
        fs::copy_file(dir / rank_name("chunkwise", kWorld - 1), dir / stray);
        return first_of({structural_verdicts(clean, dir, stray),
                         expect_cli("cross-mode --dir " + dir.string(), 2, images.root()),
                         expect_cli("oracle --dir " + dir.string(), 2, images.root()),
                         expect_cli("compare --ref " + clean.string() + " --cand " + dir.string(), 2, images.root())});
      });
    for (const int missing : {0, kWorld - 1})
      r.check_case("chunkwise.rank" + std::to_string(missing) + " missing" + tag, [&] {
        const fs::path dir = images.copy(f);
        fs::remove(dir / rank_name("chunkwise", missing));
        return structural_verdicts(clean, dir, rank_name("chunkwise", missing));
      });
    // A rank file of another dump of the same mode, bit-identical but for its run id (docs/DESIGN.md §8, one run).
    for (const int foreign : {0, kWorld - 1})
      r.check_case("chunkwise.rank" + std::to_string(foreign) + " of another run" + tag, [&] {
        const fs::path dir = images.copy(f);
        edit_rank_file(dir, "chunkwise", foreign, [](TensorFile& t) { t.metadata["run"] = probes::new_run_id(); });
        return structural_verdicts(clean, dir, rank_name("chunkwise", foreign));
      });
    // Every rank's copy of the CP-summed gradients equals rank 0's, bitwise: one element one ulp off on rank
    // `off`. Judged by cross-mode and oracle as "<mode>.rank<r> vs rank0" (rank 0 off: every other rank
    // differs from it), and by compare (bitwise) as that rank's file against REF's.
    for (int off = 0; off < kWorld; ++off)
      r.check_case("one replica off on rank " + std::to_string(off) + tag, [&] {
        const fs::path dir = images.copy(f);
        edit_rank_file(dir, "chunkwise", off, [](TensorFile& t) {
          Tensor& g = t.tensors.at("grad::A_log");
          g.set(1, std::nextafter(g.get(1), std::numeric_limits<double>::infinity()));
        });
        std::set<std::string> want;
        for (int other = 1; other < kWorld; ++other)
          if (off == 0 || other == off) want.insert("chunkwise.rank" + std::to_string(other) + " vs rank0");
        const probes::CrossMode cross = probes::cross_mode(dir.string(), probes::load_policy("cp-vs-cp1"));
        const probes::Comparison oracle = probes::judge_with_oracle(dir.string());
        const probes::Comparison cmp =
            probes::compare_images(clean.string(), dir.string(), "", probes::load_policy("bitwise"));
        const auto names = [&](const std::string& reader, const std::set<std::string>& got,
                               const std::set<std::string>& expected) {
          return got == expected ? "" : reader + " fails on " + files_str(got) + ", expected " + files_str(expected);
        };
        return first_of({expect_exit("cross-mode", cross.exit_code(), 1),
                         names("cross-mode", failing_files(cross.vs_cp1), want),
                         expect_exit("oracle", oracle.exit_code(), 1), names("oracle", failing_files(oracle), want),
                         expect_exit("compare", cmp.exit_code(), 1),
                         names("compare", failing_files(cmp), {rank_name("chunkwise", off)})});
      });
  }
}

// ---- NaN and Inf among finite values (docs/DESIGN.md §4: a non-finite value on one side only fails) ------

void non_finite_cases(StepResult& r, const Images& images) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  for (const Flavour& f : kFlavours) {
    const std::string tag = std::string(" (") + f.label + ")";
    const fs::path clean = images.clean(f);
    for (const double bad : {inf, -inf, std::numeric_limits<double>::quiet_NaN()}) {
      const std::string what = std::isnan(bad) ? "NaN" : bad > 0 ? "Inf" : "-Inf";
      // The candidate side: one element of chunkwise rank 1's out. Every reader fails it (exit 1): the oracle
      // and cross-mode on `out`, compare on that rank's file.
      r.check_case(what + " in the out of a candidate" + tag, [&] {
        const fs::path dir = images.copy(f);
        edit_rank_file(dir, "chunkwise", 1, [&](TensorFile& t) { t.tensors.at("out").set(5, bad); });
        const probes::CrossMode cross = probes::cross_mode(dir.string(), probes::load_policy("cp-vs-cp1"));
        const probes::Comparison oracle = probes::judge_with_oracle(dir.string());
        const probes::Comparison cmp =
            probes::compare_images(clean.string(), dir.string(), "", probes::load_policy("cp1-vs-old"));
        const probes::TensorResult* o = failing_in(oracle, "chunkwise", false);
        const probes::TensorResult* c = failing_in(cmp, rank_name("chunkwise", 1), false);
        return first_of(
            {expect_exit("cross-mode", cross.exit_code(), 1), expect_exit("oracle", oracle.exit_code(), 1),
             !o || o->name != "out" ? "oracle does not fail chunkwise's out" : "",
             !oracle.divergence || oracle.divergence->name != "out" || oracle.divergence->metric != "nan/inf"
                 ? "oracle's first divergence is not out's nan/inf"
                 : "",
             expect_exit("compare", cmp.exit_code(), 1), !c || c->name != "out" ? "compare does not fail out" : "",
             expect_cli("oracle --dir " + dir.string(), 1, images.root())});
      });
      // The reference side: cp1's out (cross-mode's reference) and REF's file (compare's).
      r.check_case(what + " in the out of a reference" + tag, [&] {
        const fs::path dir = images.copy(f);
        edit_rank_file(dir, "cp1", 0, [&](TensorFile& t) { t.tensors.at("out").set(7, bad); });
        const probes::CrossMode cross = probes::cross_mode(dir.string(), probes::load_policy("cp-vs-cp1"));
        const probes::Comparison cmp =
            probes::compare_images(dir.string(), clean.string(), "", probes::load_policy("cp1-vs-old"));
        const probes::TensorResult* x = failing_in(cross.vs_cp1, "chunkwise vs cp1", false);
        const probes::TensorResult* c = failing_in(cmp, rank_name("cp1", 0), false);
        return first_of({expect_exit("cross-mode", cross.exit_code(), 1),
                         !x || x->name != "out" ? "cross-mode does not fail chunkwise's out against cp1's" : "",
                         expect_exit("compare", cmp.exit_code(), 1),
                         !c || c->name != "out" ? "compare does not fail cp1's out" : "",
                         expect_cli("cross-mode --dir " + dir.string(), 1, images.root())});
      });
    }
  }
}

// ---- the band-only rule (docs/DESIGN.md §4: a third-party tensor whose cp1 is beyond the kernel gate) -----

// The tensor the band-only cases move: a parameter gradient of 128 elements, most above 1e-2 (the images'
// grad::A_log and grad::dt_bias are ~1e-5 at the default gates: inside cp-vs-cp1's atol however far off).
constexpr const char* kBandParam = "out_proj.weight";
const std::string kBandTensor = std::string("grad::") + kBandParam;

Tensor oracle_gradient(const fs::path& dir) {
  return harness::oracle_answer(probes::read_inputs(dir.string())).grads.at(kBandParam);
}

Tensor times(const Tensor& t, double s) {
  Tensor out = t;
  for (std::int64_t i = 0; i < t.numel(); ++i) out.set(i, t.get(i) * s);
  return out;
}

void set_gradient(const fs::path& dir, const std::string& mode, int W, const Tensor& value) {
  for (int rank = 0; rank < W; ++rank)
    edit_rank_file(dir, mode, rank, [&](TensorFile& t) { t.tensors.at(kBandTensor) = value; });
}

std::string band_only_names(const probes::CrossMode& c) {
  std::string s;
  for (const auto& b : c.band_only) s += (s.empty() ? "" : ",") + b.tensor;
  return "{" + s + "}";
}

// Whether some element of `a` and `b` is outside cp-vs-cp1's elementwise bound atol 2e-3 + rtol 1e-2 |a|
// (docs/DESIGN.md §4): the precondition of a case whose CP run the rule must fail.
bool outside_cp_vs_cp1(const Tensor& a, const Tensor& b) {
  for (std::int64_t i = 0; i < a.numel(); ++i)
    if (std::abs(b.get(i) - a.get(i)) > 2e-3 + 1e-2 * std::abs(a.get(i))) return true;
  return false;
}

void band_only_cases(StepResult& r, const Images& images) {
  const Flavour& ours = kFlavours[0];
  const Flavour& third = kFlavours[1];
  const Tensor o = oracle_gradient(images.clean(third));
  // At fp64 the kernel gate is 1e-10 (docs/DESIGN.md §4): cp1's gradient set to o (1 + rho) sits rho from
  // the oracle (the product's rounding, 1e-16, is 1e-6 of 1e-10), so 1.01e-10 makes it band-only, 0.99e-10 not.
  for (const auto& [label, rho, band] : {std::tuple{"cp1 just past the kernel gate", 1.01e-10, true},
                                         std::tuple{"cp1 just inside the kernel gate", 0.99e-10, false}})
    r.check_case(std::string("band-only: ") + label + " (third-party)", [&, rho = rho, band = band] {
      const fs::path dir = images.copy(third);
      set_gradient(dir, "cp1", 1, times(o, 1 + rho));
      const probes::CrossMode cross = probes::cross_mode(dir.string(), probes::load_policy("cp-vs-cp1"));
      const std::string want = band ? "{" + kBandTensor + "}" : "{}";
      return first_of(
          {expect_exit("cross-mode", cross.exit_code(), 0),
           band_only_names(cross) == want ? "" : "band-only tensors " + band_only_names(cross) + ", expected " + want});
    });
  // cp1 at rho = 0.1 from the oracle; the chunkwise run on the other side of it at s x its band, the band
  // sqrt((13 + W) / 14 F(1 - 1e-6; nu, nu)) rho at W = 4, nu = 3 (sum e^2)^2 / sum e^4 - 2 for cp1's error
  // e = rho o (the class gate, 1e-10 at fp64, is below it). Elementwise the two differ by (rho + s band) |o|,
  // outside cp-vs-cp1's bound.
  const double rho = 0.1;
  double s2 = 0, s4 = 0;
  for (std::int64_t i = 0; i < o.numel(); ++i) {
    s2 += rho * rho * o.get(i) * o.get(i);
    s4 += std::pow(rho * o.get(i), 4);
  }
  const double nu = std::clamp(3 * s2 * s2 / s4 - 2, 1.0, static_cast<double>(o.numel()));
  const boost::math::fisher_f_distribution<double> ratio(nu, nu);
  const double band =
      std::sqrt((13.0 + kWorld) / 14.0 * boost::math::quantile(boost::math::complement(ratio, 1e-6))) * rho;
  const auto image = [&](const Flavour& f, double s) {
    const fs::path dir = images.copy(f);
    set_gradient(dir, "cp1", 1, times(o, 1 + rho));
    set_gradient(dir, "chunkwise", kWorld, times(o, 1 - s * band));
    if (!outside_cp_vs_cp1(times(o, 1 + rho), times(o, 1 - s * band)))
      throw Error("the case's CP run is inside cp-vs-cp1's elementwise bound: it cannot tell the rules apart");
    return dir;
  };
  r.check_case("band-only: CP run at 0.99 of its band (third-party)", [&] {
    const probes::CrossMode cross = probes::cross_mode(image(third, 0.99).string(), probes::load_policy("cp-vs-cp1"));
    return first_of(
        {expect_exit("cross-mode", cross.exit_code(), 0),
         band_only_names(cross) == "{" + kBandTensor + "}" ? "" : "band-only tensors " + band_only_names(cross)});
  });
  r.check_case("band-only: CP run at 1.01 of its band (third-party)", [&] {
    const fs::path dir = image(third, 1.01);
    const probes::CrossMode cross = probes::cross_mode(dir.string(), probes::load_policy("cp-vs-cp1"));
    const auto failing = std::find_if(cross.ratios.begin(), cross.ratios.end(),
                                      [](const probes::DeviationRatio& d) { return !d.pass(); });
    return first_of({expect_exit("cross-mode", cross.exit_code(), 1),
                     failing == cross.ratios.end() || failing->tensor != kBandTensor
                         ? "no deviation ratio of " + kBandTensor + " fails"
                         : "",
                     expect_cli("cross-mode --dir " + dir.string(), 1, images.root())});
  });
  // The same run outside the band-only rule: our image, or a third-party one under a policy the user names.
  r.check_case("band-only: not for our image (ours)", [&] {
    const probes::CrossMode cross = probes::cross_mode(image(ours, 0.99).string(), probes::load_policy("cp-vs-cp1"));
    return first_of({expect_exit("cross-mode", cross.exit_code(), 1),
                     cross.band_only.empty() ? "" : "band-only tensors " + band_only_names(cross) + " in our image"});
  });
  r.check_case("band-only: not under a named policy (third-party)", [&] {
    const probes::CrossMode cross = probes::cross_mode(image(third, 0.99).string(), probes::load_policy("cp1-vs-old"));
    return first_of(
        {expect_exit("cross-mode", cross.exit_code(), 1),
         cross.band_only.empty() ? "" : "band-only tensors " + band_only_names(cross) + " under cp1-vs-old"});
  });
}

// ---- the deviation bound of a third-party CP run, from its definition (docs/DESIGN.md §4) ----------------

// Known answers: F(2, 2)'s upper quantile at p is 1/p - 1 and F(1, 1)'s is cot^2(pi p / 2) (their CDFs,
// x / (1 + x) and (2 / pi) atan sqrt(x)); an error on k of n elements, all of one size, has k roundings
// (3 k^2 / k - 2 = 3k - 2 clamped to k only for k = 1: so k = 2 of 6 gives 4, the estimator's bias on
// equal sizes), and an error of zero keeps all n.
void deviation_factor_cases(StepResult& r) {
  const double p = 1e-6;
  const auto near = [](double got, double want) { return std::abs(got - want) <= 1e-9 * want; };
  for (const auto& [nu, quantile] :
       {std::pair{2.0, 1 / p - 1}, std::pair{1.0, std::pow(std::tan(M_PI / 2 * (1 - p)), 2)}})
    r.check_case("deviation factor at nu = " + std::to_string(static_cast<int>(nu)), [&, nu = nu, quantile = quantile] {
      const double want = std::sqrt((13.0 + kWorld) / 14.0 * quantile), got = probes::cp1_deviation_factor(nu, kWorld);
      return near(got, want) ? "" : "factor " + std::to_string(got) + ", expected " + std::to_string(want);
    });
  const Tensor oracle = Tensor::from_f64({0.5, 1.5, 2.5, 3.5, 4.5, 5.5}, {6});
  const Tensor one = Tensor::from_f64({0.5, 1.5, 2.5, 3.501, 4.5, 5.5}, {6});
  const Tensor two = Tensor::from_f64({0.5, 1.499, 2.5, 3.501, 4.5, 5.5}, {6});
  for (const auto& [label, run, want] : {std::tuple{"one element off", one, 1.0},
                                         std::tuple{"two of six off", two, 4.0}, std::tuple{"no error", oracle, 6.0}})
    r.check_case(std::string("effective roundings: ") + label, [&, run = run, want = want] {
      const double got = probes::effective_roundings(oracle, run);
      return near(got, want) ? "" : "nu " + std::to_string(got) + ", expected " + std::to_string(want);
    });
}

// ---- a cross-mode failure that is numeric only (docs/DESIGN.md §5: exit 1, never 0) ----------------------

void numeric_only_cases(StepResult& r, const Images& images) {
  for (const Flavour& f : kFlavours) {
    const std::string tag = std::string(" (") + f.label + ")";
    // Against cp1 alone: cp1's out doubled (outside atol 2e-3 + rtol 1e-2 |x| wherever |x| > 2e-3), the CP run where it
    // was, on the oracle, so every deviation ratio (against cp1's, now 1) holds. Ours under the contract's rule; the
    // third party's under cp1-vs-old (under the contract's rule cp1's out, 1 from the oracle, would be band-only).
    r.check_case("numeric only: cp1 out doubled, the CP run on the oracle" + tag, [&] {
      const fs::path dir = images.copy(f);
      edit_rank_file(dir, "cp1", 0, [](TensorFile& t) { t.tensors.at("out") = times(t.tensors.at("out"), 2.0); });
      const std::string policy = f.third_party ? "cp1-vs-old" : "cp-vs-cp1";
      const probes::CrossMode cross = probes::cross_mode(dir.string(), probes::load_policy(policy));
      const bool ratios_hold = std::all_of(cross.ratios.begin(), cross.ratios.end(),
                                           [](const probes::DeviationRatio& d) { return d.pass(); });
      return first_of({expect_exit("cross-mode", cross.exit_code(), 1),
                       cross.vs_cp1.structural_mismatch() ? "a structural mismatch where there is none" : "",
                       ratios_hold ? "" : "a deviation ratio fails: the case is not numeric against cp1 only",
                       expect_cli("cross-mode --dir " + dir.string() + " --policy " + policy, 1, images.root())});
    });
    // Only the deviation ratio: every out shard scaled by 1 + 1e-5, inside the elementwise rule and at cosine
    // 1, but 1e-5 from the oracle against a bound of about 1.1 x the 1e-6 floor (cp1's fp64 deviation is far
    // below it).
    r.check_case("numeric only: the deviation ratio of chunkwise alone" + tag, [&] {
      const fs::path dir = images.copy(f);
      for (int rank = 0; rank < kWorld; ++rank)
        edit_rank_file(dir, "chunkwise", rank,
                       [](TensorFile& t) { t.tensors.at("out") = times(t.tensors.at("out"), 1 + 1e-5); });
      const probes::CrossMode cross = probes::cross_mode(dir.string(), probes::load_policy("cp-vs-cp1"));
      return first_of({expect_exit("cross-mode", cross.exit_code(), 1),
                       cross.vs_cp1.exit_code() == 0 ? "" : "the elementwise comparison with cp1 fails too",
                       expect_cli("cross-mode --dir " + dir.string(), 1, images.root())});
    });
  }
}

// ---- the cumsum-decay gates from their formula (docs/DESIGN.md §4) --------------------------------------

// Rows [a, b) of a [1, T, H, D] (or [1, T, H]) core tensor, as [1, b - a, ...].
Tensor rows_of(const Tensor& t, std::int64_t a, std::int64_t b) {
  Shape shape = t.shape();
  shape[1] = b - a;
  const std::int64_t width = t.numel() / t.dim(1);
  Tensor out(DType::F64, shape);
  for (std::int64_t i = 0; i < (b - a) * width; ++i) out.set(i, t.get(a * width + i));
  return out;
}

ref::GdrInputs piece(const ref::GdrInputs& in, std::int64_t a, std::int64_t b) {
  ref::GdrInputs p;
  p.q = rows_of(in.q, a, b), p.k = rows_of(in.k, a, b), p.v = rows_of(in.v, a, b);
  p.g = rows_of(in.g, a, b), p.beta = rows_of(in.beta, a, b);
  p.use_qk_l2norm = in.use_qk_l2norm;
  p.scale = in.scale;
  return p;
}

// Row-major [rows, cols] matrices, written out in loops: the step's own route.
using Mat = std::vector<std::vector<double>>;
Mat zeros(std::int64_t rows, std::int64_t cols) {
  return Mat(static_cast<std::size_t>(rows), std::vector<double>(static_cast<std::size_t>(cols), 0.0));
}

// m_s of one chunk (c tokens), from docs/DESIGN.md §4's definition: the chunk's adjoint run with every operand
// replaced by its absolute value, so each product carrying gamma_s counts with its magnitude: the output's
// e^gamma q . (d_o S^T) and (d_o . v_new) P (row and column), the state's e^{gamma_C} S . dS (at the chunk's
// last token) and e^{gamma_C - gamma_i} k_i . (v_new dS^T) (at i, and at the last token), the WY
// representation's dA * A (row and column) and beta e^gamma k . d_bk. q, k L2-normalised; S the state entering
// the chunk, dS the gradient of the one leaving it; s_do = scale d_o.
std::vector<double> chunk_magnitudes(const Mat& q, const Mat& k, const Mat& v, const std::vector<double>& g,
                                     const std::vector<double>& beta, const Mat& S, const Mat& dS, const Mat& s_do) {
  const std::size_t c = g.size(), K = S.size(), V = S[0].size();
  std::vector<double> gamma(c), m(c, 0.0);
  for (std::size_t i = 0; i < c; ++i) gamma[i] = (i ? gamma[i - 1] : 0.0) + g[i];
  const auto decay = [&](std::size_t i, std::size_t j) { return j <= i ? std::exp(gamma[i] - gamma[j]) : 0.0; };
  const auto dot = [](const std::vector<double>& a, const std::vector<double>& b) {
    double s = 0;
    for (std::size_t x = 0; x < a.size(); ++x) s += a[x] * b[x];
    return s;
  };
  // A = beta_i (k_i . k_j) decay (j < i); T = (I + A)^-1 by substitution; U = T beta v; W = T beta e^gamma k.
  Mat A = zeros(c, c), T = zeros(c, c), U = zeros(c, V), W = zeros(c, K), v_new = zeros(c, V);
  for (std::size_t i = 0; i < c; ++i)
    for (std::size_t j = 0; j < i; ++j) A[i][j] = beta[i] * dot(k[i], k[j]) * decay(i, j);
  for (std::size_t i = 0; i < c; ++i) {
    T[i][i] = 1;
    for (std::size_t j = 0; j < i; ++j)
      for (std::size_t l = j; l < i; ++l) T[i][j] -= A[i][l] * T[l][j];
  }
  for (std::size_t i = 0; i < c; ++i)
    for (std::size_t l = 0; l <= i; ++l) {
      for (std::size_t b = 0; b < V; ++b) U[i][b] += T[i][l] * beta[l] * v[l][b];
      for (std::size_t a = 0; a < K; ++a) W[i][a] += T[i][l] * beta[l] * std::exp(gamma[l]) * k[l][a];
    }
  for (std::size_t i = 0; i < c; ++i)
    for (std::size_t b = 0; b < V; ++b) {
      v_new[i][b] = U[i][b];
      for (std::size_t a = 0; a < K; ++a) v_new[i][b] -= W[i][a] * S[a][b];
    }
  const auto abs_of = [](Mat x) {
    for (auto& row : x)
      for (double& e : row) e = std::abs(e);
    return x;
  };
  const Mat aq = abs_of(q), ak = abs_of(k), aS = abs_of(S), adS = abs_of(dS), ado = abs_of(s_do), avn = abs_of(v_new);
  const Mat aT = abs_of(T), aU = abs_of(U), aW = abs_of(W), aA = abs_of(A);
  const double tail_C = gamma[c - 1];
  // Output.
  for (std::size_t i = 0; i < c; ++i) {
    for (std::size_t a = 0; a < K; ++a)
      for (std::size_t b = 0; b < V; ++b) m[i] += std::exp(gamma[i]) * aq[i][a] * ado[i][b] * aS[a][b];
    for (std::size_t j = 0; j <= i; ++j) {
      const double h = dot(ado[i], avn[j]) * dot(aq[i], ak[j]) * decay(i, j);
      m[i] += h;
      m[j] += h;
    }
  }
  // State.
  for (std::size_t a = 0; a < K; ++a)
    for (std::size_t b = 0; b < V; ++b) m[c - 1] += std::exp(tail_C) * aS[a][b] * adS[a][b];
  for (std::size_t i = 0; i < c; ++i) {
    double t = 0;
    for (std::size_t a = 0; a < K; ++a)
      for (std::size_t b = 0; b < V; ++b) t += std::exp(tail_C - gamma[i]) * ak[i][a] * avn[i][b] * adS[a][b];
    m[i] += t;
    m[c - 1] += t;
  }
  // WY: dv_new = P^T d_o + k_tail dS; d_bv = T^T dv_new; d_bk = T^T dv_new S^T; dA = d_bv U^T + d_bk W^T (j < i).
  Mat dv_new = zeros(c, V), d_bv = zeros(c, V), d_bk = zeros(c, K);
  for (std::size_t j = 0; j < c; ++j)
    for (std::size_t b = 0; b < V; ++b) {
      for (std::size_t i = j; i < c; ++i) dv_new[j][b] += dot(aq[i], ak[j]) * decay(i, j) * ado[i][b];
      for (std::size_t a = 0; a < K; ++a) dv_new[j][b] += std::exp(tail_C - gamma[j]) * ak[j][a] * adS[a][b];
    }
  for (std::size_t l = 0; l < c; ++l)
    for (std::size_t i = l; i < c; ++i)
      for (std::size_t b = 0; b < V; ++b) {
        d_bv[l][b] += aT[i][l] * dv_new[i][b];
        for (std::size_t a = 0; a < K; ++a) d_bk[l][a] += aT[i][l] * dv_new[i][b] * aS[a][b];
      }
  for (std::size_t i = 0; i < c; ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      const double h = (dot(d_bv[i], aU[j]) + dot(d_bk[i], aW[j])) * aA[i][j];
      m[i] += h;
      m[j] += h;
    }
    m[i] += std::abs(beta[i]) * std::exp(gamma[i]) * dot(ak[i], d_bk[i]);
  }
  return m;
}

// Head h's [rows, D] block of a [1, T, H, D] tensor, rows [a, b), L2-normalised (x / sqrt(sum x^2 + 1e-6)) when asked.
Mat head_block(const Tensor& t, std::int64_t h, std::int64_t a, std::int64_t b, bool l2) {
  const std::int64_t H = t.dim(2), D = t.dim(3);
  Mat out = zeros(b - a, D);
  for (std::int64_t i = a; i < b; ++i) {
    double n2 = 0;
    for (std::int64_t d = 0; d < D; ++d) n2 += t.get((i * H + h) * D + d) * t.get((i * H + h) * D + d);
    for (std::int64_t d = 0; d < D; ++d)
      out[static_cast<std::size_t>(i - a)][static_cast<std::size_t>(d)] =
          t.get((i * H + h) * D + d) / (l2 ? std::sqrt(n2 + 1e-6) : 1.0);
  }
  return out;
}

// Head h's [K, V] state of an [N, Hv, K, V] tensor's sequence 0.
Mat state_of(const Tensor& t, std::int64_t h) {
  const std::int64_t K = t.dim(2), V = t.dim(3);
  Mat out = zeros(K, V);
  for (std::int64_t a = 0; a < K; ++a)
    for (std::int64_t b = 0; b < V; ++b)
      out[static_cast<std::size_t>(a)][static_cast<std::size_t>(b)] = t.get((h * K + a) * V + b);
  return out;
}

// m_t [T, Hv] of a THD core input (B = 1) over 64-token chunks cut from each sequence's start: per chunk, the
// state entering it from the oracle's forward over the sequence's prefix, the gradient of the one leaving it
// from the oracle's backward over the suffix (zero after the sequence's last chunk: no final-state gradient).
std::vector<double> magnitudes(const ref::GdrInputs& in, const Tensor& d_o, const std::vector<std::int64_t>& cu) {
  constexpr std::int64_t C = 64;
  const std::int64_t T = in.g.dim(1), Hv = in.g.dim(2), Hk = in.q.dim(2), K = in.q.dim(3), V = in.v.dim(3);
  const double scale = in.scale.value_or(1.0 / std::sqrt(static_cast<double>(K)));
  std::vector<double> m(static_cast<std::size_t>(T * Hv), 0.0);
  for (std::size_t s = 0; s + 1 < cu.size(); ++s)
    for (std::int64_t begin = cu[s]; begin < cu[s + 1]; begin += C) {
      const std::int64_t end = std::min(begin + C, cu[s + 1]);
      const Tensor S_in = begin > cu[s] ? ref::gdr_chunked_forward(piece(in, cu[s], begin)).final_state
                                        : Tensor(DType::F64, {1, Hv, K, V});
      Tensor dS_out(DType::F64, {1, Hv, K, V});
      if (end < cu[s + 1]) {
        ref::GdrInputs suffix = piece(in, end, cu[s + 1]);
        suffix.initial_state = ref::gdr_chunked_forward(piece(in, cu[s], end)).final_state;
        dS_out = ref::gdr_chunked_backward(suffix, rows_of(d_o, end, cu[s + 1]), std::nullopt).dh0;
      }
      for (std::int64_t h = 0; h < Hv; ++h) {
        const std::int64_t kh = h / (Hv / Hk);
        std::vector<double> g, beta;
        for (std::int64_t t = begin; t < end; ++t)
          g.push_back(in.g.get(t * Hv + h)), beta.push_back(in.beta.get(t * Hv + h));
        Mat s_do = head_block(d_o, h, begin, end, false);
        for (auto& row : s_do)
          for (double& e : row) e *= scale;
        const std::vector<double> mc = chunk_magnitudes(
            head_block(in.q, kh, begin, end, true), head_block(in.k, kh, begin, end, true),
            head_block(in.v, h, begin, end, false), g, beta, state_of(S_in, h), state_of(dS_out, h), s_do);
        for (std::int64_t t = begin; t < end; ++t)
          m[static_cast<std::size_t>(t * Hv + h)] = mc[static_cast<std::size_t>(t - begin)];
      }
    }
  return m;
}

double rel_rms(const Tensor& ref, const Tensor& got) {
  double e2 = 0, r2 = 0;
  for (std::int64_t i = 0; i < ref.numel(); ++i) {
    e2 += (got.get(i) - ref.get(i)) * (got.get(i) - ref.get(i));
    r2 += ref.get(i) * ref.get(i);
  }
  const double n = static_cast<double>(ref.numel());
  return std::sqrt(e2 / n) / (std::sqrt(r2 / n) + 1e-12);
}

// The decay-class case: THD 150 and 20 tokens (the first three 64-token chunks, the last one short), hidden 16,
// Hk 1, Hv 2 (GVA), dk = dv = 4, fp32 storage.
harness::RunSpec decay_geometry() {
  harness::RunSpec s;
  s.layer = {16, 1, 2, 4, 4, 4, 1e-6, false};
  s.lengths = {150, 20};
  return s;
}

constexpr const char* kDecayTensors[] = {"out", "grad::A_log", "grad::dt_bias", "stage_grad::g"};

// kappa^gamma_t of docs/DESIGN.md §4, each of kDecayTensors: the oracle rerun with the forward offsets delta
// |gamma_s| N_s (gamma the partial sums of g from each 64-token chunk's start) on g and the backward ones
// sum_{s >= t in t's chunk} delta hypot(m_s, dg_s) N'_s on dg, largest rel_rms(change) / delta of three draws.
// The draws are the harness's seeded streams (core/rng.hpp, "cumsum-decay/<d>" and "cumsum-decay/grad/<d>"): the
// route differs in how the partial sums, m_s, the states and their gradients are formed.
std::map<std::string, double> cumsum_kappa(const harness::Case& k, const harness::Answer& oracle) {
  constexpr double delta = 0x1.0p-24 / 1.7320508075688772;
  constexpr std::int64_t C = 64;
  const ref::LayerForward fwd = ref::layer_forward(k.config, k.params, k.hidden, k.cu_seqlens);
  const ref::GdrInputs& in = fwd.mixer.core_in;
  const std::int64_t T = in.g.dim(1), Hv = in.g.dim(2), dv = k.config.dv();
  const Tensor& d_core = oracle.stages.at("stage_grad::core");  // [T, Hv, dv], THD: natural = packed
  Tensor d_o(DType::F64, {1, T, Hv, dv});
  for (std::int64_t i = 0; i < d_o.numel(); ++i) d_o.set(i, d_core.get(i));
  const Tensor& dg = oracle.stages.at("stage_grad::g");  // [T, Hv]
  const std::vector<double> m = magnitudes(in, d_o, *k.cu_seqlens);
  const std::vector<std::int64_t>& cu = *k.cu_seqlens;
  std::map<std::string, double> kappa;
  for (int draw = 0; draw < 3; ++draw) {
    const Rng rng(k.params.size(), "cumsum-decay/" + std::to_string(draw));
    const Rng rng_grad(k.params.size(), "cumsum-decay/grad/" + std::to_string(draw));
    ref::LayerOptions options;
    options.gate_offset = options.gate_grad_offset = Tensor(DType::F64, in.g.shape());
    for (std::size_t s = 0; s + 1 < cu.size(); ++s)
      for (std::int64_t begin = cu[s]; begin < cu[s + 1]; begin += C) {
        const std::int64_t end = std::min(begin + C, cu[s + 1]);
        for (std::int64_t h = 0; h < Hv; ++h) {
          double gamma = 0, carried = 0;
          for (std::int64_t t = begin; t < end; ++t) {
            gamma += in.g.get(t * Hv + h);
            options.gate_offset.set(t * Hv + h,
                                    delta * std::abs(gamma) * rng.normal(static_cast<std::uint64_t>(t * Hv + h)));
          }
          for (std::int64_t t = end - 1; t >= begin; --t) {
            const auto at = static_cast<std::size_t>(t * Hv + h);
            carried += delta * std::sqrt(m[at] * m[at] + dg.get(t * Hv + h) * dg.get(t * Hv + h)) * rng_grad.normal(at);
            options.gate_grad_offset.set(t * Hv + h, carried);
          }
        }
      }
    const ref::LayerForward moved = ref::layer_forward(k.config, k.params, k.hidden, k.cu_seqlens, options);
    ref::StageTensors stages;
    const ref::LayerGrads grads = ref::layer_backward(k.config, k.params, moved, k.grad_output, &stages);
    const std::map<std::string, std::pair<const Tensor*, const Tensor*>> pairs = {
        {"out", {&oracle.out, &moved.out}},
        {"grad::A_log", {&oracle.grads.at("A_log"), &grads.params.at("A_log")}},
        {"grad::dt_bias", {&oracle.grads.at("dt_bias"), &grads.params.at("dt_bias")}},
        {"stage_grad::g", {&dg, &stages.at("stage_grad::g")}}};
    for (const auto& [name, p] : pairs) kappa[name] = std::max(kappa[name], rel_rms(*p.first, *p.second) / delta);
  }
  return kappa;
}

// The decay-class cases of one gate regime: default gates (decays that forget within a chunk: the forward's
// partial sums matter) and weak ones (the state and its gradient cross every chunk boundary: the backward's dS).
void decay_class_cases(StepResult& r, harness::GateRegime regime) {
  const std::string tag = std::string(" (") + std::string(harness::gate_regime_name(regime)) + " gates)";
  bool any = false;
  for (const char* name : kDecayTensors) any = any || r.selected(std::string("cumsum-decay gate of ") + name + tag);
  if (!any) return;
  harness::RunSpec spec = decay_geometry();
  spec.dtype = DType::F32;
  spec.gates = regime;
  const harness::Case k = harness::make_case(spec);
  const harness::Answer oracle = harness::oracle_answer(k, {true, 0});
  const auto storage = harness::oracle_gates(k, oracle, DType::F32, harness::DecayClass::ProductOfDecays);
  const auto cumsum = harness::oracle_gates(k, oracle, DType::F32, harness::DecayClass::CumsumDecay);
  const std::map<std::string, double> kappa = cumsum_kappa(k, oracle);
  constexpr double delta = 0x1.0p-24 / 1.7320508075688772;
  for (const char* name : kDecayTensors)
    r.check_case(std::string("cumsum-decay gate of ") + name + tag, [&] {
      // The judge's delta kappa^gamma, out of its gate: x = sqrt(gate^2 - storage^2) (gate = hypot(storage, x)).
      // The routes differ only in the order of fp64 sums (m_s, the states: ~1e-15 relative; the reruns are the
      // same code on offsets equal to that): 1e-9 relative, plus the cancellation of recovering x from the
      // gate, whose one rounding (2^-53 gate) is 2^-52 (gate / x)^2 of x^2, i.e. 2^-53 (gate / x)^2 of x, times 4.
      // Measured: 0 on the gradients, 2e-12 on out. The escapes moved it by 7e-6 to O(1).
      const double g = cumsum.at(name), s = storage.at(name), want = kappa.at(name);
      const double judged = std::sqrt(std::max(0.0, g * g - s * s)) / delta;
      if (!(want > 0)) return std::string("kappa^gamma is 0: the case does not exercise the class");
      const double tol = 1e-9 + 4 * 0x1.0p-53 * (g / (delta * want)) * (g / (delta * want));
      if (std::abs(judged - want) <= tol * want) return std::string();
      char buf[200];
      std::snprintf(buf, sizeof buf, "kappa^gamma %.12g from the judge's gate %.6g, %.12g from the formula", judged, g,
                    want);
      return std::string(buf);
    });
}

// `text` with the scratch directory `root` (named after the process) written as <scratch>: a failure's detail
// reads the same when its reproduce command runs it again.
std::string without_root(std::string text, const std::string& root) {
  for (std::size_t at; (at = text.find(root)) != std::string::npos;) text.replace(at, root.size(), "<scratch>");
  return text;
}

StepResult run(const StepOptions& options) {
  StepResult r(options);
  try {
    const Images images;
    integrity_cases(r, images);
    non_finite_cases(r, images);
    band_only_cases(r, images);
    numeric_only_cases(r, images);
    const std::string root = images.root().string();
    r.detail = without_root(r.detail, root);
    for (auto& f : r.failures) f.why = without_root(f.why, root);
  } catch (const Error& e) {
    r.check(false, "images", e.what());
  }
  deviation_factor_cases(r);
  for (const harness::GateRegime regime : {harness::GateRegime::Default, harness::GateRegime::Weak})
    decay_class_cases(r, regime);
  return r;
}

}  // namespace

const Step judge_on_third_party_images{"judge on third-party images", run};

}  // namespace gdnv::gate
