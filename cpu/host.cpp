#include "cpu/host.hpp"

#include <cstddef>
#include <string>
#include <type_traits>

#include "core/half.hpp"

namespace gdnv::cpu {
namespace {

// n elements From -> To; to bf16 rounds to nearest even (via fp32, the compute type of bf16 storage).
template <class To, class From>
void convert(const From* from, std::int64_t n, To* to) {
  for (std::int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<From, bf16_t>) to[i] = static_cast<To>(bf16_to_float(from[i].bits));
    else if constexpr (std::is_same_v<To, bf16_t>) to[i].bits = float_to_bf16(static_cast<float>(from[i]));
    else to[i] = static_cast<To>(from[i]);
  }
}

[[noreturn]] void not_float(DType d) {
  throw Error("cpu backend: " + std::string(dtype_name(d)) + " is not a float dtype (F64, F32 or BF16)");
}

}  // namespace

Buffer host_buffer(DType dtype, Shape shape) {
  const auto bytes = static_cast<std::size_t>(shape_numel(shape)) * dtype_size(dtype);
  std::shared_ptr<std::byte[]> storage(new std::byte[bytes]());  // value-initialised: zeros
  return Buffer(dtype, std::move(shape), std::move(storage));
}

template <class C>
Array<C> to_compute(const Buffer& b) {
  Array<C> out(static_cast<std::size_t>(b.numel()));
  switch (b.dtype()) {
    case DType::F64:
      convert(b.as<double>(), b.numel(), out.data());
      break;
    case DType::F32:
      convert(b.as<float>(), b.numel(), out.data());
      break;
    case DType::BF16:
      convert(b.as<bf16_t>(), b.numel(), out.data());
      break;
    default:
      not_float(b.dtype());
  }
  return out;
}

template <class C>
Buffer from_compute(const Array<C>& values, DType dtype, Shape shape) {
  Buffer b = host_buffer(dtype, std::move(shape));
  if (static_cast<std::int64_t>(values.size()) != b.numel())
    throw Error("cpu backend: " + std::to_string(values.size()) + " values for shape " + shape_str(b.shape()));
  switch (dtype) {
    case DType::F64:
      convert(values.data(), b.numel(), b.as<double>());
      break;
    case DType::F32:
      convert(values.data(), b.numel(), b.as<float>());
      break;
    case DType::BF16:
      convert(values.data(), b.numel(), b.as<bf16_t>());
      break;
    default:
      not_float(dtype);
  }
  return b;
}

template Array<float> to_compute(const Buffer&);
template Array<double> to_compute(const Buffer&);
template Buffer from_compute(const Array<float>&, DType, Shape);
template Buffer from_compute(const Array<double>&, DType, Shape);

}  // namespace gdnv::cpu
