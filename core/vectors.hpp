#pragma once
// The upstream reference vectors (tests/data/vectors, described in its README.md): FLA's, torch's and
// Megatron-Core's own answers, read here for every test, property and gate step that uses them.
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/safetensors.hpp"

namespace gdnv {

// The path of a vector file, e.g. "layouts_megatron.json".
std::string vector_path(std::string_view file);
// A JSON vector file, whole.
nlohmann::json read_vector_json(std::string_view file);
// A JSON vector file's "cases" (a value: a range-for over a member of a temporary would read freed memory).
nlohmann::json vector_cases(std::string_view file);
// A .safetensors vector file.
TensorFile read_vector(std::string_view file);
// Every vector file (.json and .safetensors), by name, sorted.
std::vector<std::string> vector_files();

}  // namespace gdnv
