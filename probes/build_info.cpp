#include "probes/build_info.hpp"

#include <mpi.h>

#include <Eigen/Core>
#include <string>

#include "gdnv_git_commit.hpp"

namespace gdnv::probes {
namespace {

std::string compiler() {
#if defined(__clang__)
  return "clang " __clang_version__;
#elif defined(__GNUC__)
  return "gcc " __VERSION__;
#else
  return "unknown";
#endif
}

// The MPI library's own version line (callable before MPI_Init).
std::string mpi_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  MPI_Get_library_version(text, &length);
  std::string s(text, static_cast<std::size_t>(length));
  return s.substr(0, s.find_first_of("\r\n,"));
}

}  // namespace

nlohmann::json build_info() {
  return {{"gdn_verify", GDNV_VERSION},
          {"git_commit", GDNV_GIT_COMMIT},
          {"compiler", compiler()},
          {"eigen", std::to_string(EIGEN_WORLD_VERSION) + "." + std::to_string(EIGEN_MAJOR_VERSION) + "." +
                        std::to_string(EIGEN_MINOR_VERSION)},
          {"mpi", mpi_version()},
          {"cuda", GDNV_CUDA_VERSION},
          {"nccl", GDNV_NCCL_VERSION}};
}

nlohmann::json counters_json(const comm::Counters& c) {
  nlohmann::json j = nlohmann::json::object();
  for (int k = 0; k < comm::kCollectiveKinds; ++k) {
    const auto kind = static_cast<comm::Collective>(k);
    if (c[kind].calls)
      j[std::string(comm::collective_name(kind))] = {
          {"calls", c[kind].calls}, {"bytes_sent", c[kind].bytes_sent}, {"bytes_recv", c[kind].bytes_recv}};
  }
  j["host_syncs"] = c.host_syncs;
  j["route_builds"] = c.route_builds;
  return j;
}

}  // namespace gdnv::probes
