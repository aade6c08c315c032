#pragma once
// safetensors files (docs/DESIGN.md §5): 8-byte little-endian header length, a JSON header
// {name: {dtype, shape, data_offsets}, "__metadata__": {string: string}}, then the raw row-major data.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/file.hpp"
#include "core/tensor.hpp"

namespace gdnv {

using Metadata = std::map<std::string, std::string>;

struct TensorFile {
  std::map<std::string, Tensor> tensors;  // sorted by name, which is also the on-disk order we write
  Metadata metadata;

  bool has(const std::string& name) const { return tensors.count(name) != 0; }
  // The named tensor; throws FormatError naming `source` and the tensor when it is absent.
  const Tensor& at(const std::string& name, const std::string& source) const;
};

// Largest header we accept: a real header for thousands of tensors is well under 1 MB.
constexpr std::uint64_t kMaxHeaderBytes = 100ull << 20;

// Parses a whole file image. Every malformation is a FormatError whose message starts with `source`
// and names the tensor involved.
TensorFile parse_safetensors(const std::uint8_t* data, std::size_t size, const std::string& source);
// Reads the tensors with read_spans in pieces of `piece` bytes (core/file.hpp).
TensorFile read_safetensors(const std::string& path, std::uint64_t piece = kReadPiece);

std::vector<std::uint8_t> serialize_safetensors(const TensorFile& file);
// Atomic: writes a temporary file beside `path` and renames it, so a failure leaves no partial file.
void write_safetensors(const std::string& path, const TensorFile& file);

}  // namespace gdnv
