#pragma once
// Typed access to safetensors metadata (docs/DESIGN.md §5: values are strings; booleans true/false,
// numbers in decimal such as "0.37" or "1e-06").
#include <optional>
#include <string>

#include "core/safetensors.hpp"

namespace gdnv {

// Shortest decimal that round-trips (Python repr style: 0.37, 1e-06).
std::string format_number(double v);
std::string format_bool(bool v);

// Parsed values; FormatError naming `source`, the key and the bad value when it does not parse.
std::optional<double> meta_number(const Metadata& m, const std::string& key, const std::string& source);
std::optional<long long> meta_int(const Metadata& m, const std::string& key, const std::string& source);
std::optional<bool> meta_bool(const Metadata& m, const std::string& key, const std::string& source);

}  // namespace gdnv
