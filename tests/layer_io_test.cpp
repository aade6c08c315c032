// Layer-level safetensors files (docs/DESIGN.md §5): what run_layer_file writes, dtype handling, and
// one clear error per malformed file.
#include <cmath>

#include <gtest/gtest.h>

#include "layer_testing.hpp"
#include "reference/case_params.hpp"
#include "reference/layer_io.hpp"

namespace gdnv::ref {
namespace {

using testing::error_of;
using testing::expect_nontrivial;

LayerCase small_case(bool with_grad) {
  const LayerConfig config({.hidden_size = 8,
                            .linear_num_key_heads = 2,
                            .linear_num_value_heads = 4,
                            .linear_key_head_dim = 4,
                            .linear_value_head_dim = 3,
                            .conv_bias = true});
  LayerCase c{config, case_params(config, 1), seeded_normal(1, "hidden_states", {10, 1, 8}),
              std::vector<std::int64_t>{0, 4, 10}, std::nullopt};
  if (with_grad) c.grad_output = seeded_normal(1, "grad_output", {10, 1, 8});
  return c;
}

// The file as a reader sees it: serialised and parsed back.
TensorFile through_bytes(const TensorFile& f) {
  const auto bytes = serialize_safetensors(f);
  return parse_safetensors(bytes.data(), bytes.size(), "case.safetensors");
}

TEST(LayerIo, WritesOutGradHiddenAndEveryParameterGradient) {
  const LayerCase c = small_case(true);
  const TensorFile in = through_bytes(write_layer_case(c));
  EXPECT_TRUE(is_layer_file(in));
  const TensorFile out = run_layer_file(in, "case.safetensors", CoreForm::Recurrent);

  const LayerForward fwd = layer_forward(c.config, c.params, c.hidden_states, c.cu_seqlens, {CoreForm::Recurrent, 64});
  const LayerGrads g = layer_backward(c.config, c.params, fwd, *c.grad_output);
  expect_nontrivial(fwd.out, "out");
  EXPECT_TRUE(out.at("out", "").bitwise_equal(fwd.out));
  EXPECT_TRUE(out.at("grad_hidden", "").bitwise_equal(g.grad_hidden));
  for (const auto& [name, t] : g.params) EXPECT_TRUE(out.at("grad::" + name, "").bitwise_equal(t)) << name;
  EXPECT_EQ(out.tensors.size(), 2 + c.params.size());
  EXPECT_EQ(out.metadata.at("form"), "recurrent");
  EXPECT_EQ(out.metadata.at("linear_num_value_heads"), "4");
}

TEST(LayerIo, WithoutGradOutputWritesOnlyOut) {
  const TensorFile in = through_bytes(write_layer_case(small_case(false)));
  const TensorFile out = run_layer_file(in, "case.safetensors", CoreForm::Chunked);
  ASSERT_EQ(out.tensors.size(), 1u);
  EXPECT_TRUE(out.has("out"));
}

TEST(LayerIo, FloatTensorsOfAnyWidthAreUpcast) {
  LayerCase c = small_case(false);
  TensorFile f = write_layer_case(c);
  for (auto& [name, t] : f.tensors)
    if (name != "cu_seqlens") t = t.to(DType::F32);
  const TensorFile out = run_layer_file(through_bytes(f), "case.safetensors", CoreForm::Chunked);
  for (auto& [name, t] : c.params) t = t.to(DType::F32).to(DType::F64);
  c.hidden_states = c.hidden_states.to(DType::F32).to(DType::F64);
  EXPECT_TRUE(out.at("out", "").bitwise_equal(layer_forward(c.config, c.params, c.hidden_states, c.cu_seqlens).out));
}

std::string error_of_file(const std::function<void(TensorFile&)>& edit) {
  TensorFile f = write_layer_case(small_case(true));
  edit(f);
  return error_of([&] { run_layer_file(f, "case.safetensors", CoreForm::Chunked); });
}

TEST(LayerIo, EachMalformedFileGetsOneClearError) {
  EXPECT_EQ(error_of_file([](TensorFile& f) { f.tensors.emplace("conv1d.bais", f.tensors.at("conv1d.bias")); }),
            "case.safetensors: unknown tensor 'conv1d.bais' in a layer file; expected hidden_states, grad_output, "
            "cu_seqlens and the parameters of docs/DESIGN.md §1.3 (in_proj.layer_norm_weight, in_proj.weight, "
            "conv1d.weight, conv1d.bias, A_log, dt_bias, out_norm.weight, out_proj.weight)");
  EXPECT_EQ(error_of_file([](TensorFile& f) { f.tensors.erase("out_proj.weight"); }),
            "case.safetensors: parameter 'out_proj.weight' [8, 12] is missing from the layer file");
  EXPECT_EQ(error_of_file([](TensorFile& f) { f.metadata.erase("hidden_size"); }),
            "case.safetensors: metadata 'hidden_size' is missing; a layer file carries its config under Megatron's "
            "names (docs/DESIGN.md §5)");
  EXPECT_EQ(error_of_file([](TensorFile& f) { f.metadata.insert_or_assign("linear_num_key_heads", std::string("3")); }),
            "case.safetensors: layer config: linear_num_value_heads = 4 is not a multiple of linear_num_key_heads = "
            "3; GVA maps Hv/Hk value heads onto each key head, so choose Hv divisible by Hk");
  EXPECT_EQ(error_of_file([](TensorFile& f) { f.metadata.insert_or_assign("chunk_size", std::string("0")); }),
            "case.safetensors: metadata 'chunk_size' = 0; it must be a positive number of tokens (FLA uses 64)");
  EXPECT_EQ(error_of_file([](TensorFile& f) { f.tensors.at("hidden_states").set(7, std::nan("")); }),
            "case.safetensors: tensor 'hidden_states' holds NaN at flat index 7; the oracle needs finite inputs");
  EXPECT_EQ(error_of_file([](TensorFile& f) { f.tensors.at("out_norm.weight").set(1, INFINITY); }),
            "case.safetensors: tensor 'out_norm.weight' holds Inf at flat index 1; the oracle needs finite inputs");
  EXPECT_EQ(error_of_file([](TensorFile& f) { f.tensors["A_log"] = Tensor(DType::I64, {4}); }),
            "case.safetensors: tensor 'A_log' has dtype I64; it must be floating point (F64, F32, BF16 or F16)");
  EXPECT_EQ(error_of_file([](TensorFile& f) { f.tensors["cu_seqlens"] = Tensor(DType::F32, {3}); }),
            "case.safetensors: tensor 'cu_seqlens' is F32 [3]; it must be a 1-d I32 or I64 tensor [N + 1]");
  EXPECT_EQ(error_of_file([](TensorFile& f) {
              f.tensors["conv1d.weight"] = Tensor(DType::F64, {28, 4});
            }),
            "case.safetensors: parameter 'conv1d.weight' has shape [28, 4], expected [28, 1, 4] for hidden_size=8 "
            "Hk=2 Hv=4 dk=4 dv=3 W=4");
  EXPECT_EQ(error_of_file([](TensorFile& f) {
              f.tensors["grad_output"] = Tensor(DType::F64, {10, 1, 7});
            }),
            "case.safetensors: grad_output has shape [10, 1, 7]; it must have the shape of hidden_states [10, 1, 8]");
  EXPECT_EQ(error_of_file([](TensorFile& f) {
              f.tensors["cu_seqlens"] = Tensor::from(std::vector<std::int32_t>{0, 6, 4, 10}, {4});
            }),
            "case.safetensors: cu_seqlens decreases at index 2 (6 -> 4); offsets must be non-decreasing");
}

}  // namespace
}  // namespace gdnv::ref
