#include "comm/mpi.hpp"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <list>
#include <map>
#include <numeric>
#include <set>
#include <thread>

#include "comm/rank_sum.hpp"
#include "comm/transport.hpp"
#include "core/rng.hpp"
#include "core/text.hpp"
#include "faults/seams.hpp"

namespace gdnv::comm {
namespace {

using Clock = std::chrono::steady_clock;

// Control-channel tags.
constexpr int kTagFailure = 101;  // payload: the failing rank's message
constexpr int kTagAck = 102;      // a peer has seen the failure and reported it
constexpr int kTagQuery = 103;    // payload: {query id, group id}; "how far are you on this group?"
constexpr int kTagAnswer = 104;   // payload: {query id, collectives entered on the group, returned from fn}

constexpr std::uint64_t kFinishGroup = ~std::uint64_t{0};         // run_mpi's closing barrier
constexpr std::uint64_t kDuplicateMark = std::uint64_t{1} << 63;  // group id salt of a detached copy
constexpr int kSpinsBeforeSleep = 16;
constexpr auto kPollSleep = std::chrono::microseconds(50);
constexpr auto kQueryGrace = std::chrono::milliseconds(1000);

void check(int rc, const std::string& where) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw CommError(where + ": MPI error: " + std::string(text, static_cast<std::size_t>(len)));
}

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::F64:
      return MPI_DOUBLE;
    case DType::F32:
      return MPI_FLOAT;
    case DType::BF16:
    case DType::F16:
      return MPI_UINT16_T;  // moved as bits; sums happen locally (comm/rank_sum.hpp)
    case DType::I64:
      return MPI_INT64_T;
    case DType::I32:
      return MPI_INT32_T;
  }
  return MPI_BYTE;
}

// MPI counts and displacements are int.
int as_int(std::int64_t v, const std::string& where) {
  if (v > INT_MAX)
    throw CommError(where + ": " + std::to_string(v) + " elements exceed MPI's int count limit; split the call");
  return static_cast<int>(v);
}

std::vector<int> as_ints(const std::vector<std::int64_t>& v, const std::string& where) {
  std::vector<int> out;
  for (const auto x : v) out.push_back(as_int(x, where));
  return out;
}

std::vector<int> displacements(const std::vector<int>& counts, const std::string& where) {
  std::vector<int> d;
  std::int64_t at = 0;
  for (const int c : counts) {
    d.push_back(as_int(at, where));
    at += c;
  }
  return d;
}

std::vector<int> member_world_ranks(MPI_Comm comm) {
  int n = 0;
  MPI_Comm_size(comm, &n);
  MPI_Group group, world;
  MPI_Comm_group(comm, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  std::vector<int> in(static_cast<std::size_t>(n)), out(static_cast<std::size_t>(n));
  std::iota(in.begin(), in.end(), 0);
  MPI_Group_translate_ranks(group, n, in.data(), world, out.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  return out;
}

int rank_in(MPI_Comm comm) {
  int r = 0;
  MPI_Comm_rank(comm, &r);
  return r;
}

// Every rank of MPI_COMM_WORLD has reached run_mpi: a message to and from every peer, polled until the
// timeout. The blocking communicator duplications that follow cannot then wait on a rank that never
// came. On a timeout this rank prints the ranks it has not heard from and aborts the job (exit 3).
void await_every_rank(std::chrono::milliseconds timeout) {
  int me = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  constexpr int kTagHello = 100;
  std::vector<MPI_Request> recvs(static_cast<std::size_t>(n), MPI_REQUEST_NULL), sends = recvs;
  std::vector<int> hello(static_cast<std::size_t>(n), 1);
  for (int r = 0; r < n; ++r) {
    if (r == me) continue;
    MPI_Irecv(&hello[static_cast<std::size_t>(r)], 1, MPI_INT, r, kTagHello, MPI_COMM_WORLD, &recvs[r]);
    MPI_Isend(&hello[static_cast<std::size_t>(me)], 1, MPI_INT, r, kTagHello, MPI_COMM_WORLD, &sends[r]);
  }
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    std::vector<int> missing;
    for (int r = 0; r < n; ++r) {
      int done = 1;
      if (recvs[r] != MPI_REQUEST_NULL) MPI_Test(&recvs[r], &done, MPI_STATUS_IGNORE);
      if (!done) missing.push_back(r);
    }
    if (missing.empty()) break;
    if (Clock::now() > deadline) {
      std::string names;
      for (const int r : missing) names += (names.empty() ? "" : ", ") + std::to_string(r);
      const std::string line = "error: rank " + std::to_string(me) + ": run_mpi: timed out after " +
                               format_seconds(timeout) + " waiting for every rank to start: rank(s) " + names +
                               " did not arrive (stopped or hung before run_mpi)\n";
      std::fwrite(line.data(), 1, line.size(), stderr);
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 3);
    }
    std::this_thread::sleep_for(kPollSleep);
  }
  MPI_Waitall(n, sends.data(), MPI_STATUSES_IGNORE);
}

}  // namespace

// The process's side of the control channel (a duplicate of MPI_COMM_WORLD): failure notices,
// acknowledgements, and "where are you" queries with their answers.
class MpiProcess {
 public:
  MpiProcess(std::chrono::milliseconds timeout, bool thread_multiple)
      : timeout_(timeout), thread_multiple_(thread_multiple) {
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
    MPI_Comm_dup(MPI_COMM_WORLD, &control_);
    MPI_Comm_set_errhandler(control_, MPI_ERRORS_RETURN);
  }
  ~MpiProcess() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    for (auto& out : outgoing_) MPI_Wait(&out.request, MPI_STATUS_IGNORE);
    MPI_Comm_free(&control_);
  }
  MpiProcess(const MpiProcess&) = delete;
  MpiProcess& operator=(const MpiProcess&) = delete;

  std::chrono::milliseconds timeout() const { return timeout_; }
  // MPI_THREAD_MULTIPLE: a blocking MPI call can run on a helper thread while this one polls.
  bool thread_multiple() const { return thread_multiple_; }
  std::uint64_t enter(std::uint64_t group_id) { return ++entered_[group_id]; }
  bool peer_failed() const { return failed_rank_ >= 0; }
  int failed_rank() const { return failed_rank_; }
  const std::string& failure() const { return failure_; }

  // Handles every control message that has arrived.
  void serve() {
    for (;;) {
      int flag = 0;
      MPI_Status status;
      MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, control_, &flag, &status);
      if (!flag) break;
      int bytes = 0;
      MPI_Get_count(&status, MPI_BYTE, &bytes);
      std::vector<char> payload(static_cast<std::size_t>(bytes));
      MPI_Recv(payload.data(), bytes, MPI_BYTE, status.MPI_SOURCE, status.MPI_TAG, control_, MPI_STATUS_IGNORE);
      handle(status.MPI_SOURCE, status.MPI_TAG, payload);
    }
    outgoing_.remove_if([](Outgoing& out) {
      int done = 0;
      MPI_Test(&out.request, &done, MPI_STATUS_IGNORE);
      return done != 0;
    });
  }

  // Asks the members of `comm` (group `group_id`) that are behind call `k` where they are; returns
  // "rank 3 did not arrive (rank 3 returned from the world function)" and the like.
  std::string absentees(std::uint64_t group_id, std::uint64_t k, const Communicator& comm) {
    ++query_id_;
    answers_.clear();
    const auto& members = comm.world_ranks();
    for (const int w : members)
      if (w != world_rank_) send(w, kTagQuery, {query_id_, group_id});
    const auto deadline = Clock::now() + std::min<std::chrono::milliseconds>(timeout_, kQueryGrace);
    while (answers_.size() + 1 < members.size() && Clock::now() < deadline) {
      serve();
      std::this_thread::sleep_for(kPollSleep);
    }
    std::vector<int> late;
    std::string details;
    for (int r = 0; r < comm.size(); ++r) {
      const int w = members[static_cast<std::size_t>(r)];
      if (w == world_rank_) continue;
      const auto it = answers_.find(w);
      if (it != answers_.end() && it->second.entered >= k) continue;
      late.push_back(r);
      details += (details.empty() ? "" : "; ") + comm.who(r) +
                 (it == answers_.end()  ? " did not answer: busy outside any collective"
                  : it->second.finished ? " returned from the world function"
                                        : " is waiting in another collective");
    }
    if (late.empty()) return "every rank arrived, but the transfer did not complete";
    return comm.who(late) + " did not arrive (" + details + ")";
  }

  // run_mpi's closing barrier: every rank has returned from fn. Answers queries as "returned".
  void finish(const Communicator& world) {
    finished_ = true;
    const std::uint64_t k = enter(kFinishGroup);
    const std::string where = "run_mpi: waiting for every rank to return from the world function";
    MPI_Request request;
    check(MPI_Ibarrier(control_, &request), where);
    const auto deadline = Clock::now() + timeout_;
    for (int spin = 0;; ++spin) {
      int done = 0;
      check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), where);
      if (done) return;
      serve();
      if (peer_failed()) throw CommError(where + ": " + name_world_rank(world, failed_rank_) + " failed: " + failure_);
      if (Clock::now() > deadline)
        throw CommError(where + ": timed out after " + format_seconds(timeout_) + ": " +
                        absentees(kFinishGroup, k, world));
      if (spin >= kSpinsBeforeSleep) std::this_thread::sleep_for(kPollSleep);
    }
  }

  // Prints this rank's error, spreads it (or acknowledges the peer failure it came from), lets peers
  // report, and aborts the job.
  [[noreturn]] void fail_job(const std::exception_ptr& error) {
    const std::string message = message_of(error);
    // One write, so lines from several ranks do not interleave.
    const std::string line = "error: rank " + std::to_string(world_rank_) + ": " + printable(message) + "\n";
    std::fwrite(line.data(), 1, line.size(), stderr);
    std::fflush(stderr);
    serve();
    const bool origin = !peer_failed();
    if (origin) {
      for (int w = 0; w < world_size_; ++w)
        if (w != world_rank_) send(w, kTagFailure, std::vector<char>(message.begin(), message.end()));
    } else {
      send(failed_rank_, kTagAck, std::vector<char>{});
    }
    // The first failing rank tears the job down once every peer has reported, or after a short grace:
    // a stopped or hung peer never reports, and the job must not wait a second timeout for it. The
    // others wait for that, and abort themselves only if it never comes.
    const auto deadline =
        Clock::now() + (origin ? std::min<std::chrono::milliseconds>(timeout_, kQueryGrace) : timeout_);
    while (Clock::now() < deadline && (!origin || static_cast<int>(reported_.size()) < world_size_ - 1)) {
      serve();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    // Any exception is this run's bad input or I/O failure (exit 3), as run_cli maps it; a numeric
    // failure is a verdict the world function returns, never an exception.
    MPI_Abort(MPI_COMM_WORLD, 3);
    std::abort();  // MPI_Abort does not return
  }

 private:
  struct Outgoing {
    std::vector<char> bytes;
    MPI_Request request = MPI_REQUEST_NULL;
  };
  struct Answer {
    std::uint64_t entered = 0;
    bool finished = false;
  };

  void send(int world_rank, int tag, std::vector<char> bytes) {
    auto& out = outgoing_.emplace_back(Outgoing{std::move(bytes)});
    MPI_Isend(out.bytes.data(), static_cast<int>(out.bytes.size()), MPI_BYTE, world_rank, tag, control_, &out.request);
  }
  void send(int world_rank, int tag, std::initializer_list<std::uint64_t> words) {
    std::vector<char> bytes(words.size() * sizeof(std::uint64_t));
    std::memcpy(bytes.data(), words.begin(), bytes.size());
    send(world_rank, tag, std::move(bytes));
  }

  void handle(int source, int tag, const std::vector<char>& payload) {
    std::uint64_t words[3] = {0, 0, 0};
    if (!payload.empty()) std::memcpy(words, payload.data(), std::min(payload.size(), sizeof words));
    switch (tag) {
      case kTagFailure:
        reported_.insert(source);
        if (failed_rank_ < 0) {
          failed_rank_ = source;
          failure_.assign(payload.begin(), payload.end());
        }
        break;
      case kTagAck:
        reported_.insert(source);
        break;
      case kTagQuery:
        send(source, kTagAnswer, {words[0], entered_[words[1]], finished_ ? 1u : 0u});
        break;
      case kTagAnswer:
        if (words[0] == query_id_) answers_[source] = Answer{words[1], words[2] != 0};
        break;
      default:
        break;
    }
  }

  std::chrono::milliseconds timeout_;
  bool thread_multiple_ = false;
  int world_rank_ = 0, world_size_ = 1;
  MPI_Comm control_ = MPI_COMM_NULL;
  std::map<std::uint64_t, std::uint64_t> entered_;  // group id -> collectives entered on it
  bool finished_ = false;
  int failed_rank_ = -1;
  std::string failure_;
  std::set<int> reported_;  // ranks that acknowledged a failure or failed themselves
  std::uint64_t query_id_ = 0;
  std::map<int, Answer> answers_;  // world rank -> answer to the current query
  std::list<Outgoing> outgoing_;
};

MpiCommunicator::MpiCommunicator(std::shared_ptr<MpiProcess> process, MPI_Comm comm, std::uint64_t group_id,
                                 std::shared_ptr<Accounting> accounting)
    : Communicator(rank_in(comm), member_world_ranks(comm), std::move(accounting)),
      process_(std::move(process)),
      comm_(comm),
      group_id_(group_id) {}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&comm_);
}

void MpiCommunicator::wait(const std::function<bool()>& done, const std::string& where) {
  const auto deadline = Clock::now() + process_->timeout();
  for (int spin = 0;; ++spin) {
    // Failure first: once a rank has failed, no collective completes here, as in the in-process world.
    process_->serve();
    if (process_->peer_failed())
      throw CommError(where + ": " + name_world_rank(*this, process_->failed_rank()) +
                      " failed: " + process_->failure());
    if (done()) return;
    if (Clock::now() > deadline)
      throw CommError(where + ": timed out after " + format_seconds(process_->timeout()) + ": " +
                      process_->absentees(group_id_, entered_, *this));
    if (spin >= kSpinsBeforeSleep) std::this_thread::sleep_for(kPollSleep);
  }
}

void MpiCommunicator::wait_request(MPI_Request& request, const std::string& where) {
  wait(
      [&] {
        int done = 0;
        check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), where);
        return done != 0;
      },
      where);
}

void MpiCommunicator::handshake(const Call& call, const std::string& where) {
  entered_ = process_->enter(group_id_);
  std::vector<CallHeader> out, in(static_cast<std::size_t>(size()));
  for (int p = 0; p < size(); ++p) out.push_back(header_toward(call, p));
  MPI_Request request;
  check(
      MPI_Ialltoall(out.data(), sizeof(CallHeader), MPI_BYTE, in.data(), sizeof(CallHeader), MPI_BYTE, comm_, &request),
      where);
  wait_request(request, where);
  for (int r = 0; r < size(); ++r)
    if (const std::string m = mismatch(*this, in[r], r, call, rank()); !m.empty()) throw CommError(where + ": " + m);
}

void MpiCommunicator::all_to_all(const void* send, const std::vector<int>& send_counts,
                                 const std::vector<int>& send_displs, void* recv, const std::vector<int>& recv_counts,
                                 const std::vector<int>& recv_displs, DType dtype, const std::string& where) {
  const MPI_Datatype type = mpi_type(dtype);
  MPI_Request request;
  check(MPI_Ialltoallv(send, send_counts.data(), send_displs.data(), type, recv, recv_counts.data(), recv_displs.data(),
                       type, comm_, &request),
        where);
  wait_request(request, where);
}

void MpiCommunicator::all_gather(const void* send, void* recv, const std::vector<int>& counts,
                                 const std::vector<int>& displs, DType dtype, const std::string& where) {
  const MPI_Datatype type = mpi_type(dtype);
  MPI_Request request;
  check(MPI_Iallgatherv(send, counts[rank()], type, recv, counts.data(), displs.data(), type, comm_, &request), where);
  wait_request(request, where);
}

void MpiCommunicator::execute(const Call& call) {
  const std::string at = where(call);
  handshake(call, at);
  const int n = size(), me = rank();
  const auto es = static_cast<std::int64_t>(dtype_size(call.dtype));
  // Sums: every rank's contribution to this rank's part arrives in `blocks` (rank-major), then the
  // rank-ordered sum of comm/rank_sum.hpp.
  const auto sum_blocks = [&](const std::vector<std::byte>& blocks, void* out, std::int64_t own) {
    std::vector<const void*> inputs;
    for (int r = 0; r < n; ++r) inputs.push_back(blocks.data() + r * own * es);
    faults::summand_order(inputs, me);
    rank_sum(call.dtype, out, inputs, own);
  };
  switch (call.kind) {
    case Collective::AllToAllV: {
      const auto sc = as_ints(call.to, at), rc = as_ints(call.from, at);
      all_to_all(call.send, sc, displacements(sc, at), call.recv, rc, displacements(rc, at), call.dtype, at);
      break;
    }
    case Collective::AllGather: {
      const auto rc = as_ints(call.from, at);
      all_gather(call.send, call.recv, rc, displacements(rc, at), call.dtype, at);
      break;
    }
    case Collective::ReduceScatter: {
      const std::int64_t own = call.from[me];
      std::vector<std::byte> blocks(static_cast<std::size_t>(n * own * es));
      const auto sc = as_ints(call.to, at), rc = as_ints(call.from, at);
      all_to_all(call.send, sc, displacements(sc, at), blocks.data(), rc, displacements(rc, at), call.dtype, at);
      sum_blocks(blocks, call.recv, own);
      break;
    }
    case Collective::AllReduce: {
      // Reduce-scatter over the balanced partition, then all-gather of the summed parts.
      const std::int64_t count = call.to[0];
      const auto begin = [&](int p) {
        return faults::all_reduce_part_begin(partition_begin(count, n, p), count, n, p);
      };
      std::vector<int> parts, begins;
      for (int p = 0; p < n; ++p) {
        begins.push_back(as_int(begin(p), at));
        parts.push_back(as_int(begin(p + 1) - begin(p), at));
      }
      const int own = parts[me];
      std::vector<std::byte> blocks(static_cast<std::size_t>(n * own * es)), summed(static_cast<std::size_t>(own * es));
      const std::vector<int> rc(static_cast<std::size_t>(n), own);
      all_to_all(call.send, parts, begins, blocks.data(), rc, displacements(rc, at), call.dtype, at);
      sum_blocks(blocks, summed.data(), own);
      all_gather(summed.data(), call.recv, parts, begins, call.dtype, at);
      break;
    }
    case Collective::Broadcast: {
      MPI_Request request;
      check(MPI_Ibcast(call.recv, as_int(call.from[call.root], at), mpi_type(call.dtype), call.root, comm_, &request),
            at);
      wait_request(request, at);
      break;
    }
    case Collective::Barrier:  // the handshake is the barrier
    case Collective::Split:
      break;
  }
}

std::unique_ptr<Communicator> MpiCommunicator::execute_split(const Call& call, int color, int key) {
  const std::string at = where(call);
  handshake(call, at);
  // MPI has no non-blocking split: a member that stops after the handshake would hold the others in
  // MPI_Comm_split forever. Under MPI_THREAD_MULTIPLE it runs on a helper thread while this one polls
  // under the timeout (and names the member that does not answer); the helper is left behind when the
  // job aborts. Without that thread level the split blocks (README: MPI timeouts).
  struct Split {
    std::atomic<bool> done{false};
    int rc = MPI_SUCCESS;
    MPI_Comm child = MPI_COMM_NULL;
  };
  const auto split = std::make_shared<Split>();
  const auto run = [split, parent = comm_, c = color < 0 ? MPI_UNDEFINED : color, key] {
    split->rc = MPI_Comm_split(parent, c, key, &split->child);
    split->done = true;
  };
  if (process_->thread_multiple()) {
    std::thread(run).detach();
    wait([&] { return split->done.load(); }, at);
  } else {
    run();
  }
  check(split->rc, at);
  const MPI_Comm child = split->child;
  if (child == MPI_COMM_NULL) return nullptr;
  return std::make_unique<MpiCommunicator>(
      process_, child, hash64(group_id_, entered_, static_cast<std::uint64_t>(color)), shared_accounting());
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::detached_copy() {
  Call call;
  call.kind = Collective::Split;
  call.to.assign(static_cast<std::size_t>(size()), 0);
  call.from = call.to;
  const std::string at = "detached copy of " + describe();
  handshake(call, at);
  MPI_Comm copy;
  MPI_Request request;
  check(MPI_Comm_idup(comm_, &copy, &request), at);
  wait_request(request, at);
  return std::make_unique<MpiCommunicator>(process_, copy, hash64(group_id_, entered_, kDuplicateMark),
                                           std::make_shared<Accounting>());
}

void run_mpi(const std::function<void(Communicator&)>& fn, const WorldOptions& options) {
  if (options.timeout.count() <= 0)
    throw ConfigError("run_mpi: the collective timeout must be positive, got " +
                      std::to_string(options.timeout.count()) + " ms");
  int initialized = 0, provided = 0;
  MPI_Initialized(&initialized);
  if (!initialized) MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
  else MPI_Query_thread(&provided);
  await_every_rank(options.timeout);
  {
    const auto process = std::make_shared<MpiProcess>(options.timeout, provided >= MPI_THREAD_MULTIPLE);
    try {
      MPI_Comm comm;
      MPI_Comm_dup(MPI_COMM_WORLD, &comm);
      MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
      MpiCommunicator world(process, comm, 0, std::make_shared<Accounting>());
      fn(world);
      process->finish(world);
    } catch (...) {
      process->fail_job(std::current_exception());
    }
  }
  if (!initialized) MPI_Finalize();
}

}  // namespace gdnv::comm
