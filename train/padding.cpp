#include "train/padding.hpp"

namespace gdnv::train {

std::int64_t pad_for(std::int64_t length, int c) {
  if (c == 1) return 0;
  const std::int64_t unit = 2 * static_cast<std::int64_t>(c);
  return (unit - length % unit) % unit;
}

Packed pack(const MicroBatchData& mb, int c, bool count_padding) {
  Packed p;
  p.cu_seqlens.push_back(0);
  for (const Document& d : mb.docs) {
    const auto L = static_cast<std::int64_t>(d.size());
    const std::int64_t pad = pad_for(L, c);
    for (std::int64_t t = 0; t < L; ++t) {
      p.tokens.push_back(d[static_cast<std::size_t>(t)]);
      const bool last = t + 1 == L;
      p.targets.push_back(!last ? d[static_cast<std::size_t>(t) + 1] : count_padding && pad ? kPadToken : kNoTarget);
    }
    for (std::int64_t t = 0; t < pad; ++t) {
      p.tokens.push_back(kPadToken);
      p.targets.push_back(count_padding ? kPadToken : kNoTarget);
    }
    p.pads += pad;
    p.cu_seqlens.push_back(p.cu_seqlens.back() + L + pad);
  }
  return p;
}

std::int64_t counted_tokens(const Packed& p) {
  std::int64_t n = 0;
  for (auto t : p.targets) n += t != kNoTarget;
  return n;
}

}  // namespace gdnv::train
