#pragma once
// What built this binary, for a probe image's meta.json: two images are only comparable when you
// know what differs between them.
#include <nlohmann/json.hpp>

#include "comm/accounting.hpp"

namespace gdnv::probes {

// {"gdn_verify", "git_commit", "compiler", "eigen", "mpi", "cuda", "nccl"}.
nlohmann::json build_info();

// {"<collective>": {"calls", "bytes_sent", "bytes_recv"}, ..., "host_syncs", "route_builds"}, kinds
// never called left out.
nlohmann::json counters_json(const comm::Counters& counters);

}  // namespace gdnv::probes
