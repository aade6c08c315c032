#pragma once
// An owning, contiguous, row-major tensor of one storage dtype.
#include <cstdint>
#include <memory>
#include <new>
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

// An allocator that leaves new elements uninitialised where a vector would zero them: storage that is
// written in full before it is read need not be filled first (at real sizes, zero-filling is serial time).
template <class T>
struct DefaultInitAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };
  using std::allocator<T>::allocator;
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
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
  std::vector<std::uint8_t, DefaultInitAllocator<std::uint8_t>> bytes_;
};

// The flat index of t's first NaN or Inf (numel when every element is finite); F64 only. A large
// tensor is scanned on every core: inputs of real size are hundreds of MB.
std::int64_t first_non_finite(const Tensor& t);

}  // namespace gdnv
