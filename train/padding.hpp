#pragma once
// A micro-batch packed for the CP size it runs at (docs/DESIGN.md §13). Zigzag cuts
// every sequence into 2c equal chunks at CP = c > 1, so each document is padded at its end to a multiple
// of 2c; at CP = 1 nothing is split and nothing is padded. Pads sit after a document's last token, so no
// real token sees them (the layer is causal within a sequence) and their gradients are exactly zero.
//
// The tail pad may be odd: a 13-token document at c = 2 needs 3 pads (16 = 4 x 4). A padding rule written
// per rank, `pad` tokens on each of the c ranks (`pad * c` in all), reaches a multiple of 2c only when
// `pad` is even; pad_for counts the tail on the whole sequence, so any pad in [0, 2c) comes out.
#include <cstdint>
#include <vector>

#include "train/data.hpp"

namespace gdnv::train {

inline constexpr std::int64_t kPadToken = 0;
inline constexpr std::int64_t kNoTarget = -1;

// Tokens to append to a sequence of `length` tokens so it runs at CP = c.
std::int64_t pad_for(std::int64_t length, int c);

struct Packed {
  std::vector<std::int64_t> tokens;      // [T] every document, each followed by its pads
  std::vector<std::int64_t> targets;     // [T] the next token in the document, or kNoTarget
  std::vector<std::int64_t> cu_seqlens;  // [docs + 1] padded documents
  std::int64_t pads = 0;
};

// `count_padding` is the planted fault PaddingCountedInLoss (the trainer passes it; the oracle never):
// every pad and each document's last token then get a target (the pad token) and count in the loss.
Packed pack(const MicroBatchData& mb, int c, bool count_padding = false);

// Positions with a target.
std::int64_t counted_tokens(const Packed& p);

}  // namespace gdnv::train
