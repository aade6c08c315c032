#pragma once
// An owning, contiguous, row-major tensor of one storage dtype.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/dtype.hpp"
#include "core/error.hpp"

namespace gdnv {

using Shape = std::vector<std::int64_t>;

// Storage types of the two 16-bit float dtypes: raw bits, converted with core/half.hpp.
struct bf16_t {
  std::uint16_t bits;
};
struct fp16_t {
  std::uint16_t bits;
};

template <class T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, double>) return DType::F64;
  else if constexpr (std::is_same_v<T, float>) return DType::F32;
  else if constexpr (std::is_same_v<T, bf16_t>) return DType::BF16;
  else if constexpr (std::is_same_v<T, fp16_t>) return DType::F16;
  else if constexpr (std::is_same_v<T, std::int64_t>) return DType::I64;
  else {
    static_assert(std::is_same_v<T, std::int32_t>, "no dtype for this element type");
    return DType::I32;
  }
}

std::int64_t shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape);  // "[2, 3]"

// A tensor's storage: n bytes, unspecified until written (storage written in full before it is read
// need not be zeroed first: at real sizes zeroing is serial time). Not a std::vector with a
// default-initialising allocator: with any allocator but std::allocator its destructor destroys each
// element in turn, and code built at -O1 (the orchestration libraries, CMakeLists.txt) keeps that as a
// loop over every byte: 0.3 s of one thread to free a real-size layer's result.
class Bytes {
 public:
  Bytes() = default;
  explicit Bytes(std::size_t n) : data_(n > 0 ? new std::uint8_t[n] : nullptr), size_(n) {}
  Bytes(const std::uint8_t* first, std::size_t n) : Bytes(n) { std::copy_n(first, n, data_.get()); }
  Bytes(const Bytes& other) : Bytes(other.data(), other.size_) {}
  Bytes(Bytes&& other) noexcept : data_(std::move(other.data_)), size_(std::exchange(other.size_, 0)) {}
  Bytes& operator=(Bytes other) noexcept {
    std::swap(data_, other.data_);
    std::swap(size_, other.size_);
    return *this;
  }
  ~Bytes() = default;

  std::size_t size() const { return size_; }
  std::uint8_t* data() { return data_.get(); }
  const std::uint8_t* data() const { return data_.get(); }
  std::uint8_t* begin() { return data(); }
  std::uint8_t* end() { return data() + size_; }
  const std::uint8_t* begin() const { return data(); }
  const std::uint8_t* end() const { return data() + size_; }
  bool operator==(const Bytes& other) const { return std::equal(begin(), end(), other.begin(), other.end()); }

 private:
  std::unique_ptr<std::uint8_t[]> data_;
  std::size_t size_ = 0;
};

class Tensor {
 public:
  Tensor() : Tensor(DType::F64, Shape{0}) {}
  // Zero-filled tensor.
  Tensor(DType dtype, Shape shape);
  // Copies raw little-endian row-major bytes; their size must be numel * dtype size.
  Tensor(DType dtype, Shape shape, const std::vector<std::uint8_t>& bytes);
  // A tensor whose elements are unspecified until written: for outputs the caller writes in full.
  static Tensor uninitialized(DType dtype, Shape shape);

  template <class T>
  static Tensor from(const std::vector<T>& values, Shape shape) {
    Tensor t(dtype_of<T>(), std::move(shape));
    if (static_cast<std::int64_t>(values.size()) != t.numel())
      throw Error("Tensor::from: " + std::to_string(values.size()) + " values for shape " + shape_str(t.shape_));
    std::copy(values.begin(), values.end(), t.data<T>());
    return t;
  }
  // Float tensor of `dtype` from fp64 values, rounded to the storage dtype (RNE for bf16/fp16).
  static Tensor from_f64(const std::vector<double>& values, Shape shape, DType dtype = DType::F64);

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  std::int64_t dim(int i) const { return shape_.at(static_cast<std::size_t>(i < 0 ? rank() + i : i)); }
  std::int64_t numel() const { return shape_numel(shape_); }
  std::size_t nbytes() const { return bytes_.size(); }

  std::uint8_t* bytes() { return bytes_.data(); }
  const std::uint8_t* bytes() const { return bytes_.data(); }

  template <class T>
  T* data() {
    check_type(dtype_of<T>());
    return reinterpret_cast<T*>(bytes_.data());
  }
  template <class T>
  const T* data() const {
    check_type(dtype_of<T>());
    return reinterpret_cast<const T*>(bytes_.data());
  }

  // Element `i` of the flattened tensor as fp64 (exact for every dtype but I64 beyond 2^53).
  double get(std::int64_t i) const;
  // Stores `v` at flat index `i`, rounding to the storage dtype.
  void set(std::int64_t i, double v);

  std::vector<double> to_f64() const;
  std::vector<std::int64_t> to_i64() const;  // integer tensors only
  Tensor to(DType dtype) const;
  // Same values in another shape; a temporary gives up its storage instead of copying it.
  Tensor reshaped(Shape shape) const&;
  Tensor reshaped(Shape shape) &&;

  // Same dtype, shape and raw bytes (so -0 != +0 and NaN payloads matter).
  bool bitwise_equal(const Tensor& other) const;

 private:
  struct Uninitialized {};
  Tensor(DType dtype, Shape shape, Uninitialized);
  void check_type(DType requested) const;

  DType dtype_;
  Shape shape_;
  Bytes bytes_;
};

// The flat index of t's first NaN or Inf (numel when every element is finite); F64 only. A large
// tensor is scanned on every core: inputs of real size are hundreds of MB.
std::int64_t first_non_finite(const Tensor& t);

}  // namespace gdnv
