#pragma once
// Helpers of the GatedDeltaNet layer tests: whole-tensor comparison, non-triviality guards and
// central finite differences.
#include <cmath>
#include <functional>
#include <string>

#include <gtest/gtest.h>

#include "core/error.hpp"
#include "core/tensor.hpp"

namespace gdnv::testing {

struct Diff {
  double max_abs = 0;  // max |a - ref|
  double rel_rms = 0;  // rms(a - ref) / (rms(ref) + 1e-300)
};

inline Diff diff(const Tensor& a, const Tensor& ref) {
  EXPECT_EQ(a.shape(), ref.shape());
  Diff d;
  double se = 0, sr = 0;
  for (std::int64_t i = 0; i < std::min(a.numel(), ref.numel()); ++i) {
    const double e = a.get(i) - ref.get(i);
    d.max_abs = std::max(d.max_abs, std::abs(e));
    se += e * e;
    sr += ref.get(i) * ref.get(i);
  }
  d.rel_rms = std::sqrt(se) / (std::sqrt(sr) + 1e-300);
  return d;
}

// Fails unless t is finite, not all zero and not constant: a comparison of such tensors proves little.
inline void expect_nontrivial(const Tensor& t, const std::string& name) {
  ASSERT_GT(t.numel(), 1) << name;
  bool varies = false, nonzero = false;
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    ASSERT_TRUE(std::isfinite(t.get(i))) << name << " element " << i;
    nonzero |= t.get(i) != 0;
    varies |= t.get(i) != t.get(0);
  }
  EXPECT_TRUE(nonzero && varies) << name << " is all zero or constant";
}

// Central differences d loss / d x[i] for every element of x (restored afterwards). Step h: the
// truncation error h^2 |f'''| / 6 and the rounding error eps |f| / h balance near h = eps^(1/3) ~ 6e-6.
inline Tensor fd_gradient(Tensor& x, const std::function<double()>& loss, double h = 6e-6) {
  Tensor g(DType::F64, x.shape());
  double* p = x.data<double>();
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    const double x0 = p[i];
    p[i] = x0 + h;
    const double up = loss();
    p[i] = x0 - h;
    const double down = loss();
    p[i] = x0;
    g.data<double>()[i] = (up - down) / (2 * h);
  }
  return g;
}

// The message of the gdnv::Error that f throws, or "(no error)".
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// sum(w * y): the scalar whose gradient w.r.t. y is w.
inline double dot(const Tensor& w, const Tensor& y) {
  double s = 0;
  for (std::int64_t i = 0; i < y.numel(); ++i) s += w.get(i) * y.get(i);
  return s;
}

}  // namespace gdnv::testing
