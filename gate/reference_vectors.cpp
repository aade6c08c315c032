// Gate step "reference vectors": the upstream reference vectors (tests/data/vectors) load, and the fp64
// oracle reproduces FLA's and torch's own outputs from them, both core forms.
#include "core/vectors.hpp"
#include "gate/steps.hpp"
#include "reference/conv1d.hpp"
#include "reference/kernel_io.hpp"

namespace gdnv::gate {
namespace {

StepResult run(const StepOptions& options) {
  StepResult r(options);
  for (const std::string& file : vector_files()) {
    const bool json = file.ends_with(".json");
    r.check(json ? read_vector_json(file).contains("cases") : !read_vector(file).tensors.empty(), vector_path(file),
            "holds no cases or tensors");
  }
  for (const std::string name : {"gdr_batched_h0", "gdr_varlen_gva_scale"})
    for (auto form : {ref::GdrForm::Chunked, ref::GdrForm::Recurrent}) {
      const TensorFile expected = read_vector(name + ".safetensors");
      TensorFile input = expected;
      const TensorFile got = ref::run_gdr_case(ref::take_gdr_case(input, name), form);
      for (const auto& [tensor, t] : got.tensors)
        check_rel_rms(r, std::string(name) + " " + tensor, expected.at(tensor, name), t, 1e-12);
    }
  const TensorFile conv = read_vector("conv1d_silu_bias.safetensors");
  const ref::Conv1dInputs in{conv.at("x", "conv"), conv.at("weight", "conv"), conv.at("bias", "conv"), std::nullopt,
                             std::nullopt,         ref::Activation::Silu};
  const ref::Conv1dGrads g = ref::conv1d_backward(in, conv.at("dy", "conv"));
  check_rel_rms(r, "conv1d y", conv.at("y", "conv"), ref::conv1d_forward(in), 1e-12);
  check_rel_rms(r, "conv1d dx", conv.at("dx", "conv"), g.dx, 1e-12);
  check_rel_rms(r, "conv1d dweight", conv.at("dweight", "conv"), g.dweight, 1e-12);
  check_rel_rms(r, "conv1d dbias", conv.at("dbias", "conv"), *g.dbias, 1e-12);
  return r;
}

}  // namespace

const Step reference_vectors{"reference vectors", run};

}  // namespace gdnv::gate
