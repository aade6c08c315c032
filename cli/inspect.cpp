// gdn-verify inspect FILE...: a polygraphy-inspect-style summary of safetensors files.
#include <cmath>
#include <iomanip>
#include <limits>
#include <ostream>

#include "cli/command.hpp"
#include "core/safetensors.hpp"
#include "core/text.hpp"

namespace gdnv::cli {
namespace {

struct Stats {
  double min = std::numeric_limits<double>::infinity(), max = -std::numeric_limits<double>::infinity(), mean = 0;
  std::int64_t nan = 0, inf = 0, finite = 0;
};

Stats stats_of(const Tensor& t) {
  Stats s;
  double sum = 0;
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    const double v = t.get(i);
    if (std::isnan(v)) ++s.nan;
    else if (std::isinf(v)) ++s.inf;
    else {
      s.min = std::min(s.min, v);
      s.max = std::max(s.max, v);
      sum += v;
      ++s.finite;
    }
  }
  s.mean = s.finite ? sum / static_cast<double>(s.finite) : std::numeric_limits<double>::quiet_NaN();
  return s;
}

void print_file(const std::string& path, std::ostream& out) {
  const TensorFile file = read_safetensors(path);
  out << printable(path) << ": " << file.tensors.size() << " tensors\n";
  if (!file.metadata.empty()) {
    out << "  metadata:\n";
    for (const auto& [k, v] : file.metadata) out << "    " << printable(k) << " = " << printable(v) << "\n";
  }
  out << "  " << std::left << std::setw(34) << "name" << std::setw(6) << "dtype" << std::setw(18) << "shape"
      << std::right << std::setw(13) << "min" << std::setw(13) << "max" << std::setw(13) << "mean" << std::setw(6)
      << "nan" << std::setw(6) << "inf"
      << "\n";
  for (const auto& [name, t] : file.tensors) {
    const Stats s = stats_of(t);
    out << "  " << std::left << std::setw(34) << printable(name) << std::setw(6) << dtype_name(t.dtype())
        << std::setw(18) << shape_str(t.shape()) << std::right << std::setprecision(5) << std::setw(13);
    if (s.finite) out << s.min << std::setw(13) << s.max << std::setw(13) << s.mean;
    else out << "-" << std::setw(13) << "-" << std::setw(13) << "-";
    out << std::setw(6) << s.nan << std::setw(6) << s.inf << "\n";
  }
}

}  // namespace

int inspect_main(const std::vector<std::string>& args, std::ostream& out) {
  po::options_description options("inspect options");
  options.add_options()("file", po::value<std::vector<std::string>>()->required(), "safetensors file(s)");
  po::positional_options_description positional;
  positional.add("file", -1);
  const auto vm = parse_options("inspect", "FILE [FILE...]", options, positional, args, out);
  if (!vm) return kPass;
  for (const auto& path : (*vm)["file"].as<std::vector<std::string>>()) print_file(path, out);
  return kPass;
}

}  // namespace gdnv::cli
