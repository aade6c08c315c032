// Chunkwise CP's micro-batch plan: its contexts are FLA's (tests/data/vectors/fla_cp_context.json) on
// every rank of an in-process group, and its route is built once per micro-batch, never inside a layer.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "comm/inprocess.hpp"
#include "core/vectors.hpp"
#include "cp/layer.hpp"
#include "cpu/backend.hpp"
#include "layouts/upstream_vectors.hpp"
#include "reference/case_params.hpp"
#include "reference/layer_params.hpp"

namespace gdnv::cp {
namespace {

using nlohmann::json;
using Ints = std::vector<std::int64_t>;

const ref::LayerConfig kLayer({16, 2, 4, 6, 6, 4, 1e-6, false});

CpConfig chunkwise(int cp) {
  CpConfig c;
  c.mode = CpMode::Chunkwise;
  c.cp = cp;
  return c;
}

// Cases whose lengths are a legal zigzag micro-batch (divisible by 2W) are planned by the layer and
// must carry FLA's context; the others must be rejected by check() naming the rule.
TEST(ChunkwisePlan, ContextsOfPreparedMicroBatchesAreFlas) {
  const json cases = vector_cases("fla_cp_context.json");
  std::map<std::pair<Ints, int>, std::map<int, json>> by_batch;  // (cu_seqlens, W) -> rank -> case
  for (const json& c : cases) by_batch[{c["cu_seqlens"].get<Ints>(), c["cp_size"].get<int>()}][c["cp_rank"]] = c;
  const ref::LayerParams params = ref::case_params(kLayer, 3);
  int planned = 0, rejected = 0;
  for (const auto& batch : by_batch) {
    // Named, not bound: clang before 16 cannot capture a structured binding.
    const auto& ranks = batch.second;
    const auto& cu = batch.first.first;
    const int W = batch.first.second;
    bool legal = true;
    for (std::size_t i = 1; i < cu.size(); ++i) legal = legal && (cu[i] - cu[i - 1]) % (2 * W) == 0;
    (legal ? planned : rejected) += static_cast<int>(ranks.size());
    comm::run_world(W, [&](comm::Communicator& group) {
      auto be = cpu::make_backend(DType::F32);
      const GdnCpLayer layer(kLayer, chunkwise(W), params, *be, group);
      SCOPED_TRACE(json(cu).dump() + " W=" + std::to_string(W) + " r=" + std::to_string(group.rank()));
      if (!legal) {
        try {
          (void)layer.check({Format::Thd, cu});
          ADD_FAILURE() << "accepted";
        } catch (const ConfigError& e) {
          EXPECT_NE(std::string(e.what()).find("divisible by"), std::string::npos) << e.what();
        }
        return;
      }
      const auto mb = layer.prepare(layer.check({Format::Thd, cu}));
      const json& want = ranks.at(group.rank());
      const layouts::ChunkwiseContext& ctx = mb->chunkwise->context;
      EXPECT_EQ(layouts::fla_context_difference(ctx, want), "");
      EXPECT_EQ(mb->chunkwise->span.host, ctx.local_cu_seqlens);
    });
  }
  EXPECT_EQ(planned + rejected, 31);
  EXPECT_GE(planned, 12);  // both kinds are exercised
  EXPECT_GE(rejected, 12);
}

// One route per micro-batch: prepare() builds it; two layers' forward and backward reuse it.
TEST(ChunkwisePlan, RouteIsBuiltOncePerMicroBatchAndReusedByEveryLayer) {
  const ref::LayerParams first = ref::case_params(kLayer, 1), second = ref::case_params(kLayer, 2);
  comm::run_world(2, [&](comm::Communicator& group) {
    auto be = cpu::make_backend(DType::F32);
    const GdnCpLayer a(kLayer, chunkwise(2), first, *be, group), b(kLayer, chunkwise(2), second, *be, group);
    const comm::Accounting& acc = group.accounting();
    std::shared_ptr<const MicroBatch> mb;
    {
      const comm::ScopedCounter counter(acc);
      mb = a.prepare(a.check({Format::Thd, {0, 8, 20}}));
      EXPECT_EQ(counter.delta().route_builds, 1u);
      EXPECT_EQ(counter.delta().calls(), 0u);
    }
    const comm::ScopedCounter counter(acc);
    Context ca, cb;
    const Buffer h = be->upload(Tensor(DType::F32, {mb->local_tokens, 1, 16}), DType::F32);
    const Buffer out = b.forward(mb, a.forward(mb, h, ca), cb);
    (void)a.backward(ca, b.backward(cb, out).grad_hidden);
    EXPECT_EQ(counter.delta().route_builds, 0u);
    EXPECT_EQ(counter.delta()[comm::Collective::AllToAllV].calls, 8u);  // 2 layers x 2 directions x 2 swaps
  });
}

}  // namespace
}  // namespace gdnv::cp
