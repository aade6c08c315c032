#pragma once
// An SVG drawn by gnuplot from a data file and a script, for the commands that plot (`plan --svg`,
// `train --svg`). The files live in a private temporary directory that is removed afterwards.
#include <string>

namespace gdnv {

class GnuplotSvg {
 public:
  explicit GnuplotSvg(const std::string& name);  // `name` tells concurrent plotters' directories apart

  // The data file the script's `plot` commands read.
  const std::string& data_file() const { return data_file_; }

  // Writes `data`, runs gnuplot on an SVG terminal of `width` x `height` followed by `script`, and returns
  // the SVG text (the caller writes it, after everything that can fail). Throws ConfigError naming
  // `option` (e.g. "--svg out.svg") when gnuplot is missing or fails.
  std::string render(const std::string& data, int width, int height, const std::string& script,
                     const std::string& option) const;

 private:
  std::string dir_, data_file_;
};

}  // namespace gdnv
