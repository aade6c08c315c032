#include "core/text.hpp"

#include <cstdint>

namespace gdnv {
namespace {

// Length of the valid UTF-8 sequence starting at s[i] (2 to 4 bytes, no overlong forms, no
// surrogates, at most U+10FFFF), or 0.
std::size_t utf8_length(std::string_view s, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<std::uint8_t>(s[k]); };
  const std::uint8_t b = byte(i);
  std::size_t n;
  std::uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b >= 0xC2 && b <= 0xDF) n = 2;
  else if (b >= 0xE0 && b <= 0xEF) n = 3, lo = b == 0xE0 ? 0xA0 : 0x80, hi = b == 0xED ? 0x9F : 0xBF;
  else if (b >= 0xF0 && b <= 0xF4) n = 4, lo = b == 0xF0 ? 0x90 : 0x80, hi = b == 0xF4 ? 0x8F : 0xBF;
  else return 0;
  if (i + n > s.size() || byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k)
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  return n;
}

}  // namespace

std::string printable(std::string_view s) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const auto b = static_cast<std::uint8_t>(s[i]);
    if (b == '\\') {
      out += "\\\\";
      ++i;
    } else if (b >= 0x20 && b < 0x7F) {
      out += s[i++];
    } else if (const std::size_t n = b >= 0x80 ? utf8_length(s, i) : 0) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out += {'\\', 'x', hex[b >> 4], hex[b & 0xF]};
      ++i;
    }
  }
  return out;
}

std::string indented(const std::string& lines) {
  std::string out;
  std::size_t begin = 0;
  while (begin < lines.size()) {
    const std::size_t end = lines.find('\n', begin);
    out += "    " + lines.substr(begin, end - begin + 1);
    begin = end == std::string::npos ? lines.size() : end + 1;
  }
  return out;
}

}  // namespace gdnv
