// gpu/stream.hpp's host emulation and the in-process world's stream mover (gpu/stream_mover.hpp): the
// ordering a GPU gives, checked on the CPU. A producer and a reader are slowed on purpose, so a missing
// event wait reads a buffer before it is written, or after it is overwritten, and the test fails.
#include <atomic>
#include <chrono>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <thread>

#include <gtest/gtest.h>

#include "comm/inprocess.hpp"
#include "core/error.hpp"
#include "gpu/stream.hpp"
#include "gpu/stream_mover.hpp"

namespace gdnv::gpu {
namespace {

using namespace std::chrono_literals;

TEST(HostStream, EnqueueReturnsBeforeTheWorkRuns) {
  HostStream s;
  std::atomic<bool> open{false}, ran{false};
  s.enqueue([&] {
    while (!open) std::this_thread::yield();
    ran = true;
  });
  EXPECT_FALSE(ran);  // the task cannot have run: it waits for the host, which is here
  open = true;
  s.synchronize("test");
  EXPECT_TRUE(ran);
}

TEST(HostStream, AWaitHoldsLaterWorkUntilThePeersRecordedPoint) {
  HostStream a, b;
  std::atomic<bool> open{false};
  std::atomic<int> a_done{0}, seen_by_b{-1};
  a.enqueue([&] {
    while (!open) std::this_thread::yield();
    a_done = 1;
  });
  const auto e = a.make_event();
  a.record(e);
  b.wait(e);
  b.enqueue([&] { seen_by_b = a_done.load(); });
  std::this_thread::sleep_for(20ms);
  open = true;
  b.synchronize("test");
  EXPECT_EQ(seen_by_b, 1);
}

// cudaStreamWaitEvent's rule: the wait takes the point recorded when it was enqueued.
TEST(HostStream, ALaterRecordDoesNotMoveAnEnqueuedWait) {
  HostStream a, b;
  const auto e = a.make_event();
  a.record(e);
  b.wait(e);
  std::atomic<bool> open{false};
  a.enqueue([&] {
    while (!open) std::this_thread::yield();
  });
  a.record(e);
  b.synchronize("test");  // would never return if b waited for the second record
  open = true;
  a.synchronize("test");
}

TEST(HostStream, SynchronizeReportsAFailedTaskOnceNamingTheCaller) {
  HostStream s;
  s.enqueue([] { throw std::runtime_error("kernel fault"); });
  try {
    s.synchronize("download");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "download: kernel fault");
  }
  EXPECT_NO_THROW(s.synchronize("download"));
}

TEST(HostStream, AllocIsZeroedAndAFetchSeesEnqueuedWrites) {
  auto s = std::make_shared<HostStream>();
  const auto buf = s->alloc(4 * sizeof(float));
  const float v[2] = {1.5f, -2.0f};
  s->upload(static_cast<float*>(buf.get()) + 1, v, sizeof v);
  float got[4] = {9, 9, 9, 9};
  s->fetch(got, buf.get(), sizeof got);
  s->synchronize("test");
  EXPECT_EQ(got[0], 0.0f);
  EXPECT_EQ(got[1], 1.5f);
  EXPECT_EQ(got[2], -2.0f);
  EXPECT_EQ(got[3], 0.0f);
}

// ---- the stream mover ----

constexpr int kRanks = 3;
constexpr std::int64_t kBlock = 5;  // elements per peer block

// One collective over send [kRanks * kBlock] into recv [kRanks * kBlock] (or in place).
using Collective = void (*)(comm::Communicator&, void* send, void* recv);

float value(int rank, std::int64_t i) { return static_cast<float>(rank * 100 + i) + 0.25f; }

struct Case {
  const char* name;
  Collective run;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

const Case kCases[] = {
    {"all_to_all_v",
     [](comm::Communicator& c, void* s, void* r) {
       const std::vector<std::int64_t> counts(kRanks, kBlock);
       c.all_to_all_v(comm::ConstBuf(s, kRanks * kBlock, DType::F32), counts,
                      comm::MutBuf(r, kRanks * kBlock, DType::F32), counts);
     }},
    {"all_gather",
     [](comm::Communicator& c, void* s, void* r) {
       c.all_gather(comm::ConstBuf(s, kBlock, DType::F32), comm::MutBuf(r, kRanks * kBlock, DType::F32));
     }},
    {"reduce_scatter",
     [](comm::Communicator& c, void* s, void* r) {
       c.reduce_scatter(comm::ConstBuf(s, kRanks * kBlock, DType::F32), comm::MutBuf(r, kBlock, DType::F32));
     }},
    {"all_reduce_in_place",
     [](comm::Communicator& c, void* s, void*) { c.all_reduce(comm::MutBuf(s, kRanks * kBlock, DType::F32)); }},
    {"broadcast",
     [](comm::Communicator& c, void* s, void*) { c.broadcast(comm::MutBuf(s, kRanks * kBlock, DType::F32), 1); }},
};

// A stream mover whose reads start `delay` after its peers are ready: a reader slower than the ranks
// it reads from, so a sender that overwrote its buffer without waiting for it would be caught. Every
// rank of a test world has one (the stream mover expects stream-mover peers: they are unwrapped).
class SlowReader final : public comm::DataMover {
 public:
  SlowReader(std::shared_ptr<HostStream> stream, std::chrono::milliseconds delay)
      : stream_(stream), inner_(make_stream_mover(stream)), delay_(delay) {}

  comm::Memory memory() const override { return inner_->memory(); }
  std::shared_ptr<void> scratch(std::size_t bytes) override { return inner_->scratch(bytes); }
  void copy(void* dst, const void* src, std::size_t bytes) override { inner_->copy(dst, src, bytes); }
  void sum(DType dtype, void* out, std::span<const void* const> inputs, std::int64_t count) override {
    inner_->sum(dtype, out, inputs, count);
  }
  void ready() override { inner_->ready(); }
  void after_ready(std::span<comm::DataMover* const> peers) override {
    inner_->after_ready(unwrap(peers));
    if (delay_.count()) stream_->enqueue([d = delay_] { std::this_thread::sleep_for(d); });
  }
  void reads_done() override { inner_->reads_done(); }
  void after_reads(std::span<comm::DataMover* const> peers) override { inner_->after_reads(unwrap(peers)); }

 private:
  static std::vector<comm::DataMover*> unwrap(std::span<comm::DataMover* const> peers) {
    std::vector<comm::DataMover*> inner;
    for (comm::DataMover* p : peers) inner.push_back(static_cast<SlowReader*>(p)->inner_.get());
    return inner;
  }

  std::shared_ptr<HostStream> stream_;
  std::shared_ptr<comm::DataMover> inner_;
  std::chrono::milliseconds delay_;
};

// kRanks emulated streams and the world options that carry the ranks' collectives on them; rank 2
// reads 30 ms late.
struct StreamWorld {
  std::vector<std::shared_ptr<HostStream>> streams;
  comm::WorldOptions options;
};
StreamWorld stream_world() {
  StreamWorld w;
  for (int r = 0; r < kRanks; ++r) {
    w.streams.push_back(std::make_shared<HostStream>());
    w.options.movers.push_back(std::make_shared<SlowReader>(w.streams.back(), r == 2 ? 30ms : 0ms));
  }
  return w;
}

// What each rank holds after the collective (recv, then send) on host memory and the host mover.
std::vector<std::vector<float>> on_host(const Case& c) {
  std::vector<std::vector<float>> out(kRanks);
  comm::run_world(kRanks, [&](comm::Communicator& comm) {
    std::vector<float> send(kRanks * kBlock), recv(kRanks * kBlock);
    for (std::int64_t i = 0; i < kRanks * kBlock; ++i) send[i] = value(comm.rank(), i);
    c.run(comm, send.data(), recv.data());
    recv.insert(recv.end(), send.begin(), send.end());
    out[comm.rank()] = recv;
  });
  return out;
}

// The same on emulated streams: rank 1 writes its send buffer late, rank 2 reads late, and right after
// the collective each rank's stream overwrites its send buffer. Only the movers' event waits keep every
// read after the write it needs and before the overwrite.
std::vector<std::vector<float>> on_streams(const Case& c) {
  const StreamWorld w = stream_world();
  std::vector<std::vector<float>> out(kRanks);
  comm::run_world(
      kRanks,
      [&](comm::Communicator& comm) {
        HostStream& s = *w.streams[comm.rank()];
        const std::size_t bytes = kRanks * kBlock * sizeof(float);
        const auto send = s.alloc(bytes), recv = s.alloc(bytes);
        const int rank = comm.rank();
        s.enqueue([rank, p = static_cast<float*>(send.get())] {
          if (rank == 1) std::this_thread::sleep_for(30ms);
          for (std::int64_t i = 0; i < kRanks * kBlock; ++i) p[i] = value(rank, i);
        });
        c.run(comm, send.get(), recv.get());
        std::vector<float> after(kRanks * kBlock);
        s.fetch(after.data(), send.get(), bytes);  // the send side, before the overwrite
        s.enqueue([p = static_cast<float*>(send.get())] { std::fill(p, p + kRanks * kBlock, -1.0f); });
        std::vector<float> got(kRanks * kBlock);
        s.fetch(got.data(), recv.get(), bytes);
        s.synchronize("test");
        got.insert(got.end(), after.begin(), after.end());
        out[rank] = got;
        comm.barrier();  // a broken ordering then reads a wrong value rather than freed memory
      },
      w.options);
  return out;
}

class StreamMover : public ::testing::TestWithParam<Case> {};

TEST_P(StreamMover, MovesTheSameBitsAsTheHostMoverWhateverTheTiming) {
  EXPECT_EQ(on_streams(GetParam()), on_host(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Collectives, StreamMover, ::testing::ValuesIn(kCases),
                         [](const auto& p) { return std::string(p.param.name); });

TEST(StreamMoverWorld, MixedHostAndDeviceMoversAreAConfigError) {
  comm::WorldOptions options;
  options.movers = {make_stream_mover(std::make_shared<HostStream>()), comm::host_data_mover()};
  // An emulated stream is host memory: a device-memory mover stands in for the mismatch.
  struct DeviceMover final : comm::DataMover {
    comm::Memory memory() const override { return comm::Memory::Device; }
    std::shared_ptr<void> scratch(std::size_t) override { return nullptr; }
    void copy(void*, const void*, std::size_t) override {}
    void sum(DType, void*, std::span<const void* const>, std::int64_t) override {}
  };
  options.movers[1] = std::make_shared<DeviceMover>();
  try {
    comm::run_world(
        2, [](comm::Communicator&) {}, options);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "run_world: the ranks' data movers mix host and device memory: give every rank the same kind");
  }
  options.movers.pop_back();
  try {
    comm::run_world(
        2, [](comm::Communicator&) {}, options);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "run_world: data movers for 1 of 2 ranks: pass one per rank, or none for host memory");
  }
}

}  // namespace
}  // namespace gdnv::gpu
