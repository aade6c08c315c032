#pragma once
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace gdnv {

// Whole-file read; IoError naming the path when it cannot be opened or read.
std::vector<std::uint8_t> read_file_bytes(const std::string& path);
std::string read_file_text(const std::string& path);
// Writes `path.tmp.<pid>` then renames it over `path`: readers never see a partial file, and a
// failed write leaves nothing behind.
void write_file_atomic(const std::string& path, const std::function<bool(std::FILE*)>& write);
void write_file_atomic(const std::string& path, const std::vector<std::uint8_t>& bytes);
void write_file_atomic(const std::string& path, const std::string& text);

}  // namespace gdnv
