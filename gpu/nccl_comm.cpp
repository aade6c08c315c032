#include "gpu/nccl_comm.hpp"

#include <algorithm>
#include <array>
#include <cstring>

#include "comm/transport.hpp"
#include "gpu/rank_sum_kernel.hpp"

namespace gdnv {
namespace {

void cuda_check(cudaError_t e, const std::string& where) {
  if (e != cudaSuccess)
    throw comm::CommError(where + ": CUDA error: " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}

void nccl_check(ncclResult_t r, const std::string& where) {
  if (r != ncclSuccess) throw comm::CommError(where + ": NCCL error: " + ncclGetErrorString(r));
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::F64:
      return ncclFloat64;
    case DType::F32:
      return ncclFloat32;
    case DType::BF16:
      return ncclBfloat16;
    case DType::F16:
      return ncclFloat16;
    case DType::I64:
      return ncclInt64;
    case DType::I32:
      return ncclInt32;
  }
  return ncclUint8;
}

// Device scratch from the stream-ordered allocator: no host sync to allocate or free.
class Scratch {
 public:
  Scratch(std::size_t bytes, cudaStream_t stream, const std::string& where) : stream_(stream) {
    if (bytes) cuda_check(cudaMallocAsync(&data_, bytes, stream), where);
  }
  ~Scratch() {
    if (data_) cudaFreeAsync(data_, stream_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  std::byte* data() const { return static_cast<std::byte*>(data_); }

 private:
  void* data_ = nullptr;
  cudaStream_t stream_;
};

// Runs body's NCCL calls as one group (ncclGroupStart/End), closing the group on failure too.
template <class Body>
void grouped(const std::string& where, Body body) {
  nccl_check(ncclGroupStart(), where);
  try {
    body();
  } catch (...) {
    ncclGroupEnd();
    throw;
  }
  nccl_check(ncclGroupEnd(), where);
}

}  // namespace

struct NcclCommunicator::DeviceStream {
  explicit DeviceStream(int id, const std::string& where) : device(id) {
    cuda_check(cudaSetDevice(id), where + ": cannot use CUDA device " + std::to_string(id));
    cuda_check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), where);
  }
  ~DeviceStream() { cudaStreamDestroy(stream); }
  int device;
  cudaStream_t stream = nullptr;
};

std::unique_ptr<NcclCommunicator> NcclCommunicator::create(comm::MpiCommunicator& mpi, int device) {
  auto stream = std::make_shared<DeviceStream>(device, "NCCL communicator on " + mpi.describe());
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(stream, mpi.detached_copy(), mpi.shared_accounting()));
}

NcclCommunicator::NcclCommunicator(std::shared_ptr<DeviceStream> device,
                                   std::unique_ptr<comm::MpiCommunicator> bootstrap,
                                   std::shared_ptr<comm::Accounting> accounting)
    : comm::Communicator(bootstrap->rank(), bootstrap->world_ranks(), std::move(accounting)),
      device_(std::move(device)),
      bootstrap_(std::move(bootstrap)) {
  const std::string at = "NCCL communicator on " + describe();
  ncclUniqueId id;
  std::array<std::int32_t, (sizeof id + 3) / 4> words{};
  if (rank() == 0) {
    nccl_check(ncclGetUniqueId(&id), at);
    std::memcpy(words.data(), &id, sizeof id);
  }
  bootstrap_->broadcast(comm::MutBuf(words.data(), static_cast<std::int64_t>(words.size())), 0);
  std::memcpy(&id, words.data(), sizeof id);
  cuda_check(cudaSetDevice(device_->device), at);
  nccl_check(ncclCommInitRank(&nccl_, size(), id, rank()), at);
}

NcclCommunicator::~NcclCommunicator() {
  if (nccl_) ncclCommDestroy(nccl_);
}

int NcclCommunicator::device() const { return device_->device; }
cudaStream_t NcclCommunicator::stream() const { return device_->stream; }

void NcclCommunicator::drain(const std::string& where) {
  bootstrap_->wait(
      [&] {
        const cudaError_t e = cudaStreamQuery(device_->stream);
        if (e == cudaErrorNotReady) return false;
        cuda_check(e, where);
        return true;
      },
      where);
  ncclResult_t async = ncclSuccess;
  nccl_check(ncclCommGetAsyncError(nccl_, &async), where);
  nccl_check(async, where);
  accounting().host_sync();
}

void NcclCommunicator::execute(const comm::Call& call) {
  const std::string at = where(call);
  if (call.kind == comm::Collective::Barrier) drain(at);
  bootstrap_->handshake(call, at);
  cuda_check(cudaSetDevice(device_->device), at);
  const cudaStream_t s = device_->stream;
  const ncclDataType_t type = nccl_type(call.dtype);
  const int n = size(), me = rank();
  const auto es = static_cast<std::int64_t>(dtype_size(call.dtype));
  const auto* send = static_cast<const std::byte*>(call.send);
  auto* recv = static_cast<std::byte*>(call.recv);

  // to_count(p) elements at to_offset(p) of `from` to each peer p, from_count(r) elements from each peer r
  // into `into` at into_offset(r); the rank's own block is a device copy.
  const auto exchange = [&](const std::byte* from, auto to_offset, auto to_count, std::byte* into, auto into_offset,
                            auto from_count) {
    if (const auto own = static_cast<std::size_t>(from_count(me) * es))
      cuda_check(
          cudaMemcpyAsync(into + into_offset(me) * es, from + to_offset(me) * es, own, cudaMemcpyDeviceToDevice, s),
          at);
    grouped(at, [&] {
      for (int p = 0; p < n; ++p) {
        if (p == me) continue;
        if (to_count(p)) nccl_check(ncclSend(from + to_offset(p) * es, to_count(p), type, p, nccl_, s), at);
        if (from_count(p)) nccl_check(ncclRecv(into + into_offset(p) * es, from_count(p), type, p, nccl_, s), at);
      }
    });
  };
  // counts[r] elements from rank r (at `mine` there) into recv at begins[r], for every r (all-gather-v).
  const auto gather = [&](const std::byte* mine, const std::vector<std::int64_t>& counts,
                          const std::vector<std::int64_t>& begins) {
    grouped(at, [&] {
      for (int r = 0; r < n; ++r)
        if (counts[r]) nccl_check(ncclBroadcast(mine, recv + begins[r] * es, counts[r], type, r, nccl_, s), at);
    });
  };
  const auto send_offset = [&](int p) { return call.send_offset(p); };
  const auto to = [&](int p) { return call.to[p]; };

  switch (call.kind) {
    case comm::Collective::AllToAllV:
      exchange(
          send, send_offset, to, recv, [&](int r) { return call.recv_offset(r); }, [&](int r) { return call.from[r]; });
      break;
    case comm::Collective::AllGather: {
      if (std::all_of(call.from.begin(), call.from.end(), [&](std::int64_t c) { return c == call.from[0]; })) {
        if (call.from[0]) nccl_check(ncclAllGather(send, recv, call.from[0], type, nccl_, s), at);
        break;
      }
      std::vector<std::int64_t> begins;
      for (int r = 0; r < n; ++r) begins.push_back(call.recv_offset(r));
      gather(send, call.from, begins);
      break;
    }
    case comm::Collective::ReduceScatter: {
      const std::int64_t own = call.from[me];
      const Scratch blocks(static_cast<std::size_t>(n * own * es), s, at);
      exchange(
          send, send_offset, to, blocks.data(), [&](int r) { return r * own; }, [&](int) { return own; });
      device_rank_sum(call.dtype, recv, blocks.data(), own, n, own, s);
      break;
    }
    case comm::Collective::AllReduce: {
      // Reduce-scatter over the balanced partition, then all-gather of the summed parts.
      const std::int64_t count = call.to[0];
      std::vector<std::int64_t> parts, begins;
      for (int p = 0; p < n; ++p) {
        begins.push_back(comm::partition_begin(count, n, p));
        parts.push_back(comm::partition_begin(count, n, p + 1) - begins.back());
      }
      const std::int64_t own = parts[me];
      const Scratch blocks(static_cast<std::size_t>(n * own * es), s, at);
      const Scratch summed(static_cast<std::size_t>(own * es), s, at);
      exchange(
          send, [&](int p) { return begins[p]; }, [&](int p) { return parts[p]; }, blocks.data(),
          [&](int r) { return r * own; }, [&](int) { return own; });
      device_rank_sum(call.dtype, summed.data(), blocks.data(), own, n, own, s);
      gather(summed.data(), parts, begins);
      break;
    }
    case comm::Collective::Broadcast:
      if (call.from[call.root])
        nccl_check(ncclBroadcast(recv, recv, call.from[call.root], type, call.root, nccl_, s), at);
      break;
    case comm::Collective::Barrier:
    case comm::Collective::Split:
      break;
  }
}

// The bootstrap's split runs the handshake.
std::unique_ptr<comm::Communicator> NcclCommunicator::execute_split(const comm::Call&, int color, int key) {
  auto child = bootstrap_->split(color, key);
  if (!child) return nullptr;
  std::unique_ptr<comm::MpiCommunicator> boot(static_cast<comm::MpiCommunicator*>(child.release()));
  return std::unique_ptr<comm::Communicator>(new NcclCommunicator(device_, std::move(boot), shared_accounting()));
}

}  // namespace gdnv
