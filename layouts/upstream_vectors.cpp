#include "layouts/upstream_vectors.hpp"

#include "core/vectors.hpp"
#include "layouts/partition.hpp"

namespace gdnv::layouts {
namespace {

using Ints = std::vector<std::int64_t>;

// "<cu_seqlens> W=<W> rank <r>" of a case, as its label ends.
std::string case_of(const nlohmann::json& c) {
  return c.at("cu_seqlens").dump() + " W=" + c.at("cp_size").dump() + " rank " + c.at("cp_rank").dump();
}

// "" when field `key` of `fla` equals `ours`, else what differs.
template <class T>
std::string field_difference(const char* key, const T& ours, const nlohmann::json& fla) {
  const T theirs = fla.at(key).get<T>();
  return ours == theirs ? "" : std::string(key) + " " + nlohmann::json(ours).dump() + ", FLA's " + fla.at(key).dump();
}

}  // namespace

int check_megatron_indices(const VectorSink& sink) {
  const nlohmann::json cases = vector_cases("layouts_megatron.json");
  for (const auto& c : cases) {
    const auto cu = c.at("cu_seqlens").get<Ints>();
    const int W = c.at("cp_size").get<int>(), rank = c.at("cp_rank").get<int>();
    for (auto [layout, key] : {std::pair{Layout::zigzag, "zigzag"}, {Layout::contiguous, "contiguous"}})
      sink(thd_partition(layout, cu, W, rank).positions() == c.at(key).get<Ints>(), std::string(key) + " " + case_of(c),
           "positions differ from Megatron's");
  }
  return static_cast<int>(cases.size());
}

std::string fla_context_difference(const ChunkwiseContext& ctx, const nlohmann::json& fla) {
  for (const std::string& why : {field_difference("local_cu_seqlens", ctx.local_cu_seqlens, fla),
                                 field_difference("pre_num_ranks", ctx.pre_num_ranks, fla),
                                 field_difference("post_num_ranks", ctx.post_num_ranks, fla),
                                 field_difference("is_first_rank", ctx.is_first_rank, fla),
                                 field_difference("is_last_rank", ctx.is_last_rank, fla),
                                 field_difference("pre_num_conv_tokens", ctx.pre_num_conv_tokens, fla)})
    if (!why.empty()) return why;
  return "";
}

int check_fla_contexts(const VectorSink& sink) {
  const nlohmann::json cases = vector_cases("fla_cp_context.json");
  for (const auto& c : cases) {
    const ChunkwiseContext ctx =
        chunkwise_context(c.at("cu_seqlens").get<Ints>(), c.at("cp_size").get<int>(), c.at("cp_rank").get<int>(), 4);
    const std::string why = fla_context_difference(ctx, c);
    sink(why.empty(), "context " + case_of(c), "chunkwise context differs from FLA's: " + why);
  }
  return static_cast<int>(cases.size());
}

}  // namespace gdnv::layouts
