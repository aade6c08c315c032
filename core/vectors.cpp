#include "core/vectors.hpp"

#include <algorithm>
#include <filesystem>

#include "core/file.hpp"

namespace gdnv {

std::string vector_path(std::string_view file) { return GDNV_TEST_DATA "/vectors/" + std::string(file); }

nlohmann::json read_vector_json(std::string_view file) {
  return nlohmann::json::parse(read_file_text(vector_path(file)));
}

nlohmann::json vector_cases(std::string_view file) { return read_vector_json(file).at("cases"); }

TensorFile read_vector(std::string_view file) { return read_safetensors(vector_path(file)); }

std::vector<std::string> vector_files() {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(vector_path("")))
    if (const auto ext = entry.path().extension(); ext == ".json" || ext == ".safetensors")
      files.push_back(entry.path().filename().string());
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace gdnv
