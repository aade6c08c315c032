#include "comm/inprocess.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <numeric>
#include <thread>

#include "comm/rank_sum.hpp"
#include "comm/transport.hpp"
#include "faults/seams.hpp"

namespace gdnv::comm {
namespace {

using Clock = std::chrono::steady_clock;

// State shared by every rank's thread. One mutex guards the failure record and every group's
// rendezvous, so a failure wakes every waiter in every group.
struct World {
  World(int n, std::chrono::milliseconds t) : exited(static_cast<std::size_t>(n), false), timeout(t) {}

  void fail(int world_rank, std::exception_ptr e) {
    const std::lock_guard lock(mu);
    if (!error) {
      failed_rank = world_rank;
      failure = message_of(e);
      error = std::move(e);
    }
    cv.notify_all();
  }
  void exit(int world_rank) {
    const std::lock_guard lock(mu);
    exited[static_cast<std::size_t>(world_rank)] = true;
    cv.notify_all();
  }

  std::mutex mu;
  std::condition_variable cv;
  std::vector<bool> exited;  // the rank has returned from fn
  std::exception_ptr error;  // the first rank's failure
  int failed_rank = -1;
  std::string failure;
  std::chrono::milliseconds timeout;
};

// One member's part in a collective: its checked call, its mover, and its color and key when splitting.
struct Post {
  const Call* call;
  DataMover* mover = nullptr;
  int color = 0, key = 0;
};

class HostMover final : public DataMover {
 public:
  Memory memory() const override { return Memory::Host; }
  std::shared_ptr<void> scratch(std::size_t bytes) override {
    return std::shared_ptr<void>(::operator new(std::max<std::size_t>(bytes, 1)),
                                 [](void* p) { ::operator delete(p); });
  }
  void copy(void* dst, const void* src, std::size_t bytes) override { std::memcpy(dst, src, bytes); }
  void sum(DType dtype, void* out, std::span<const void* const> inputs, std::int64_t count) override {
    rank_sum(dtype, out, inputs, count);
  }
};

// Rendezvous of one group. Each round is one collective: members post, wait until all have posted,
// move data reading the peers' posts, then depart; the last to depart closes the round.
struct Group {
  Group(World& w, std::vector<int> ranks) : world(w), world_ranks(std::move(ranks)), posts(world_ranks.size()) {}

  World& world;
  std::vector<int> world_ranks;
  std::uint64_t round = 0;
  int arrived = 0, departed = 0;
  std::vector<const Post*> posts;                  // nullptr: not arrived this round
  std::string broken;                              // a member gave up a round: later calls fail with this
  std::map<int, std::shared_ptr<Group>> children;  // groups the current split makes, by color
};

class InProcessCommunicator final : public Communicator {
 public:
  InProcessCommunicator(std::shared_ptr<Group> group, int rank, std::shared_ptr<Accounting> accounting,
                        std::shared_ptr<DataMover> mover)
      : Communicator(rank, group->world_ranks, std::move(accounting)),
        group_(std::move(group)),
        mover_(std::move(mover)) {}

  Memory memory() const override { return mover_->memory(); }

 protected:
  void execute(const Call& call) override {
    // An in-place all_reduce would overwrite the buffer peers are summing from: they read a copy.
    std::shared_ptr<void> staged;
    Call staged_call;
    const Call* mine = &call;
    if (call.kind == Collective::AllReduce && call.send == call.recv && call.to[0] > 0) {
      const auto bytes = static_cast<std::size_t>(call.to[0]) * dtype_size(call.dtype);
      staged = mover_->scratch(bytes);
      mover_->copy(staged.get(), call.send, bytes);
      staged_call = call;
      staged_call.send = staged.get();
      mine = &staged_call;
    }
    mover_->ready();
    const Post post{mine, mover_.get()};
    const std::string error = arrive(post, call);
    std::vector<DataMover*> peers;
    if (error.empty()) {
      for (const Post* p : group_->posts) peers.push_back(p->mover);
      mover_->after_ready(peers);
      move_data(*mine);
      mover_->reads_done();
    }
    depart();
    if (!error.empty()) throw CommError(where(call) + ": " + error);
    mover_->after_reads(peers);
  }

  std::unique_ptr<Communicator> execute_split(const Call& call, int color, int key) override {
    const Post post{&call, mover_.get(), color, key};
    const std::string error = arrive(post, call);
    std::unique_ptr<Communicator> child;
    if (error.empty() && color >= 0) child = join_child(color);
    depart();
    if (!error.empty()) throw CommError(where(call) + ": " + error);
    return child;
  }

 private:
  // Posts this rank's part and waits for every member's. Gives up (withdrawing the post) when a rank
  // failed, a member it waits for has returned from fn or gave up, or the timeout passes. Returns the
  // first disagreement between members, found in the same order by every member.
  std::string arrive(const Post& post, const Call& call) {
    Group& g = *group_;
    World& w = g.world;
    std::unique_lock lock(w.mu);
    if (w.error) throw CommError(where(call) + ": " + failed_peer());
    if (!g.broken.empty()) throw CommError(where(call) + ": " + g.broken);
    g.posts[rank()] = &post;
    ++g.arrived;
    w.cv.notify_all();
    const auto deadline = Clock::now() + w.timeout;
    while (g.arrived < size()) {
      std::string why;
      if (w.error) why = failed_peer();
      else if (!g.broken.empty()) why = g.broken;
      else if (const std::string gone = missing(true); !gone.empty())
        why = gone + " did not arrive (returned from the world function)";
      else if (Clock::now() >= deadline)
        why = "timed out after " + format_seconds(w.timeout) + ": " + missing(false) + " did not arrive";
      else {
        w.cv.wait_until(lock, deadline);
        continue;
      }
      g.posts[rank()] = nullptr;
      --g.arrived;
      // Members still waiting would otherwise wait for this rank until their own timeouts.
      if (!w.error && g.broken.empty()) g.broken = who(rank()) + " gave up: " + why;
      w.cv.notify_all();
      throw CommError(where(call) + ": " + why);
    }
    lock.unlock();
    // Posts stay put until the round closes, which needs this rank's departure.
    for (int p = 0; p < size(); ++p)
      for (int r = 0; r < size(); ++r)
        if (auto m = mismatch(*this, header_toward(*g.posts[r]->call, p), r, *g.posts[p]->call, p); !m.empty())
          return m;
    return "";
  }

  void depart() {
    Group& g = *group_;
    std::unique_lock lock(g.world.mu);
    const std::uint64_t round = g.round;
    if (++g.departed == size()) {
      g.arrived = g.departed = 0;
      std::fill(g.posts.begin(), g.posts.end(), nullptr);
      g.children.clear();
      ++g.round;
      g.world.cv.notify_all();
    } else {
      g.world.cv.wait(lock, [&] { return g.round != round; });
    }
  }

  // "rank 2 failed: <its message>" for the world's first failure.
  std::string failed_peer() const {
    const World& w = group_->world;
    return name_world_rank(*this, w.failed_rank) + " failed: " + w.failure;
  }

  // Members that have not posted this round ("rank 1", "ranks 1, 3"); only those that have returned
  // from fn when `exited_only`. Empty when there are none.
  std::string missing(bool exited_only) const {
    const Group& g = *group_;
    std::vector<int> ranks;
    for (int r = 0; r < size(); ++r)
      if (!g.posts[r] && (!exited_only || g.world.exited[static_cast<std::size_t>(g.world_ranks[r])]))
        ranks.push_back(r);
    return ranks.empty() ? "" : who(ranks);
  }

  void move_data(const Call& call) const {
    const auto& posts = group_->posts;
    const auto es = static_cast<std::int64_t>(dtype_size(call.dtype));
    auto* out = static_cast<std::byte*>(call.recv);
    const auto copy = [&](std::int64_t out_offset, const void* src, std::int64_t src_offset, std::int64_t n) {
      if (n > 0)
        mover_->copy(out + out_offset * es, static_cast<const std::byte*>(src) + src_offset * es,
                     static_cast<std::size_t>(n * es));
    };
    std::vector<const void*> inputs;
    switch (call.kind) {
      case Collective::AllToAllV:
        for (int r = 0; r < size(); ++r) {
          const Call& c = *posts[r]->call;
          copy(call.recv_offset(r), c.send, c.send_offset(rank()), call.from[r]);
        }
        break;
      case Collective::AllGather:
        for (int r = 0; r < size(); ++r) copy(call.recv_offset(r), posts[r]->call->send, 0, call.from[r]);
        break;
      case Collective::ReduceScatter:
        for (int r = 0; r < size(); ++r) {
          const Call& c = *posts[r]->call;
          inputs.push_back(static_cast<const std::byte*>(c.send) + c.send_offset(rank()) * es);
        }
        faults::summand_order(inputs, rank());
        mover_->sum(call.dtype, call.recv, inputs, call.from[rank()]);
        break;
      case Collective::AllReduce:
        for (int r = 0; r < size(); ++r) inputs.push_back(posts[r]->call->send);
        faults::summand_order(inputs, rank());
        mover_->sum(call.dtype, call.recv, inputs, call.to[0]);
        break;
      case Collective::Broadcast:
        if (rank() != call.root) copy(0, posts[call.root]->call->send, 0, call.from[call.root]);
        break;
      case Collective::Barrier:
      case Collective::Split:
        break;
    }
  }

  // This rank's group among the members that posted `color`, ordered by (key, rank); the first
  // member to get here creates the shared state.
  std::unique_ptr<Communicator> join_child(int color) {
    Group& g = *group_;
    std::vector<int> members;
    for (int r = 0; r < size(); ++r)
      if (g.posts[r]->color == color) members.push_back(r);
    std::stable_sort(members.begin(), members.end(), [&](int a, int b) { return g.posts[a]->key < g.posts[b]->key; });
    std::vector<int> world_ranks;
    for (int r : members) world_ranks.push_back(g.world_ranks[r]);
    const int new_rank = static_cast<int>(std::find(members.begin(), members.end(), rank()) - members.begin());
    std::shared_ptr<Group> child;
    {
      const std::lock_guard lock(g.world.mu);
      auto& slot = g.children[color];
      if (!slot) slot = std::make_shared<Group>(g.world, world_ranks);
      child = slot;
    }
    return std::make_unique<InProcessCommunicator>(std::move(child), new_rank, shared_accounting(), mover_);
  }

  std::shared_ptr<Group> group_;
  std::shared_ptr<DataMover> mover_;
};

}  // namespace

std::shared_ptr<DataMover> host_data_mover() { return std::make_shared<HostMover>(); }

void run_world(int n, const std::function<void(Communicator&)>& fn, const WorldOptions& options) {
  if (n < 1) throw ConfigError("run_world: the world needs at least 1 rank, got " + std::to_string(n));
  if (options.timeout.count() <= 0)
    throw ConfigError("run_world: the collective timeout must be positive, got " +
                      std::to_string(options.timeout.count()) + " ms");
  if (!options.movers.empty() && options.movers.size() != static_cast<std::size_t>(n))
    throw ConfigError("run_world: data movers for " + std::to_string(options.movers.size()) + " of " +
                      std::to_string(n) + " ranks: pass one per rank, or none for host memory");
  for (const auto& m : options.movers)
    if ((m ? m->memory() : Memory::Host) != (options.movers[0] ? options.movers[0]->memory() : Memory::Host))
      throw ConfigError("run_world: the ranks' data movers mix host and device memory: give every rank the same kind");
  World world(n, options.timeout);
  std::vector<int> ranks(static_cast<std::size_t>(n));
  std::iota(ranks.begin(), ranks.end(), 0);
  const auto group = std::make_shared<Group>(world, ranks);
  {
    std::vector<std::jthread> threads;
    for (int r = 0; r < n; ++r)
      threads.emplace_back([&, r] {
        try {
          std::shared_ptr<DataMover> mover =
              options.movers.empty() ? nullptr : options.movers[static_cast<std::size_t>(r)];
          InProcessCommunicator comm(group, r, std::make_shared<Accounting>(), mover ? mover : host_data_mover());
          fn(comm);
        } catch (...) {
          world.fail(r, std::current_exception());
        }
        world.exit(r);
      });
  }
  if (world.error) std::rethrow_exception(world.error);
}

}  // namespace gdnv::comm
