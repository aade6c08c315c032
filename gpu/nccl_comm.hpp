#pragma once
// The NCCL transport: device buffers, one CUDA device and one stream per rank (shared by every group
// the rank splits), NCCL's unique id bootstrapped over MPI. Each collective first runs the MPI
// handshake of comm/mpi.hpp (agreement, failure propagation and timeouts as on every transport), then
// enqueues NCCL work on the rank's stream without blocking the host. Sums are the rank-ordered ones of
// comm/rank_sum.hpp: NCCL moves every contribution (reduce-scatter as grouped send/recv, then an
// all-gather) and a kernel adds them in rank order, so results match the host transports bit for bit.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <memory>

#include "comm/mpi.hpp"

namespace gdnv {

class NcclCommunicator final : public comm::Communicator {
 public:
  // Collective over `mpi`'s group: an NCCL communicator over the same ranks, this rank on CUDA device
  // `device`. Counts into mpi's (the rank's) Accounting. Throws CommError when the device is unusable.
  static std::unique_ptr<NcclCommunicator> create(comm::MpiCommunicator& mpi, int device);
  ~NcclCommunicator() override;

  comm::Memory memory() const override { return comm::Memory::Device; }
  int device() const;
  // Every collective of this rank runs on this stream; kernels producing or consuming collective
  // buffers belong on it too.
  cudaStream_t stream() const;

 protected:
  // A barrier waits for this rank's stream to drain (one host sync, counted) and then for every rank.
  void execute(const comm::Call& call) override;
  std::unique_ptr<comm::Communicator> execute_split(const comm::Call& call, int color, int key) override;

 private:
  struct DeviceStream;
  NcclCommunicator(std::shared_ptr<DeviceStream> device, std::unique_ptr<comm::MpiCommunicator> bootstrap,
                   std::shared_ptr<comm::Accounting> accounting);
  void drain(const std::string& where);

  std::shared_ptr<DeviceStream> device_;
  std::unique_ptr<comm::MpiCommunicator> bootstrap_;  // same group over MPI: handshakes, ids, splits
  ncclComm_t nccl_ = nullptr;
};

}  // namespace gdnv
