#pragma once
// The fp64 oracle trajectory (docs/DESIGN.md §13): the same model, data and AdamW as
// the trainer, in fp64 on the host with the reference layer (ref::layer_forward / layer_backward) on each
// whole micro-batch, unpadded, micro-batches in order, fp64 master weights. No planted fault reaches it.
#include "train/trainer.hpp"

namespace gdnv::train {

// Uses spec's model, data, optimizer, steps and seed; its mode, CP sizes, dtype and recompute do not
// apply.
Trajectory oracle_trajectory(const TrainSpec& spec);

}  // namespace gdnv::train
