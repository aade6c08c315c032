#include "core/safetensors.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "core/file.hpp"

namespace gdnv {
namespace {

using json = nlohmann::json;

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  std::uint64_t begin, end;
};

[[noreturn]] void fail(const std::string& source, const std::string& what) { throw FormatError(source + ": " + what); }

[[noreturn]] void fail_tensor(const std::string& source, const std::string& name, const std::string& what) {
  fail(source, "tensor '" + name + "': " + what);
}

// Parses the header JSON, rejecting duplicate top-level names (which nlohmann would silently merge).
json parse_header(const char* text, std::size_t size, const std::string& source) {
  std::set<std::string> names;
  std::string duplicate;
  json::parser_callback_t cb = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key && !names.insert(parsed.get<std::string>()).second)
      duplicate = parsed.get<std::string>();
    return true;
  };
  json header;
  try {
    header = json::parse(text, text + size, cb);
  } catch (const json::exception& e) {
    fail(source, std::string("header is not valid JSON (") + e.what() + ")");
  }
  if (!duplicate.empty()) fail_tensor(source, duplicate, "name appears twice in the header");
  if (!header.is_object()) fail(source, "header is not a JSON object");
  return header;
}

std::uint64_t checked_u64(const json& v, const std::string& source, const std::string& name, const char* field) {
  if (!v.is_number_unsigned()) fail_tensor(source, name, std::string(field) + " must hold non-negative integers");
  return v.get<std::uint64_t>();
}

Entry parse_entry(const std::string& name, const json& spec, const std::string& source) {
  if (!spec.is_object()) fail_tensor(source, name, "entry is not an object");
  for (const char* field : {"dtype", "shape", "data_offsets"})
    if (!spec.contains(field)) fail_tensor(source, name, std::string("missing '") + field + "'");
  if (!spec["dtype"].is_string()) fail_tensor(source, name, "dtype is not a string");
  Entry e{name, parse_dtype(spec["dtype"].get<std::string>(), source + ": tensor '" + name + "'"), {}, 0, 0};
  if (!spec["shape"].is_array()) fail_tensor(source, name, "shape is not an array");
  std::uint64_t numel = 1;
  for (const auto& d : spec["shape"]) {
    const std::uint64_t n = checked_u64(d, source, name, "shape");
    if (n != 0 && numel > std::numeric_limits<std::int64_t>::max() / n)
      fail_tensor(source, name, "shape overflows 64-bit element count");
    numel *= n;
    e.shape.push_back(static_cast<std::int64_t>(n));
  }
  const auto& off = spec["data_offsets"];
  if (!off.is_array() || off.size() != 2) fail_tensor(source, name, "data_offsets must be [begin, end]");
  e.begin = checked_u64(off[0], source, name, "data_offsets");
  e.end = checked_u64(off[1], source, name, "data_offsets");
  if (e.end < e.begin) fail_tensor(source, name, "data_offsets end < begin");
  const std::uint64_t size = dtype_size(e.dtype);
  if (numel > std::numeric_limits<std::uint64_t>::max() / size || e.end - e.begin != numel * size)
    fail_tensor(source, name,
                "byte count " + std::to_string(e.end - e.begin) + " != numel " + std::to_string(numel) + " x " +
                    std::to_string(size) + " bytes");
  return e;
}

Metadata parse_metadata(const json& meta, const std::string& source) {
  if (!meta.is_object()) fail(source, "__metadata__ is not an object");
  Metadata out;
  for (const auto& [key, value] : meta.items()) {
    if (!value.is_string()) fail(source, "__metadata__ value of '" + key + "' is not a string");
    out[key] = value.get<std::string>();
  }
  return out;
}

// Data offsets must tile the data area exactly: sorted by begin, no overlap, no holes, nothing after.
void check_tiling(std::vector<Entry>& entries, std::uint64_t data_size, const std::string& source) {
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  std::uint64_t cursor = 0;
  for (const auto& e : entries) {
    if (e.end > data_size)
      fail_tensor(source, e.name,
                  "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                      ") run past the end of the data (" + std::to_string(data_size) + " bytes; file truncated?)");
    if (e.begin < cursor) fail_tensor(source, e.name, "data overlaps the previous tensor");
    if (e.begin > cursor)
      fail_tensor(source, e.name, "hole of " + std::to_string(e.begin - cursor) + " bytes before this tensor's data");
    cursor = e.end;
  }
  if (cursor != data_size)
    fail(source, std::to_string(data_size - cursor) + " trailing bytes after the last tensor's data");
}

struct Layout {
  Metadata metadata;
  std::vector<Entry> entries;  // sorted by data offset, tiling the data area exactly
};

std::uint64_t header_length(const std::uint8_t* first8, std::uint64_t file_size, const std::string& source) {
  if (file_size < 8)
    fail(source, "truncated: " + std::to_string(file_size) + " bytes, fewer than the 8-byte header length");
  std::uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | first8[i];
  if (len > kMaxHeaderBytes) fail(source, "header length " + std::to_string(len) + " exceeds the 100 MB limit");
  if (len > file_size - 8)
    fail(source, "header length " + std::to_string(len) + " is larger than the " + std::to_string(file_size - 8) +
                     " bytes after it (file truncated?)");
  return len;
}

Layout parse_layout(const char* header_text, std::uint64_t header_len, std::uint64_t data_size,
                    const std::string& source) {
  const json header = parse_header(header_text, header_len, source);
  Layout layout;
  for (const auto& [name, spec] : header.items()) {
    if (name == "__metadata__") layout.metadata = parse_metadata(spec, source);
    else layout.entries.push_back(parse_entry(name, spec, source));
  }
  check_tiling(layout.entries, data_size, source);
  return layout;
}

std::string header_text(const TensorFile& file) {
  json header = json::object();
  if (!file.metadata.empty()) header["__metadata__"] = file.metadata;
  std::uint64_t offset = 0;
  for (const auto& [name, t] : file.tensors) {
    if (name == "__metadata__") throw FormatError("safetensors: '__metadata__' is reserved and cannot name a tensor");
    header[name] = {{"dtype", std::string(dtype_name(t.dtype()))},
                    {"shape", t.shape()},
                    {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& e) {
    throw FormatError(std::string("safetensors: cannot encode header (") + e.what() + ")");
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // pad so the data starts 8-byte aligned
  std::string out;
  out.reserve(8 + text.size());
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(static_cast<std::uint64_t>(text.size()) >> (8 * i)));
  return out.append(text);
}

}  // namespace

const Tensor& TensorFile::at(const std::string& name, const std::string& source) const {
  auto it = tensors.find(name);
  if (it == tensors.end()) throw FormatError(source + ": tensor '" + name + "' is missing");
  return it->second;
}

TensorFile parse_safetensors(const std::uint8_t* data, std::size_t size, const std::string& source) {
  const std::uint64_t len = header_length(data, size, source);
  Layout layout = parse_layout(reinterpret_cast<const char*>(data + 8), len, size - 8 - len, source);
  const std::uint8_t* body = data + 8 + len;
  TensorFile file{{}, std::move(layout.metadata)};
  for (auto& e : layout.entries) {
    Tensor t = Tensor::uninitialized(e.dtype, std::move(e.shape));
    std::copy(body + e.begin, body + e.end, t.bytes());
    file.tensors.emplace(e.name, std::move(t));
  }
  return file;
}

// Reads the header, then every tensor straight into its own buffer (on every core): peak memory is the
// tensors alone.
TensorFile read_safetensors(const std::string& path, std::uint64_t piece) {
  require_regular_input(path);
  std::error_code ec;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(path + ": cannot open for reading (" + std::strerror(errno) + ")");
  const std::uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) throw IoError(path + ": cannot stat (" + ec.message() + ")");
  std::uint8_t first8[8] = {};
  in.read(reinterpret_cast<char*>(first8), std::min<std::uint64_t>(size, 8));
  const std::uint64_t len = header_length(first8, size, path);
  std::string header(len, '\0');
  in.read(header.data(), static_cast<std::streamsize>(len));
  Layout layout = parse_layout(header.data(), len, size - 8 - len, path);
  TensorFile file{{}, std::move(layout.metadata)};
  std::vector<FileSpan> spans;
  for (auto& e : layout.entries) {
    Tensor& t = file.tensors.emplace(e.name, Tensor::uninitialized(e.dtype, std::move(e.shape))).first->second;
    spans.push_back({t.bytes(), t.nbytes(), 8 + len + e.begin});
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  const bool read = fd >= 0 && read_spans(fd, spans, piece);
  const std::string why = std::strerror(errno);
  if (fd >= 0) ::close(fd);
  if (!read) throw IoError(path + ": read failed (" + why + ")");
  return file;
}

std::vector<std::uint8_t> serialize_safetensors(const TensorFile& file) {
  const std::string head = header_text(file);
  std::vector<std::uint8_t> out(head.begin(), head.end());
  for (const auto& [name, t] : file.tensors) out.insert(out.end(), t.bytes(), t.bytes() + t.nbytes());
  return out;
}

void write_safetensors(const std::string& path, const TensorFile& file) {
  const std::string head = header_text(file);
  write_file_atomic(path, [&](std::FILE* f) {
    bool ok = std::fwrite(head.data(), 1, head.size(), f) == head.size();
    for (const auto& [name, t] : file.tensors) ok = ok && std::fwrite(t.bytes(), 1, t.nbytes(), f) == t.nbytes();
    return ok;
  });
}

}  // namespace gdnv
