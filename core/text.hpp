#pragma once
// Text from untrusted files (tensor names, metadata, paths) on its way to a terminal.
#include <string>
#include <string_view>
#include <vector>

namespace gdnv {

// `s` with every byte that is not part of printable text written as `\xNN`: ASCII control bytes
// (newline included, so a message stays one line), DEL, and bytes that do not form valid UTF-8.
// A backslash becomes `\\`, so the escaped form is unambiguous. Valid UTF-8 letters pass as they are.
std::string printable(std::string_view s);

// "8,40,16": integers as the command line takes them (--lengths, --dynamic-cp) and messages quote them.
template <class Int>
std::string comma_list(const std::vector<Int>& values) {
  std::string s;
  for (std::size_t i = 0; i < values.size(); ++i) s += (i ? "," : "") + std::to_string(values[i]);
  return s;
}

// `lines` with every line indented by four spaces (a block under a heading).
std::string indented(const std::string& lines);

}  // namespace gdnv
