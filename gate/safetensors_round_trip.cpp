// Gate step "safetensors round-trip": one tensor of every dtype plus the degenerate shapes, through
// serialize and parse, must come back with identical bytes.
#include "core/safetensors.hpp"
#include "gate/steps.hpp"

namespace gdnv::gate {
namespace {

StepResult run(const StepOptions& options) {
  TensorFile file;
  file.metadata = {{"source", "gate"}};
  int k = 0;
  for (DType t : {DType::F64, DType::F32, DType::BF16, DType::F16, DType::I64, DType::I32}) {
    Tensor x(t, {2, 3});
    for (std::int64_t i = 0; i < x.numel(); ++i) x.set(i, 0.37 * (i - 2));
    file.tensors.emplace("t" + std::to_string(k++), x);
  }
  file.tensors.emplace("empty", Tensor(DType::F32, {0, 4}));
  file.tensors.emplace("scalar", Tensor(DType::F64, {}));
  const auto bytes = serialize_safetensors(file);
  const TensorFile back = parse_safetensors(bytes.data(), bytes.size(), "gate");
  StepResult r(options);
  for (const auto& [name, t] : file.tensors)
    r.check(back.has(name) && back.at(name, "gate").bitwise_equal(t), "tensor " + name, "did not round-trip");
  return r;
}

}  // namespace

const Step safetensors_round_trip{"safetensors round-trip", run};

}  // namespace gdnv::gate
