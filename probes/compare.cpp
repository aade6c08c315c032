#include "probes/compare.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>

#include "core/error.hpp"

namespace gdnv::probes {
namespace fs = std::filesystem;
namespace {

std::string describe(const Tensor& t) { return std::string(dtype_name(t.dtype())) + " " + shape_str(t.shape()); }

bool numerically_equal(const Tensor& ref, const Tensor& cand) {
  for (std::int64_t i = 0; i < ref.numel(); ++i) {
    const double r = ref.get(i), c = cand.get(i);
    if (!(r == c || (std::isnan(r) && std::isnan(c)))) return false;
  }
  return true;
}

// The first criterion of `rule` the comparison fails, or "".
std::string verdict(const TensorResult& t, const Tensor& ref, const Tensor& cand) {
  const Rule& r = t.rule;
  const auto nonfinite = mismatches(ref, cand, std::numeric_limits<double>::infinity(), 0.0);
  if (nonfinite > 0) return std::to_string(nonfinite) + " elements NaN/Inf on one side only";
  if (r.exact.value_or(false) && !t.m.bitwise) return "not bitwise identical (policy: exact)";
  if (!is_float(ref.dtype())) return t.m.bitwise ? "" : "integer tensor differs";
  if (r.atol || r.rtol) {
    const double frac = t.m.numel ? static_cast<double>(t.mismatched) / static_cast<double>(t.m.numel) : 0.0;
    if (frac > r.max_mismatch_frac.value_or(0.0))
      return std::to_string(t.mismatched) + " elements outside atol + rtol " +
             (r.normwise.value_or(false) ? "max|ref|" : "|ref|");
  }
  if (r.min_cos && 1.0 - t.m.one_minus_cos < *r.min_cos) return "cosine below min_cos";
  if (r.max_rel_rms && t.m.rel_rms > *r.max_rel_rms) return "rel_rms above max_rel_rms";
  return "";
}

std::map<std::string, fs::path> safetensors_in(const fs::path& dir) {
  std::map<std::string, fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.is_regular_file() && entry.path().extension() == ".safetensors")
      files[entry.path().filename().string()] = entry.path();
  return files;
}

TensorResult structural(const std::string& file, const std::string& name, const std::string& what) {
  TensorResult t;
  t.file = file;
  t.name = name;
  t.structure = what;
  return t;
}

void check_exists(const std::string& path, const char* role) {
  if (!fs::exists(path))
    throw IoError(std::string(role) + " '" + path + "' does not exist: pass a safetensors file or a directory of them");
}

}  // namespace

int Comparison::compared() const {
  int n = 0;
  for (const auto& t : tensors) n += t.structure.empty();
  return n;
}

int Comparison::bitwise() const {
  int n = 0;
  for (const auto& t : tensors) n += t.structure.empty() && t.m.bitwise;
  return n;
}

int Comparison::failed() const {
  int n = 0;
  for (const auto& t : tensors) n += t.structure.empty() && !t.pass;
  return n;
}

bool Comparison::structural_mismatch() const { return compared() != static_cast<int>(tensors.size()); }

int Comparison::exit_code() const { return structural_mismatch() ? 2 : failed() ? 1 : 0; }

std::string Comparison::summary() const {
  return name + ": " + std::to_string(compared()) + " tensors compared, " + std::to_string(bitwise()) +
         " bitwise identical, " + std::to_string(failed()) + " outside tolerance";
}

namespace {

// `measured` over `bound`: +inf for an error a zero bound allows none of.
double over(double measured, double bound) {
  if (bound > 0) return measured / bound;
  return measured > 0 ? std::numeric_limits<double>::infinity() : 0.0;
}

}  // namespace

double error_ratio(const Tensor& ref, const Tensor& cand, const Rule& rule, double ref_max_abs,
                   const std::vector<std::int64_t>& elements) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  const bool elementwise = rule.atol || rule.rtol, normwise = rule.normwise.value_or(false);
  const double atol = rule.atol.value_or(0.0), rtol = rule.rtol.value_or(0.0);
  double worst = 0, err2 = 0, ref2 = 0, cand2 = 0, dot = 0;
  std::int64_t finite = 0;
  const auto n = elements.empty() ? ref.numel() : static_cast<std::int64_t>(elements.size());
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t at = elements.empty() ? i : elements[static_cast<std::size_t>(i)];
    const double r = ref.get(at), c = cand.get(at);
    if (!std::isfinite(r) || !std::isfinite(c)) {
      if (!(r == c || (std::isnan(r) && std::isnan(c)))) return inf;
      continue;
    }
    const double e = std::abs(c - r);
    if (e > 0 && rule.exact.value_or(false)) return inf;
    if (elementwise) worst = std::max(worst, over(e, atol + rtol * (normwise ? ref_max_abs : std::abs(r))));
    err2 += e * e, ref2 += r * r, cand2 += c * c, dot += r * c;
    ++finite;
  }
  const double count = static_cast<double>(std::max<std::int64_t>(1, finite));
  if (rule.max_rel_rms)
    worst = std::max(worst, over(std::sqrt(err2 / count) / (std::sqrt(ref2 / count) + 1e-12), *rule.max_rel_rms));
  if (rule.min_cos) {
    const double one_minus_cos = ref2 == 0 && cand2 == 0 ? 0.0 : 1.0 - dot / std::sqrt(ref2 * cand2);
    worst = std::max(worst, over(std::max(0.0, one_minus_cos), 1.0 - *rule.min_cos));
  }
  return worst;
}

std::string ratio_str(double ratio) {
  if (std::isinf(ratio)) return "inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2g", ratio);
  return buf;
}

std::string index_str(const Shape& shape, std::int64_t flat) {
  if (flat < 0) return "-";
  std::vector<std::int64_t> idx(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
  std::string s = "[";
  for (std::size_t d = 0; d < idx.size(); ++d) s += (d ? ", " : "") + std::to_string(idx[d]);
  return s + "]";
}

TensorResult compare_tensor(const std::string& name, const Tensor& ref, const Tensor& cand, const Rule& rule) {
  TensorResult t;
  t.name = name;
  t.shape = ref.shape();
  t.rule = rule;
  if (is_float(ref.dtype())) {
    t.m = compare(ref, cand);
    t.tol = tolerances(ref, cand);
    if (rule.atol || rule.rtol) {
      const double atol = rule.atol.value_or(0.0), rtol = rule.rtol.value_or(0.0);
      // Norm-wise: one bound for every element, scaled by the tensor's largest reference value.
      t.mismatched = rule.normwise.value_or(false) ? mismatches(ref, cand, atol + rtol * t.m.ref_max_abs, 0.0)
                                                   : mismatches(ref, cand, atol, rtol);
    }
  } else {
    t.m.numel = ref.numel();
    t.m.bitwise = ref.bitwise_equal(cand);
    t.mismatched = t.m.bitwise ? 0 : mismatches(ref.to(DType::F64), cand.to(DType::F64), 0.0, 0.0);
  }
  t.ratio = is_float(ref.dtype()) ? error_ratio(ref, cand, rule, t.m.ref_max_abs) : 0.0;
  if (!t.m.bitwise && (rule.exact.value_or(false) || !is_float(ref.dtype())))
    t.ratio = std::numeric_limits<double>::infinity();
  t.numeric_equal = numerically_equal(ref, cand);
  t.why = verdict(t, ref, cand);
  t.pass = t.why.empty();
  return t;
}

void compare_files(const TensorFile& ref, const TensorFile& cand, const Policy& policy, const std::string& file,
                   Comparison& into) {
  for (const auto& [name, r] : ref.tensors) {
    auto it = cand.tensors.find(name);
    if (it == cand.tensors.end()) {
      into.tensors.push_back(structural(file, name, "missing in CAND"));
      continue;
    }
    const Tensor& c = it->second;
    if (r.dtype() != c.dtype() || r.shape() != c.shape()) {
      into.tensors.push_back(structural(file, name, "REF " + describe(r) + ", CAND " + describe(c)));
      continue;
    }
    TensorResult t = compare_tensor(name, r, c, policy.rule_for(name));
    t.file = file;
    into.tensors.push_back(std::move(t));
  }
  for (const auto& [name, c] : cand.tensors)
    if (!ref.has(name)) into.tensors.push_back(structural(file, name, "only in CAND"));
}

Comparison compare_paths(const std::string& ref, const std::string& cand, const Policy& policy) {
  check_exists(ref, "REF");
  check_exists(cand, "CAND");
  Comparison out;
  out.name = fs::path(cand).filename().string();
  if (out.name.empty()) out.name = fs::path(cand).parent_path().filename().string();
  out.policy = policy.name;
  const bool ref_dir = fs::is_directory(ref), cand_dir = fs::is_directory(cand);
  if (ref_dir != cand_dir)
    throw ConfigError("REF '" + ref + "' and CAND '" + cand + "' must both be files or both be directories");
  if (!ref_dir) {
    compare_files(read_safetensors(ref), read_safetensors(cand), policy, "", out);
    return out;
  }
  const auto ref_files = safetensors_in(ref), cand_files = safetensors_in(cand);
  if (ref_files.empty()) throw ConfigError("REF directory '" + ref + "' holds no .safetensors files");
  for (const auto& [name, path] : ref_files) {
    auto it = cand_files.find(name);
    if (it == cand_files.end()) out.tensors.push_back(structural(name, "*", "file missing in CAND"));
    else compare_files(read_safetensors(path.string()), read_safetensors(it->second.string()), policy, name, out);
  }
  for (const auto& [name, path] : cand_files)
    if (!ref_files.count(name)) out.tensors.push_back(structural(name, "*", "file only in CAND"));
  return out;
}

}  // namespace gdnv::probes
