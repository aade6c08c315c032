// libFuzzer target: any byte string either parses or raises FormatError; never a crash, leak or UB.
#include <cstdint>

#include "core/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const gdnv::TensorFile file = gdnv::parse_safetensors(data, size, "fuzz");
    const auto bytes = gdnv::serialize_safetensors(file);
    (void)gdnv::parse_safetensors(bytes.data(), bytes.size(), "fuzz-reserialized");
  } catch (const gdnv::FormatError&) {
  }
  return 0;
}
