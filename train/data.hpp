#pragma once
// The training data (docs/DESIGN.md §13): documents from a seeded first-order Markov
// chain over V tokens, which a small model can learn, with seeded lengths, packed into micro-batches by a
// token budget. A global batch is `docs_per_batch` documents, so it holds several micro-batches of varied
// length: the spread dynamic CP chooses its sizes from. Every value is a pure function of (seed, step):
// every rank and every run builds the same batch without communication.
#include <cstdint>
#include <vector>

namespace gdnv::train {

struct DataSpec {
  std::int64_t vocab = 64;
  std::int64_t docs_per_batch = 12;
  std::int64_t min_length = 2;            // a document of one token has nothing to predict
  std::int64_t max_length = 128;          // at most micro_batch_tokens
  std::int64_t micro_batch_tokens = 128;  // token budget of a micro-batch, before padding
  std::uint64_t seed = 0;
};

// ConfigError naming the option and the fix for a spec no batch can be built from.
void validate(const DataSpec& spec);

using Document = std::vector<std::int64_t>;  // token ids

struct MicroBatchData {
  std::vector<Document> docs;
  std::int64_t tokens() const;
  // Tokens with a next token in their document: the ones the loss counts.
  std::int64_t effective_tokens() const;
};

struct GlobalBatch {
  std::vector<MicroBatchData> micro_batches;
  std::int64_t effective_tokens() const;
};

// Document `doc` of step `step`: length min + floor((max - min + 1) u^2) (short documents more likely,
// as in real corpora), first token uniform, each next token one of 4 successors of the previous with
// probabilities 0.55, 0.25, 0.12, 0.08 (entropy 1.6 nats against ln V for a uniform guess).
Document document(const DataSpec& spec, std::int64_t step, std::int64_t doc);

// The documents of `step` in order, packed greedily: a micro-batch closes when the next document would
// take it past the budget.
GlobalBatch global_batch(const DataSpec& spec, std::int64_t step);

}  // namespace gdnv::train
