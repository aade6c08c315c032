#include "core/tensor.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/half.hpp"
#include "core/parallel.hpp"

namespace gdnv {

std::int64_t shape_numel(const Shape& shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

Tensor::Tensor(DType dtype, Shape shape) : Tensor(dtype, std::move(shape), Uninitialized{}) {
  std::fill(bytes_.begin(), bytes_.end(), 0);
}

Tensor::Tensor(DType dtype, Shape shape, Uninitialized) : dtype_(dtype), shape_(std::move(shape)) {
  for (auto d : shape_)
    if (d < 0) throw Error("Tensor: negative dimension in shape " + shape_str(shape_));
  bytes_ = Bytes(static_cast<std::size_t>(numel()) * dtype_size(dtype_));
}

Tensor Tensor::uninitialized(DType dtype, Shape shape) { return Tensor(dtype, std::move(shape), Uninitialized{}); }

Tensor::Tensor(DType dtype, Shape shape, const std::vector<std::uint8_t>& bytes)
    : dtype_(dtype), shape_(std::move(shape)), bytes_(bytes.data(), bytes.size()) {
  if (bytes_.size() != static_cast<std::size_t>(numel()) * dtype_size(dtype_))
    throw Error("Tensor: " + std::to_string(bytes_.size()) + " bytes for " + std::string(dtype_name(dtype_)) + " " +
                shape_str(shape_));
}

Tensor Tensor::from_f64(const std::vector<double>& values, Shape shape, DType dtype) {
  Tensor t(dtype, std::move(shape));
  if (static_cast<std::int64_t>(values.size()) != t.numel())
    throw Error("Tensor::from_f64: " + std::to_string(values.size()) + " values for shape " + shape_str(t.shape()));
  for (std::size_t i = 0; i < values.size(); ++i) t.set(static_cast<std::int64_t>(i), values[i]);
  return t;
}

void Tensor::check_type(DType requested) const {
  if (requested != dtype_)
    throw Error("Tensor: accessed a " + std::string(dtype_name(dtype_)) + " tensor as " +
                std::string(dtype_name(requested)));
}

double Tensor::get(std::int64_t i) const {
  const std::uint8_t* p = bytes_.data() + static_cast<std::size_t>(i) * dtype_size(dtype_);
  switch (dtype_) {
    case DType::F64: {
      double v;
      std::memcpy(&v, p, 8);
      return v;
    }
    case DType::F32: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DType::BF16: {
      std::uint16_t v;
      std::memcpy(&v, p, 2);
      return bf16_to_float(v);
    }
    case DType::F16: {
      std::uint16_t v;
      std::memcpy(&v, p, 2);
      return fp16_to_float(v);
    }
    case DType::I64: {
      std::int64_t v;
      std::memcpy(&v, p, 8);
      return static_cast<double>(v);
    }
    case DType::I32: {
      std::int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
  }
  return 0;
}

void Tensor::set(std::int64_t i, double v) {
  std::uint8_t* p = bytes_.data() + static_cast<std::size_t>(i) * dtype_size(dtype_);
  switch (dtype_) {
    case DType::F64:
      std::memcpy(p, &v, 8);
      break;
    case DType::F32: {
      const float f = static_cast<float>(v);
      std::memcpy(p, &f, 4);
      break;
    }
    case DType::BF16: {
      const std::uint16_t h = float_to_bf16(static_cast<float>(v));
      std::memcpy(p, &h, 2);
      break;
    }
    case DType::F16: {
      const std::uint16_t h = float_to_fp16(static_cast<float>(v));
      std::memcpy(p, &h, 2);
      break;
    }
    case DType::I64: {
      const auto n = static_cast<std::int64_t>(v);
      std::memcpy(p, &n, 8);
      break;
    }
    case DType::I32: {
      const auto n = static_cast<std::int32_t>(v);
      std::memcpy(p, &n, 4);
      break;
    }
  }
}

std::vector<double> Tensor::to_f64() const {
  std::vector<double> out(static_cast<std::size_t>(numel()));
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = get(static_cast<std::int64_t>(i));
  return out;
}

std::vector<std::int64_t> Tensor::to_i64() const {
  std::vector<std::int64_t> out(static_cast<std::size_t>(numel()));
  if (dtype_ == DType::I64) {
    std::memcpy(out.data(), bytes_.data(), bytes_.size());
  } else if (dtype_ == DType::I32) {
    const auto* p = data<std::int32_t>();
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = p[i];
  } else {
    throw Error("Tensor: integer values requested from a " + std::string(dtype_name(dtype_)) + " tensor");
  }
  return out;
}

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return *this;
  Tensor out(dtype, shape_);
  const bool ints = !is_float(dtype) && !is_float(dtype_);
  for (std::int64_t i = 0; i < numel(); ++i) {
    if (ints) {
      std::int64_t v = dtype_ == DType::I64 ? data<std::int64_t>()[i] : data<std::int32_t>()[i];
      out.set(i, static_cast<double>(v));
    } else {
      out.set(i, get(i));
    }
  }
  return out;
}

Tensor Tensor::reshaped(Shape shape) const& { return Tensor(*this).reshaped(std::move(shape)); }

Tensor Tensor::reshaped(Shape shape) && {
  if (shape_numel(shape) != numel())
    throw Error("Tensor: cannot reshape " + shape_str(shape_) + " to " + shape_str(shape));
  shape_ = std::move(shape);
  return std::move(*this);
}

std::int64_t first_non_finite(const Tensor& t) {
  const double* p = t.data<double>();
  constexpr std::int64_t kSerial = 1 << 20;  // below a MB or so threads cost more than they save
  const std::int64_t n = t.numel(), blocks = n < kSerial ? std::min<std::int64_t>(1, n) : hardware_threads();
  std::vector<std::int64_t> first(static_cast<std::size_t>(blocks), n);
  parallel_for(blocks, 0, [&](std::int64_t b) {
    for (std::int64_t i = n * b / blocks, end = n * (b + 1) / blocks; i < end; ++i)
      if (!std::isfinite(p[i])) {
        first[static_cast<std::size_t>(b)] = i;
        return;
      }
  });
  return blocks > 0 ? *std::min_element(first.begin(), first.end()) : n;
}

bool Tensor::bitwise_equal(const Tensor& other) const {
  return dtype_ == other.dtype_ && shape_ == other.shape_ && bytes_ == other.bytes_;
}

}  // namespace gdnv
