#include "comm/accounting.hpp"

#include <ostream>
#include <sstream>

namespace gdnv::comm {

std::string_view collective_name(Collective kind) {
  static constexpr std::array<std::string_view, kCollectiveKinds> kNames{
      "all_to_all_v", "all_gather", "reduce_scatter", "all_reduce", "broadcast", "barrier", "split"};
  return kNames[static_cast<std::size_t>(kind)];
}

std::uint64_t Counters::calls() const {
  std::uint64_t n = 0;
  for (const auto& t : by_kind) n += t.calls;
  return n;
}

std::uint64_t Counters::bytes_sent() const {
  std::uint64_t n = 0;
  for (const auto& t : by_kind) n += t.bytes_sent;
  return n;
}

std::uint64_t Counters::bytes_recv() const {
  std::uint64_t n = 0;
  for (const auto& t : by_kind) n += t.bytes_recv;
  return n;
}

Counters& Counters::operator+=(const Counters& other) {
  for (std::size_t i = 0; i < by_kind.size(); ++i) {
    by_kind[i].calls += other.by_kind[i].calls;
    by_kind[i].bytes_sent += other.by_kind[i].bytes_sent;
    by_kind[i].bytes_recv += other.by_kind[i].bytes_recv;
  }
  host_syncs += other.host_syncs;
  route_builds += other.route_builds;
  return *this;
}

Counters& Counters::operator-=(const Counters& other) {
  for (std::size_t i = 0; i < by_kind.size(); ++i) {
    by_kind[i].calls -= other.by_kind[i].calls;
    by_kind[i].bytes_sent -= other.by_kind[i].bytes_sent;
    by_kind[i].bytes_recv -= other.by_kind[i].bytes_recv;
  }
  host_syncs -= other.host_syncs;
  route_builds -= other.route_builds;
  return *this;
}

Counters operator+(Counters a, const Counters& b) { return a += b; }
Counters operator-(Counters a, const Counters& b) { return a -= b; }

std::string format_counters(const Counters& counters) {
  std::ostringstream out;
  for (int k = 0; k < kCollectiveKinds; ++k) {
    const auto kind = static_cast<Collective>(k);
    const Traffic& t = counters[kind];
    if (t.calls == 0) continue;
    out << collective_name(kind) << ": " << t.calls << (t.calls == 1 ? " call, " : " calls, ") << t.bytes_sent
        << " B sent, " << t.bytes_recv << " B received\n";
  }
  out << "host syncs: " << counters.host_syncs << "\nroute builds: " << counters.route_builds << "\n";
  return out.str();
}

std::ostream& operator<<(std::ostream& out, const Counters& counters) { return out << format_counters(counters); }

void Accounting::record(Collective kind, std::uint64_t bytes_sent, std::uint64_t bytes_recv) {
  Traffic& t = counters_[kind];
  ++t.calls;
  t.bytes_sent += bytes_sent;
  t.bytes_recv += bytes_recv;
}

}  // namespace gdnv::comm
