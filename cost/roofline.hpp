#pragma once
// Time estimates from the cost models (cost/cost.hpp) over a hardware profile. Compute: a roofline per
// op, max(FLOPs / peak, HBM bytes / bandwidth). Collectives: per call, latency times the ring or
// pairwise steps plus the larger of bytes sent and received over the link the group uses (NVLink
// inside a node, the network across nodes). Compute and communication are added, not overlapped: the
// modes' collectives sit between the stages that need them.
#include <string>

#include "cost/cost.hpp"

namespace gdnv::cost {

struct HardwareProfile {
  std::string name = "h200";
  // H200 SXM: dense bf16 tensor cores, fp32 / fp64 without them; HBM3e.
  double bf16_tflops = 989, fp32_tflops = 67, fp64_tflops = 34;
  double hbm_gbps = 4800;
  int gpus_per_node = 8;
  // NVLink 4: 900 GB/s per GPU both directions together. Across nodes: one 400 Gb/s NIC per GPU.
  double intra_node_gbps = 450, intra_node_latency_us = 5;
  double inter_node_gbps = 50, inter_node_latency_us = 15;
};

// "h200", or a JSON file whose keys (the field names above) override the h200 numbers. ConfigError
// naming the file, the key and the fix on anything else.
HardwareProfile load_hardware(const std::string& name_or_file);

struct PhaseTime {
  double compute_s = 0, comm_s = 0;
  double total() const { return compute_s + comm_s; }
};

// One collective call's time: latency per ring or pairwise step plus the larger of bytes sent and
// received over the link its group uses. `tp`, `cp` as below.
double call_time(const CallCost& call, const HardwareProfile& hw, int tp, int cp);

// The bus bandwidth factor of nccl-tests (its doc/PERFORMANCE.md): busbw = algbw x 2(n-1)/n for an
// all-reduce, x (n-1)/n for an all-gather, reduce-scatter or all-to-all, so a link's speed reads the
// same whatever the collective.
double bus_factor(comm::Collective kind, int size);

// `tp`, `cp`: the layer's group sizes. Groups are blocks of consecutive ranks (TP innermost, as
// Megatron lays them out), so a group crosses nodes when tp (TP) or tp * cp (CP) exceeds a node.
PhaseTime phase_time(const PhaseCost& phase, const HardwareProfile& hw, DType dtype, int tp, int cp);

}  // namespace gdnv::cost
