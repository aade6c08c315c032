#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace gdnv::cli {

// "0,16,40" -> {0, 16, 40}; ConfigError naming `option` and showing `example` on anything else.
std::vector<std::int64_t> parse_int_list(const std::string& text, const std::string& option, const std::string& example);

}  // namespace gdnv::cli
