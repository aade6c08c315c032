#include "core/gnuplot.hpp"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "core/error.hpp"
#include "core/file.hpp"

namespace gdnv {

GnuplotSvg::GnuplotSvg(const std::string& name)
    : dir_((std::filesystem::temp_directory_path() / ("gdnv_" + name + "_" + std::to_string(::getpid()))).string()),
      data_file_(dir_ + "/plot.dat") {}

std::string GnuplotSvg::render(const std::string& data, int width, int height, const std::string& script,
                               const std::string& option) const {
  const std::string script_file = dir_ + "/plot.gp", svg_file = dir_ + "/plot.svg";
  std::filesystem::create_directories(dir_);
  write_file_atomic(data_file_, data);
  write_file_atomic(script_file, "set terminal svg size " + std::to_string(width) + "," + std::to_string(height) +
                                     " dynamic noenhanced\nset output '" + svg_file + "'\n" + script);
  const int rc = std::system(("gnuplot " + script_file + " 2>/dev/null").c_str());
  const bool ok = rc == 0 && std::filesystem::is_regular_file(svg_file);
  const std::string svg = ok ? read_file_text(svg_file) : "";
  std::filesystem::remove_all(dir_);
  if (!ok) throw ConfigError(option + ": gnuplot failed: install gnuplot (apt-get install gnuplot-nox) or drop --svg");
  return svg;
}

}  // namespace gdnv
