#include "core/dtype.hpp"

#include <array>

#include "core/error.hpp"

namespace gdnv {
namespace {
struct DTypeInfo {
  DType type;
  std::string_view name;
  std::size_t size;
  std::string_view option;  // empty: not a storage dtype
};
constexpr std::array<DTypeInfo, 6> kTypes{{{DType::F64, "F64", 8, "fp64"},
                                           {DType::F32, "F32", 4, "fp32"},
                                           {DType::BF16, "BF16", 2, "bf16"},
                                           {DType::F16, "F16", 2, ""},
                                           {DType::I64, "I64", 8, ""},
                                           {DType::I32, "I32", 4, ""}}};
}  // namespace

std::size_t dtype_size(DType t) { return kTypes[static_cast<std::size_t>(t)].size; }
std::string_view dtype_name(DType t) { return kTypes[static_cast<std::size_t>(t)].name; }
DType state_dtype_for(DType storage) { return storage == DType::F64 ? DType::F64 : DType::F32; }
bool is_float(DType t) { return t != DType::I64 && t != DType::I32; }

DType parse_dtype(std::string_view name, const std::string& what) {
  for (const auto& info : kTypes)
    if (info.name == name) return info.type;
  throw FormatError(what + ": unknown dtype '" + std::string(name) + "' (supported: F64, F32, BF16, F16, I64, I32)");
}

std::string_view dtype_option_name(DType t) {
  const std::string_view option = kTypes[static_cast<std::size_t>(t)].option;
  if (option.empty()) throw Error(std::string(dtype_name(t)) + " is not a storage dtype (fp64, fp32 or bf16)");
  return option;
}

std::optional<DType> find_dtype_option(std::string_view name) {
  for (const auto& info : kTypes)
    if (!info.option.empty() && info.option == name) return info.type;
  return std::nullopt;
}

DType parse_dtype_option(std::string_view name) {
  if (const auto t = find_dtype_option(name)) return *t;
  throw ConfigError("--dtype '" + std::string(name) + "' is not supported: use bf16, fp32 or fp64");
}

}  // namespace gdnv
