#pragma once
// Accounting of collectives: per kind, calls and bytes sent/received, plus a host-sync counter. One
// Accounting per rank, shared by the rank's world communicator and every group split from it, so a
// scope sees everything the rank did (TP, CP and dynamic sub-groups together).
#include <array>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>

namespace gdnv::comm {

enum class Collective : std::uint8_t { AllToAllV, AllGather, ReduceScatter, AllReduce, Broadcast, Barrier, Split };
inline constexpr int kCollectiveKinds = 7;

// "all_to_all_v", "all_gather", "reduce_scatter", "all_reduce", "broadcast", "barrier", "split".
std::string_view collective_name(Collective kind);

struct Traffic {
  std::uint64_t calls = 0;
  std::uint64_t bytes_sent = 0;
  std::uint64_t bytes_recv = 0;
  bool operator==(const Traffic&) const = default;
};

// Bytes are logical payload between distinct ranks, the same on every transport: a rank's own block
// never counts, and an all_reduce of n elements counts as the reduce-scatter + all-gather of a
// balanced partition (rank p owns elements [p*n/size, (p+1)*n/size)), the bandwidth-optimal schedule
// the MPI and NCCL transports run.
struct Counters {
  std::array<Traffic, kCollectiveKinds> by_kind{};
  std::uint64_t host_syncs = 0;
  std::uint64_t route_builds = 0;  // zigzag <-> contiguous routes planned (once per micro-batch, never per layer)

  const Traffic& operator[](Collective kind) const { return by_kind[static_cast<std::size_t>(kind)]; }
  Traffic& operator[](Collective kind) { return by_kind[static_cast<std::size_t>(kind)]; }
  std::uint64_t calls() const;  // every kind together
  std::uint64_t bytes_sent() const;
  std::uint64_t bytes_recv() const;

  Counters& operator+=(const Counters& other);
  Counters& operator-=(const Counters& other);
  bool operator==(const Counters&) const = default;
};

Counters operator+(Counters a, const Counters& b);
Counters operator-(Counters a, const Counters& b);

// One line per kind with calls (kinds never called are left out), then host syncs and route builds:
// "all_to_all_v: 2 calls, 96 B sent, 96 B received\nhost syncs: 0\nroute builds: 0\n".
std::string format_counters(const Counters& counters);
std::ostream& operator<<(std::ostream& out, const Counters& counters);

class Accounting {
 public:
  const Counters& counters() const { return counters_; }
  void record(Collective kind, std::uint64_t bytes_sent, std::uint64_t bytes_recv);
  // Bump wherever code blocks the host on device data (stream sync, device-to-host copy).
  void host_sync(std::uint64_t n = 1) { counters_.host_syncs += n; }
  void route_build() { ++counters_.route_builds; }

 private:
  Counters counters_;
};

// Counts what happens on an Accounting from construction on: delta() is the traffic since then, and
// the destructor adds that delta to `sink` when one is given (e.g. a probe's per-phase totals).
class ScopedCounter {
 public:
  explicit ScopedCounter(const Accounting& accounting, Counters* sink = nullptr)
      : accounting_(accounting), start_(accounting.counters()), sink_(sink) {}
  ~ScopedCounter() {
    if (sink_) *sink_ += delta();
  }
  ScopedCounter(const ScopedCounter&) = delete;
  ScopedCounter& operator=(const ScopedCounter&) = delete;

  Counters delta() const { return accounting_.counters() - start_; }

 private:
  const Accounting& accounting_;
  Counters start_;
  Counters* sink_;
};

}  // namespace gdnv::comm
