#pragma once
// The training run the gate's training steps share (gate/training_known_answers.cpp,
// gate/training_equivalence.cpp).
#include <vector>

#include "train/trainer.hpp"

namespace gdnv::gate {

// The gate's configuration: 2 layers, hidden 32, Hk = Hv = 4, dk = dv = 8, V = 32, 12 documents of up to 128
// tokens per global batch in micro-batches of 128 tokens, AdamW lr 3e-3, seed 0.
inline train::TrainSpec gate_train_spec(DType dtype) {
  train::TrainSpec s;
  s.model.layers = 2;
  s.model.layer = {32, 4, 4, 8, 8, 4, 1e-6, false};
  s.model.vocab = s.data.vocab = 32;
  s.adam.lr = 3e-3;
  s.cp = 4;
  s.steps = 8;
  s.dtype = dtype;
  return s;
}

// The dynamic CP sizes the training steps declare.
inline const std::vector<int> kDynamic{1, 2, 4};

}  // namespace gdnv::gate
