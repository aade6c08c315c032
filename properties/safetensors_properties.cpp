// Any tensor set round-trips through safetensors bit-exactly: every dtype, empty and 0-d tensors,
// unicode names, arbitrary metadata.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "core/safetensors.hpp"

namespace gdnv {
namespace {

rc::Gen<Tensor> gen_tensor() {
  return rc::gen::exec([] {
    const auto dtype = *rc::gen::element(DType::F64, DType::F32, DType::BF16, DType::F16, DType::I64, DType::I32);
    const auto rank = *rc::gen::inRange(0, 4);
    Shape shape;
    for (int i = 0; i < rank; ++i) shape.push_back(*rc::gen::inRange<std::int64_t>(0, 5));
    Tensor t(dtype, shape);
    // Raw random bytes: covers NaN payloads, -0, subnormals and infinities without special-casing.
    const auto bytes = *rc::gen::container<std::vector<std::uint8_t>>(t.nbytes(), rc::gen::arbitrary<std::uint8_t>());
    std::copy(bytes.begin(), bytes.end(), t.bytes());
    return t;
  });
}

rc::Gen<std::string> gen_name() {
  return rc::gen::oneOf(rc::gen::element<std::string>("q", "grad::in_proj.weight", "état_ß", "张量", "🙂x"),
                        rc::gen::nonEmpty(rc::gen::container<std::string>(rc::gen::inRange('a', 'z'))));
}

RC_GTEST_PROP(SafetensorsProperties, AnyTensorSetRoundTripsBitExactly, ()) {
  TensorFile file;
  const auto n = *rc::gen::inRange(0, 6);
  for (int i = 0; i < n; ++i) file.tensors.insert_or_assign(*gen_name(), *gen_tensor());
  const auto meta_n = *rc::gen::inRange(0, 3);
  for (int i = 0; i < meta_n; ++i)
    file.metadata[*gen_name()] =
        *rc::gen::oneOf(gen_name(), rc::gen::container<std::string>(rc::gen::inRange(' ', '~')));

  const auto bytes = serialize_safetensors(file);
  RC_ASSERT(bytes.size() >= 8);
  std::uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
  RC_ASSERT(header_len % 8 == 0);  // data section 8-byte aligned

  const TensorFile back = parse_safetensors(bytes.data(), bytes.size(), "roundtrip");
  RC_ASSERT(back.metadata == file.metadata);
  RC_ASSERT(back.tensors.size() == file.tensors.size());
  for (const auto& [name, t] : file.tensors) {
    RC_ASSERT(back.has(name));
    RC_ASSERT(back.at(name, "roundtrip").bitwise_equal(t));
  }
}

}  // namespace
}  // namespace gdnv
