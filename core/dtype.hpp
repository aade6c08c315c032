#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace gdnv {

// Storage dtypes, named as in the safetensors header.
enum class DType : std::uint8_t { F64, F32, BF16, F16, I64, I32 };

std::size_t dtype_size(DType t);
std::string_view dtype_name(DType t);
bool is_float(DType t);
// The dtype of the states, gates and parameter gradients kept beside `storage`: fp64 for fp64, else
// fp32 (docs/DESIGN.md §4).
DType state_dtype_for(DType storage);
// Parses a safetensors dtype name ("F32", ...); throws FormatError naming `what` when unknown.
DType parse_dtype(std::string_view name, const std::string& what);

// The storage dtypes' option names ("fp64", "fp32", "bf16"), as --dtype and the fixtures' metadata spell
// them; the safetensors header keeps dtype_name's.
std::string_view dtype_option_name(DType t);  // throws Error for a dtype that is no storage dtype
std::optional<DType> find_dtype_option(std::string_view name);
// --dtype: ConfigError naming the choices for anything but an option name.
DType parse_dtype_option(std::string_view name);

}  // namespace gdnv
