#pragma once
// SHA-256 (FIPS 180-4) of a byte string, for the fixture manifest's integrity check. Written here
// rather than taken from OpenSSL so the project builds with only the packages ./run installs.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gdnv {

// Lower-case hex digest, 64 characters.
std::string sha256_hex(const std::uint8_t* data, std::size_t size);
std::string sha256_hex(const std::vector<std::uint8_t>& bytes);

}  // namespace gdnv
