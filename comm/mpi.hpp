#pragma once
// The MPI transport: one process per rank (under mpirun), host buffers. Every collective is an MPI
// non-blocking operation preceded by a handshake (an all-to-all of CallHeaders, so a mismatch is
// found before data moves) and completed by a polling wait that also serves a control channel: a
// failing rank's error reaches every peer, and a timed-out rank asks its peers where they are, so
// the message names the ranks that did not arrive. Sums are the rank-ordered ones of
// comm/rank_sum.hpp (reduce-scatter through an all-to-all, then an all-gather), bit-identical to the
// in-process world.
#include <mpi.h>

#include <functional>
#include <memory>
#include <string>

#include "comm/communicator.hpp"
#include "comm/inprocess.hpp"

namespace gdnv::comm {

// Runs fn on this process's rank of MPI_COMM_WORLD, initialising MPI when it is not yet (and then
// finalising it), and waits for every rank to return from fn. On a failure anywhere the job ends:
// each rank that fails, or learns of a peer's failure in a collective, prints "error: rank R:
// <message>" to stderr; the first failing rank waits (at most a second: a stopped peer never reports)
// until every peer has reported, then aborts the job with exit code 3 (bad input or an I/O failure,
// whatever the exception). Never returns after a failure.
void run_mpi(const std::function<void(Communicator&)>& fn, const WorldOptions& options = {});

class MpiProcess;  // the process's control channel (comm/mpi.cpp)

class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of `comm`.
  MpiCommunicator(std::shared_ptr<MpiProcess> process, MPI_Comm comm, std::uint64_t group_id,
                  std::shared_ptr<Accounting> accounting);
  ~MpiCommunicator() override;

  Memory memory() const override { return Memory::Host; }
  MPI_Comm handle() const { return comm_; }

  // For transports layered on MPI (NCCL's bootstrap): the same group over a duplicate MPI
  // communicator whose calls count in a private Accounting, not this rank's. Collective.
  std::unique_ptr<MpiCommunicator> detached_copy();
  // The cross-rank check of `call` (its to/from sized to this group): returns once every member
  // has arrived and agrees; throws CommError prefixed with `where` otherwise.
  void handshake(const Call& call, const std::string& where);
  // Polls done() while serving the control channel; throws CommError prefixed with `where` when a
  // rank has failed, or after the timeout (naming the members that have not reached this call).
  void wait(const std::function<bool()>& done, const std::string& where);

 protected:
  void execute(const Call& call) override;
  std::unique_ptr<Communicator> execute_split(const Call& call, int color, int key) override;

 private:
  void wait_request(MPI_Request& request, const std::string& where);
  void all_to_all(const void* send, const std::vector<int>& send_counts, const std::vector<int>& send_displs,
                  void* recv, const std::vector<int>& recv_counts, const std::vector<int>& recv_displs, DType dtype,
                  const std::string& where);
  void all_gather(const void* send, void* recv, const std::vector<int>& counts, const std::vector<int>& displs,
                  DType dtype, const std::string& where);

  std::shared_ptr<MpiProcess> process_;
  MPI_Comm comm_;
  std::uint64_t group_id_;     // the same on every member; names the group in control messages
  std::uint64_t entered_ = 0;  // handshakes on this group so far, the current one included
};

}  // namespace gdnv::comm
