#include "cost/op_cost.hpp"

#include <algorithm>

namespace gdnv::cost {
namespace {

double d(std::int64_t n) { return static_cast<double>(n); }

// FLOPs of the chunked forward for one value head over one sequence of L tokens.
double gdr_head_flops(std::int64_t L, std::int64_t dk, std::int64_t dv) {
  double f = 0;
  for (std::int64_t at = 0; at < L; at += kCostChunk) {
    const double c = d(std::min(kCostChunk, L - at));
    f += c * c * d(3 * dk + 2 * dv) + 6 * c * d(dk * dv);
  }
  return f;
}

double gdr_flops(std::span<const std::int64_t> lengths, std::int64_t Hv, std::int64_t dk, std::int64_t dv) {
  double f = 0;
  for (std::int64_t L : lengths) f += gdr_head_flops(L, dk, dv);
  return f * d(Hv);
}

std::int64_t total(std::span<const std::int64_t> lengths) {
  std::int64_t n = 0;
  for (std::int64_t L : lengths) n += L;
  return n;
}

// q, k [N, Hk, dk], v, o [N, Hv, dv], g, beta [N, Hv].
double gdr_bytes(ElementSizes z, std::int64_t N, std::int64_t Hk, std::int64_t Hv, std::int64_t dk, std::int64_t dv) {
  return z.e * d(N) * d(2 * Hk * dk + 2 * Hv * dv) + z.s * d(N) * d(2 * Hv);
}

}  // namespace

OpCost linear_cost(ElementSizes z, std::int64_t N, std::int64_t in, std::int64_t out) {
  return {2 * d(N) * d(in) * d(out), z.e * (d(N) * d(in) + d(out) * d(in) + d(N) * d(out))};
}

OpCost linear_backward_cost(ElementSizes z, std::int64_t N, std::int64_t in, std::int64_t out) {
  return {4 * d(N) * d(in) * d(out), z.e * (d(N) * d(out) + 2 * d(N) * d(in) + d(out) * d(in)) + z.s * d(out) * d(in)};
}

OpCost conv_cost(ElementSizes z, std::int64_t N, std::int64_t D, std::int64_t W) {
  return {2 * d(N) * d(D) * d(W), z.e * (2 * d(N) * d(D) + d(D) * d(W))};
}

OpCost conv_backward_cost(ElementSizes z, std::int64_t N, std::int64_t D, std::int64_t W) {
  return {4 * d(N) * d(D) * d(W), z.e * (3 * d(N) * d(D) + d(D) * d(W)) + z.s * d(D) * d(W)};
}

OpCost gdr_cost(ElementSizes z, std::span<const std::int64_t> lengths, std::int64_t Hk, std::int64_t Hv,
                std::int64_t dk, std::int64_t dv) {
  return {gdr_flops(lengths, Hv, dk, dv), gdr_bytes(z, total(lengths), Hk, Hv, dk, dv)};
}

OpCost gdr_backward_cost(ElementSizes z, std::span<const std::int64_t> lengths, std::int64_t Hk, std::int64_t Hv,
                         std::int64_t dk, std::int64_t dv) {
  // Reads the forward's inputs and d_o, writes dq, dk, dv, dg, dbeta.
  return {3 * gdr_flops(lengths, Hv, dk, dv), 2 * gdr_bytes(z, total(lengths), Hk, Hv, dk, dv)};
}

OpCost span_map_cost(ElementSizes z, std::int64_t length, std::int64_t Hk, std::int64_t Hv, std::int64_t dk,
                     std::int64_t dv) {
  const std::int64_t one[] = {length};
  return {gdr_flops(one, Hv, dk, dv + dk), gdr_bytes(z, length, Hk, Hv, dk, dv) + z.s * d(Hv * dk * (dv + dk))};
}

OpCost fold_cost(ElementSizes z, std::int64_t maps, std::int64_t Hv, std::int64_t dk, std::int64_t dv) {
  return {2 * d(maps) * d(Hv) * d(dk) * d(dk) * d(dv), z.s * d(maps + 1) * d(Hv * dk * (dv + dk))};
}

}  // namespace gdnv::cost
