// The serial-model properties of properties/comm_testing.hpp on the MPI transport, run by ctest under
// `mpirun -np 4`: each case forms a group of n <= 4 ranks by split, checks the collective on it, and
// all ranks agree on the verdict (so RapidCheck takes the same path, shrinking included, on every
// rank). Only rank 0 prints gtest output.
#include <cstdlib>
#include <iostream>

#include "comm/mpi.hpp"
#include "properties/comm_testing.hpp"

namespace gdnv {
namespace {

comm::Communicator* g_world = nullptr;

std::string in_mpi_group(int n, const model::Check& check) {
  comm::Communicator& world = *g_world;
  const auto group = world.split(world.rank() < n ? 0 : -1, world.rank());
  const std::string error = group ? check(*group) : "";
  if (!error.empty()) std::cerr << "world rank " << world.rank() << ": " << error << "\n";
  std::vector<double> failed{error.empty() ? 0.0 : 1.0};
  world.all_reduce(failed);
  return failed[0] == 0 ? "" : std::to_string(static_cast<int>(failed[0])) + " rank(s) disagree with the serial model";
}

int max_ranks() { return g_world->size(); }

RC_GTEST_PROP(CommMpi, AllToAllVMatchesSerialModel, ()) {
  model::all_to_all_v_matches_model(in_mpi_group, max_ranks());
}
RC_GTEST_PROP(CommMpi, AllGatherMatchesSerialModel, ()) { model::all_gather_matches_model(in_mpi_group, max_ranks()); }
RC_GTEST_PROP(CommMpi, ReduceScatterMatchesSerialModel, ()) {
  model::reduce_scatter_matches_model(in_mpi_group, max_ranks());
}
RC_GTEST_PROP(CommMpi, AllReduceMatchesSerialModel, ()) { model::all_reduce_matches_model(in_mpi_group, max_ranks()); }
RC_GTEST_PROP(CommMpi, BroadcastMatchesSerialModel, ()) { model::broadcast_matches_model(in_mpi_group, max_ranks()); }
RC_GTEST_PROP(CommMpi, SplitGroupsMatchSerialModel, ()) { model::split_matches_model(in_mpi_group, max_ranks()); }

}  // namespace
}  // namespace gdnv

int main(int argc, char** argv) {
  // The same default seed as every RapidCheck suite (properties/rc_main.cpp), identical on all ranks.
  if (const char* given = std::getenv("RC_PARAMS"); !given || !*given)
    setenv("RC_PARAMS", "seed=20261202 max_success=100", 1);
  int code = 1;
  gdnv::comm::run_mpi(
      [&](gdnv::comm::Communicator& world) {
        gdnv::g_world = &world;
        ::testing::InitGoogleTest(&argc, argv);
        auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
        if (world.rank() == 0)
          std::cout << "RC_PARAMS=\"" << std::getenv("RC_PARAMS") << "\", " << world.size() << " MPI ranks\n";
        else delete listeners.Release(listeners.default_result_printer());
        code = RUN_ALL_TESTS();
      },
      {std::chrono::seconds(30)});
  return code;
}
