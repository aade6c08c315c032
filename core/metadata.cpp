#include "core/metadata.hpp"

#include <charconv>
#include <cmath>

#include "core/error.hpp"

namespace gdnv {

std::string format_number(double v) {
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

std::string format_bool(bool v) { return v ? "true" : "false"; }

namespace {
const std::string* find(const Metadata& m, const std::string& key) {
  auto it = m.find(key);
  return it == m.end() ? nullptr : &it->second;
}
[[noreturn]] void bad(const std::string& source, const std::string& key, const std::string& value, const char* want) {
  throw FormatError(source + ": metadata '" + key + "' = '" + value + "' is not " + want);
}
}  // namespace

std::optional<double> meta_number(const Metadata& m, const std::string& key, const std::string& source) {
  const std::string* s = find(m, key);
  if (!s) return std::nullopt;
  double v = 0;
  const auto res = std::from_chars(s->data(), s->data() + s->size(), v);
  if (res.ec != std::errc() || res.ptr != s->data() + s->size() || !std::isfinite(v))
    bad(source, key, *s, "a finite decimal number");
  return v;
}

std::optional<long long> meta_int(const Metadata& m, const std::string& key, const std::string& source) {
  const std::string* s = find(m, key);
  if (!s) return std::nullopt;
  long long v = 0;
  const auto res = std::from_chars(s->data(), s->data() + s->size(), v);
  if (res.ec != std::errc() || res.ptr != s->data() + s->size()) bad(source, key, *s, "an integer");
  return v;
}

std::optional<bool> meta_bool(const Metadata& m, const std::string& key, const std::string& source) {
  const std::string* s = find(m, key);
  if (!s) return std::nullopt;
  if (*s == "true") return true;
  if (*s == "false") return false;
  bad(source, key, *s, "'true' or 'false'");
}

}  // namespace gdnv
