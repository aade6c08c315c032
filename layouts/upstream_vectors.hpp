#pragma once
// The layouts against upstream's own answers (tests/data/vectors): Megatron-Core's THD rank indices and
// FLA's chunkwise contexts, exactly. One check per fact, each handed to a sink, so the GoogleTest and the
// gate's "layout properties" step judge the same facts with the same code.
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "layouts/chunkwise_context.hpp"

namespace gdnv::layouts {

// Receives each check: its label (unique within the file's checks), whether it held, and if not why.
using VectorSink = std::function<void(bool ok, const std::string& label, const std::string& why)>;

// layouts_megatron.json: each case's zigzag and contiguous positions, two checks per case ("zigzag
// <cu_seqlens> W=<W> rank <r>", "contiguous ..."). Returns the number of cases read.
int check_megatron_indices(const VectorSink& sink);

// fla_cp_context.json: each case's whole chunkwise context at conv width 4, one check per case ("context
// <cu_seqlens> W=<W> rank <r>"). Returns the number of cases read.
int check_fla_contexts(const VectorSink& sink);

// "" when `ctx` is the context of FLA's case `fla` in every field (local_cu_seqlens, pre/post_num_ranks,
// is_first/last_rank, pre_num_conv_tokens), else the first field that differs, "<field> <ours>, FLA's <theirs>".
std::string fla_context_difference(const ChunkwiseContext& ctx, const nlohmann::json& fla);

}  // namespace gdnv::layouts
