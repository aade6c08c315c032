#pragma once
// Helpers of the reference oracle's tests: seeded random inputs (core/rng.hpp) and whole-tensor
// comparison by max abs and relative RMS (docs/DESIGN.md §4).
#include <cmath>
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/rng.hpp"
#include "core/tensor.hpp"
#include "reference/gated_delta_rule.hpp"

namespace gdnv::testing {

struct TensorDiff {
  double max_abs = 0;
  std::int64_t argmax = 0;
  double rel_rms = 0;  // rms(got - want) / (rms(want) + 1e-12)
};

inline TensorDiff tensor_diff(const Tensor& got, const Tensor& want) {
  TensorDiff d;
  double err2 = 0, ref2 = 0;
  for (std::int64_t i = 0; i < want.numel(); ++i) {
    const double e = std::abs(got.get(i) - want.get(i));
    if (!(e <= d.max_abs)) d = {e, i, 0};  // also catches NaN
    err2 += e * e;
    ref2 += want.get(i) * want.get(i);
  }
  const double n = static_cast<double>(std::max<std::int64_t>(want.numel(), 1));
  d.rel_rms = std::sqrt(err2 / n) / (std::sqrt(ref2 / n) + 1e-12);
  if (std::isnan(d.max_abs)) d.rel_rms = d.max_abs;
  return d;
}

// A reference that is all zeros or constant would let a wrong result pass.
inline bool nontrivial(const Tensor& t) {
  bool nonzero = false, varies = false;
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    nonzero = nonzero || t.get(i) != 0;
    varies = varies || t.get(i) != t.get(0);
  }
  return nonzero && varies;
}

// Same shape, non-trivial reference, relative RMS below tol; the message reports both metrics.
inline ::testing::AssertionResult close(const std::string& name, const Tensor& got, const Tensor& want, double tol) {
  if (got.shape() != want.shape())
    return ::testing::AssertionFailure() << name << ": shape " << shape_str(got.shape())
                                         << " != " << shape_str(want.shape());
  if (!nontrivial(want)) return ::testing::AssertionFailure() << name << ": reference is zero or constant";
  const TensorDiff d = tensor_diff(got, want);
  std::ostringstream msg;
  msg << name << ": rel RMS " << d.rel_rms << " (tol " << tol << "), max abs " << d.max_abs << " at " << d.argmax;
  if (d.rel_rms < tol) return ::testing::AssertionSuccess() << msg.str();
  return ::testing::AssertionFailure() << msg.str();
}

inline Tensor random_normal(const Shape& shape, std::uint64_t seed, const std::string& stream, double scale = 1.0) {
  Tensor t(DType::F64, shape);
  const Rng rng(seed, stream);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = scale * rng.normal(static_cast<std::uint64_t>(i));
  return t;
}

// Gate regimes of the oracle's tests: g = logsigmoid(x) / tau, exactly zero, or strongly negative.
enum class Gates { LogSigmoidTau01, LogSigmoidTau1, LogSigmoidTau10, Zero, StronglyNegative };

inline const char* gates_name(Gates g) {
  switch (g) {
    case Gates::LogSigmoidTau01:
      return "logsigmoid/0.1";
    case Gates::LogSigmoidTau1:
      return "logsigmoid/1";
    case Gates::LogSigmoidTau10:
      return "logsigmoid/10";
    case Gates::Zero:
      return "zero";
    case Gates::StronglyNegative:
      return "strongly negative";
  }
  return "?";
}

struct GdrSpec {
  std::int64_t B = 1, T = 8, Hk = 1, Hv = 1, K = 4, V = 3;
  std::optional<std::vector<std::int64_t>> cu_seqlens = std::nullopt;  // B must be 1
  bool initial_state = true;
  std::optional<double> scale = std::nullopt;
  bool l2norm = false;
  Gates gates = Gates::LogSigmoidTau1;
  std::uint64_t seed = 1;
};

inline double logsigmoid(double x) { return std::min(x, 0.0) - std::log1p(std::exp(-std::abs(x))); }

// Random inputs: k rows of unit norm (as FLA feeds them; with l2norm the kernel normalises anyway),
// beta in (0, 1), g by regime.
inline ref::GdrInputs random_gdr(const GdrSpec& s) {
  ref::GdrInputs in;
  const std::int64_t N = s.cu_seqlens ? static_cast<std::int64_t>(s.cu_seqlens->size()) - 1 : s.B;
  in.q = random_normal({s.B, s.T, s.Hk, s.K}, s.seed, "q");
  in.k = random_normal({s.B, s.T, s.Hk, s.K}, s.seed, "k");
  if (!s.l2norm)
    for (std::int64_t r = 0; r < s.B * s.T * s.Hk; ++r) {
      double* row = in.k.data<double>() + r * s.K;
      double n2 = 0;
      for (std::int64_t i = 0; i < s.K; ++i) n2 += row[i] * row[i];
      for (std::int64_t i = 0; i < s.K; ++i) row[i] /= std::sqrt(n2);
    }
  in.v = random_normal({s.B, s.T, s.Hv, s.V}, s.seed, "v");
  in.g = random_normal({s.B, s.T, s.Hv}, s.seed, "g");
  in.beta = random_normal({s.B, s.T, s.Hv}, s.seed, "beta");
  const Rng u(s.seed, "g_uniform");
  for (std::int64_t i = 0; i < in.g.numel(); ++i) {
    double& g = in.g.data<double>()[i];
    switch (s.gates) {
      case Gates::LogSigmoidTau01:
        g = logsigmoid(g) / 0.1;
        break;
      case Gates::LogSigmoidTau1:
        g = logsigmoid(g);
        break;
      case Gates::LogSigmoidTau10:
        g = logsigmoid(g) / 10;
        break;
      case Gates::Zero:
        g = 0;
        break;
      case Gates::StronglyNegative:
        g = -u.uniform(static_cast<std::uint64_t>(i), 5, 40);
        break;
    }
    double& b = in.beta.data<double>()[i];
    b = 1 / (1 + std::exp(-b));
  }
  if (s.initial_state) in.initial_state = random_normal({N, s.Hv, s.K, s.V}, s.seed, "h0", 0.5);
  in.cu_seqlens = s.cu_seqlens;
  in.scale = s.scale;
  in.use_qk_l2norm = s.l2norm;
  return in;
}

}  // namespace gdnv::testing
