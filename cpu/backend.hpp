#pragma once
// The CPU compute Backend (cp/backend.hpp): host memory, one class templated on the storage type.
//   F64  storage: double arithmetic, fp64 states and parameter gradients.
//   F32  storage: float arithmetic with fp32 accumulation.
//   BF16 storage: activations and parameters stored in bf16, each op's outputs rounded to nearest even;
//                 arithmetic in fp32; gates, states and parameter gradients in fp32.
// Its own code, not the fp64 oracle of reference/ with a cast: the implementation under test.
#include <memory>

#include "cp/backend.hpp"

namespace gdnv::cpu {

// storage is F64, F32 or BF16; any other dtype throws ConfigError naming the supported ones.
std::unique_ptr<cp::Backend> make_backend(DType storage);

}  // namespace gdnv::cpu
