// Failure scenarios for the MPI transport, launched by comm_mpi_failure_test under
// `mpirun -np 4`: comm_mpi_scenario <ok|throw|skip|skip-two|skip-sub|skip-return|split-stop|hang|io-error|mismatch|
// late-start> <timeout ms>.
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <thread>

#include "comm/mpi.hpp"
#include "comm/transport.hpp"

namespace gdnv {
namespace {

void gather_one(comm::Communicator& comm) {
  std::vector<float> mine{static_cast<float>(comm.rank())}, all(static_cast<std::size_t>(comm.size()));
  comm.all_gather(mine, all);
}

void scenario(const std::string& name, comm::Communicator& comm) {
  const int r = comm.rank();
  if (name == "ok") {
    const auto pair = comm.split(r / 2, r);
    std::vector<double> x{1.0, 2.0};
    pair->all_reduce(x);
    gather_one(comm);
    comm.barrier();
    if (x[0] != 2.0 || x[1] != 4.0) throw Error("wrong sum");
  } else if (name == "throw") {
    if (r == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the peers are inside all_gather by now
      throw ConfigError("planted failure on rank 2");
    }
    gather_one(comm);
  } else if (name == "skip") {
    if (r == 3) {
      std::this_thread::sleep_for(std::chrono::seconds(1));  // busy, outside any collective
      return;
    }
    gather_one(comm);
  } else if (name == "skip-two") {
    // Ranks 2 and 3 busy outside any collective until the job is aborted (5 s: far past the timeout of
    // ranks 0 and 1, so that a loaded machine cannot see them return first).
    if (r >= 2) {
      std::this_thread::sleep_for(std::chrono::seconds(5));
      return;
    }
    gather_one(comm);
  } else if (name == "skip-sub") {
    // On the group of world ranks 1, 2, 3 (group ranks 0, 1, 2), world rank 3 skips the all_gather; world
    // rank 0, alone in its group, is busy until the job is aborted (so that its own wait for the others to
    // return never times out first).
    const auto group = comm.split(r == 0 ? 0 : 1, r);
    if (r == 0 || r == 3) {
      std::this_thread::sleep_for(std::chrono::seconds(5));
      return;
    }
    gather_one(*group);
  } else if (name == "skip-return") {
    if (r != 3) gather_one(comm);
  } else if (name == "split-stop") {
    // Rank 3 passes the split's handshake, then hangs before MPI_Comm_split (a peer stopped there).
    if (r == 3) {
      comm::Call call;
      call.kind = comm::Collective::Split;
      call.to.assign(static_cast<std::size_t>(comm.size()), 0);
      call.from = call.to;
      static_cast<comm::MpiCommunicator&>(comm).handshake(call, "split-stop");
      std::this_thread::sleep_for(std::chrono::seconds(30));
      return;
    }
    (void)comm.split(r / 2, r);
  } else if (name == "hang") {
    if (r == 3) std::this_thread::sleep_for(std::chrono::seconds(30));  // a hung peer, outside any collective
    gather_one(comm);
  } else if (name == "io-error") {
    if (r == 2)
      throw std::filesystem::filesystem_error("cannot open", "/no/such/dir/x",
                                              std::make_error_code(std::errc::no_such_file_or_directory));
    gather_one(comm);
  } else if (name == "mismatch") {
    // Rank 0 sends 3 elements to rank 1, which expects 4; every other pair exchanges 1.
    std::vector<std::int64_t> send_counts(4, 1), recv_counts(4, 1);
    if (r == 0) send_counts[1] = 3;
    if (r == 1) recv_counts[0] = 4;
    std::vector<float> send(static_cast<std::size_t>(send_counts[0] + send_counts[1] + 2)),
        recv(static_cast<std::size_t>(recv_counts[0] + recv_counts[1] + 2));
    comm.all_to_all_v(send, send_counts, recv, recv_counts);
  } else {
    throw ConfigError("unknown scenario '" + name + "'");
  }
}

}  // namespace
}  // namespace gdnv

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: comm_mpi_scenario <scenario> <timeout ms>\n";
    return 3;
  }
  const std::string name = argv[1];
  if (name == "late-start") {
    // Rank 3 comes to run_mpi 5 s after the others (MPI itself already started): they time out waiting
    // and abort the job first.
    MPI_Init(nullptr, nullptr);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 3) std::this_thread::sleep_for(std::chrono::seconds(5));
  }
  gdnv::comm::run_mpi([&](gdnv::comm::Communicator& world) { gdnv::scenario(name, world); },
                      {std::chrono::milliseconds(std::atoi(argv[2]))});
  return 0;
}
