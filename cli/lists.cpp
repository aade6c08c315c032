#include "cli/lists.hpp"

#include <charconv>

#include "core/error.hpp"

namespace gdnv::cli {

std::vector<std::int64_t> parse_int_list(const std::string& text, const std::string& option, const std::string& example) {
  std::vector<std::int64_t> values;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    const std::size_t comma = std::min(text.find(',', begin), text.size());
    std::int64_t v = 0;
    const char* first = text.data() + begin;
    const char* last = text.data() + comma;
    const auto res = std::from_chars(first, last, v);
    if (first == last || res.ec != std::errc() || res.ptr != last)
      throw ConfigError(option + ": '" + text.substr(begin, comma - begin) +
                        "' is not an integer; give a comma-separated list like " + example);
    values.push_back(v);
    begin = comma + 1;
  }
  return values;
}

}  // namespace gdnv::cli
