#include "train/data.hpp"

#include <string>

#include "core/error.hpp"
#include "core/rng.hpp"

namespace gdnv::train {
namespace {

constexpr std::int64_t kSuccessors = 4;
constexpr double kSuccessorCdf[kSuccessors] = {0.55, 0.80, 0.92, 1.0};
// Documents per step in the counter space of the streams (docs_per_batch is checked against it).
constexpr std::int64_t kDocsPerStep = 1 << 16;

std::int64_t successor(const DataSpec& spec, std::int64_t token, double u) {
  std::int64_t j = 0;
  while (j + 1 < kSuccessors && u >= kSuccessorCdf[j]) ++j;
  const std::uint64_t h =
      hash64(spec.seed, stream_of("train/markov"), static_cast<std::uint64_t>(token * kSuccessors + j));
  return static_cast<std::int64_t>(h % static_cast<std::uint64_t>(spec.vocab));
}

}  // namespace

void validate(const DataSpec& s) {
  auto bad = [](const std::string& what) { throw ConfigError(what); };
  if (s.vocab < 2) bad("--vocab " + std::to_string(s.vocab) + " is too small: give at least 2 tokens");
  if (s.min_length < 2)
    bad("minimum document length " + std::to_string(s.min_length) + ": give at least 2 (one token predicts nothing)");
  if (s.max_length < s.min_length)
    bad("--max-doc-length " + std::to_string(s.max_length) + " is below the minimum " + std::to_string(s.min_length) +
        ": raise it");
  if (s.micro_batch_tokens < s.max_length)
    bad("--micro-batch-tokens " + std::to_string(s.micro_batch_tokens) + " is below --max-doc-length " +
        std::to_string(s.max_length) + ": a document must fit one micro-batch; raise the budget");
  if (s.docs_per_batch < 1 || s.docs_per_batch > kDocsPerStep)
    bad("--docs-per-batch " + std::to_string(s.docs_per_batch) + " is outside [1, " + std::to_string(kDocsPerStep) +
        "]: change it");
}

std::int64_t MicroBatchData::tokens() const {
  std::int64_t n = 0;
  for (const Document& d : docs) n += static_cast<std::int64_t>(d.size());
  return n;
}

std::int64_t MicroBatchData::effective_tokens() const {
  std::int64_t n = 0;
  for (const Document& d : docs) n += static_cast<std::int64_t>(d.size()) - 1;
  return n;
}

std::int64_t GlobalBatch::effective_tokens() const {
  std::int64_t n = 0;
  for (const MicroBatchData& m : micro_batches) n += m.effective_tokens();
  return n;
}

Document document(const DataSpec& spec, std::int64_t step, std::int64_t doc) {
  const auto index = static_cast<std::uint64_t>(step * kDocsPerStep + doc);
  const double u = Rng(spec.seed, "train/length").uniform(index);
  const std::int64_t length =
      spec.min_length + static_cast<std::int64_t>((spec.max_length - spec.min_length + 1) * u * u);
  const Rng tokens(spec.seed, "train/tokens");
  const auto base = index * static_cast<std::uint64_t>(spec.max_length);
  Document d;
  d.push_back(static_cast<std::int64_t>(tokens.uniform(base) * static_cast<double>(spec.vocab)));
  for (std::int64_t t = 1; t < length; ++t)
    d.push_back(successor(spec, d.back(), tokens.uniform(base + static_cast<std::uint64_t>(t))));
  return d;
}

GlobalBatch global_batch(const DataSpec& spec, std::int64_t step) {
  GlobalBatch batch;
  MicroBatchData current;
  for (std::int64_t i = 0; i < spec.docs_per_batch; ++i) {
    Document d = document(spec, step, i);
    if (current.tokens() + static_cast<std::int64_t>(d.size()) > spec.micro_batch_tokens) {
      batch.micro_batches.push_back(std::move(current));
      current = {};
    }
    current.docs.push_back(std::move(d));
  }
  batch.micro_batches.push_back(std::move(current));
  return batch;
}

}  // namespace gdnv::train
