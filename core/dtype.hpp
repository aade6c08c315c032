#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace gdnv {

// Storage dtypes, named as in the safetensors header.
enum class DType : std::uint8_t { F64, F32, BF16, F16, I64, I32 };

std::size_t dtype_size(DType t);
std::string_view dtype_name(DType t);
bool is_float(DType t);
// Parses a safetensors dtype name ("F32", ...); throws FormatError naming `what` when unknown.
DType parse_dtype(std::string_view name, const std::string& what);

}  // namespace gdnv
