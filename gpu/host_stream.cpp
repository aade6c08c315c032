// The emulation's stream: one worker thread runs the queue in order while the host goes on, so a
// missing event wait or a read before its producer shows up in ctest as it would on a GPU.
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "comm/rank_sum.hpp"
#include "comm/transport.hpp"
#include "core/error.hpp"
#include "gpu/stream.hpp"

namespace gdnv::gpu {
namespace {

// The points a record marked (`recorded`) and how far the recording stream has come (`reached`).
struct HostEvent final : Stream::Event {
  std::mutex mu;
  std::condition_variable cv;
  std::uint64_t recorded = 0, reached = 0;
};

}  // namespace

struct HostStream::Queue {
  Queue() : worker([this] { run(); }) {}
  ~Queue() {
    {
      const std::lock_guard lock(mu);
      stop = true;
    }
    cv.notify_all();
    worker.join();
  }

  void push(std::function<void()> task) {
    {
      const std::lock_guard lock(mu);
      tasks.push_back(std::move(task));
    }
    cv.notify_all();
  }

  // Waits until every task pushed so far has run; the first failure since the last drain, or null.
  std::exception_ptr drain() {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return tasks.empty() && !busy; });
    return std::exchange(error, nullptr);
  }

  void run() {
    std::unique_lock lock(mu);
    while (true) {
      cv.wait(lock, [&] { return stop || !tasks.empty(); });
      if (tasks.empty()) return;  // stopping, and everything pushed has run
      std::function<void()> task = std::move(tasks.front());
      tasks.pop_front();
      busy = true;
      lock.unlock();
      try {
        task();
      } catch (...) {
        const std::lock_guard relock(mu);
        if (!error) error = std::current_exception();
      }
      lock.lock();
      busy = false;
      cv.notify_all();
    }
  }

  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> tasks;
  bool busy = false, stop = false;
  std::exception_ptr error;
  std::thread worker;  // last: starts once the members above exist
};

HostStream::HostStream() : queue_(std::make_shared<Queue>()) {}

HostStream::~HostStream() { (void)queue_->drain(); }

void HostStream::enqueue(std::function<void()> task) { queue_->push(std::move(task)); }

std::shared_ptr<void> HostStream::alloc(std::size_t bytes) {
  void* p = std::calloc(bytes == 0 ? 1 : bytes, 1);
  if (!p) throw Error("emulated stream: cannot allocate " + std::to_string(bytes) + " bytes");
  return std::shared_ptr<void>(p, [q = queue_](void* mem) { q->push([mem] { std::free(mem); }); });
}

void HostStream::upload(void* dst, const void* host_src, std::size_t bytes) {
  const auto* src = static_cast<const std::byte*>(host_src);
  enqueue([dst, staged = std::vector<std::byte>(src, src + bytes)] { std::memcpy(dst, staged.data(), staged.size()); });
}

void HostStream::copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes) enqueue([=] { std::memcpy(dst, src, bytes); });
}

void HostStream::zero(void* dst, std::size_t bytes) {
  enqueue([=] { std::memset(dst, 0, bytes); });
}

void HostStream::rank_sum(DType dtype, void* out, const void* blocks, std::int64_t stride, int n, std::int64_t count) {
  enqueue([=] {
    const auto es = static_cast<std::int64_t>(dtype_size(dtype));
    std::vector<const void*> inputs;
    for (int r = 0; r < n; ++r) inputs.push_back(static_cast<const std::byte*>(blocks) + r * stride * es);
    gdnv::comm::rank_sum(dtype, out, inputs, count);
  });
}

std::shared_ptr<Stream::Event> HostStream::make_event() { return std::make_shared<HostEvent>(); }

void HostStream::record(const std::shared_ptr<Event>& event) {
  const auto held = std::static_pointer_cast<HostEvent>(event);
  std::uint64_t point = 0;
  {
    const std::lock_guard lock(held->mu);
    point = ++held->recorded;
  }
  enqueue([held, point] {
    HostEvent& e = *held;
    const std::lock_guard lock(e.mu);
    e.reached = std::max(e.reached, point);
    e.cv.notify_all();
  });
}

void HostStream::wait(const std::shared_ptr<Event>& event) {
  const auto held = std::static_pointer_cast<HostEvent>(event);
  std::uint64_t point = 0;
  {
    const std::lock_guard lock(held->mu);
    point = held->recorded;
  }
  enqueue([held, point] {
    HostEvent& e = *held;
    std::unique_lock lock(e.mu);
    e.cv.wait(lock, [&] { return e.reached >= point; });
  });
}

void HostStream::synchronize(const char* what) {
  if (const std::exception_ptr e = queue_->drain()) throw Error(std::string(what) + ": " + comm::message_of(e));
}

void HostStream::fetch(void* host_dst, const void* src, std::size_t bytes) { copy(host_dst, src, bytes); }

}  // namespace gdnv::gpu
