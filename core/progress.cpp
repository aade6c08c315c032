#include "core/progress.hpp"

#include <unistd.h>
#include <cstdio>
#include <exception>
#include <ostream>

namespace gdnv {
namespace {

double since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

ProgressStyle progress_style(bool asked) {
  if (::isatty(STDERR_FILENO)) return ProgressStyle::Terminal;
  return asked ? ProgressStyle::Lines : ProgressStyle::Off;
}

std::string progress_duration(double seconds) {
  char buf[32];
  const long s = static_cast<long>(seconds + 0.5);
  if (s < 60) std::snprintf(buf, sizeof buf, "%ld s", s);
  else std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  return buf;
}

Progress::Progress(std::string label, int total, std::string unit, ProgressStyle style, std::ostream& err)
    : label_(std::move(label)), unit_(std::move(unit)), total_(total), style_(style), err_(err) {}

void Progress::show(const std::string& line) {
  if (style_ == ProgressStyle::Off) return;
  // A terminal's line is rewritten: back to its start, the new text, the rest of the old one cleared.
  if (style_ == ProgressStyle::Terminal) err_ << "\r" << line << "\033[K" << std::flush;
  else err_ << line << "\n" << std::flush;
}

void Progress::update(int done, const std::string& now, const std::string& detail) {
  const double elapsed = since(start_);
  std::string line = label_ + ": " + std::to_string(done) + "/" + std::to_string(total_) + " " + unit_ +
                     (detail.empty() ? "" : " (" + detail + ")") + ", now " + now + ", " + progress_duration(elapsed) +
                     " elapsed";
  if (done > 0) line += ", ETA " + progress_duration(elapsed / done * (total_ - done));
  show(line);
}

void Progress::finish(const std::string& detail) {
  show(label_ + ": " + std::to_string(total_) + "/" + std::to_string(total_) + " " + unit_ +
       (detail.empty() ? "" : " (" + detail + ")") + " in " + progress_duration(since(start_)));
  if (style_ == ProgressStyle::Terminal) err_ << "\n" << std::flush;
}

Ticker::Ticker(std::string what, ProgressStyle style, std::ostream& err, std::chrono::milliseconds interval)
    : what_(std::move(what)), style_(style), err_(err), interval_(interval) {
  if (style_ == ProgressStyle::Lines) err_ << what_ << " ...\n" << std::flush;
  if (style_ != ProgressStyle::Terminal) return;
  const std::string prefix = what_.empty() ? "" : what_ + " ...";
  err_ << prefix << std::flush;
  prefix_ = prefix.size();
  thread_ = std::thread([this] { tick(); });
}

void Ticker::tick() {
  std::unique_lock lock(mutex_);
  std::size_t shown = 0;  // characters of the last tick
  while (!stop_cv_.wait_for(lock, interval_, [this] { return stop_; })) {
    const std::string text = " " + progress_duration(since(start_));
    err_ << std::string(shown, '\b') << text << std::flush;
    shown = text.size();
  }
  // Erased, what came before it too: the caller's own text goes on where the ticker began.
  const std::size_t all = prefix_ + shown;
  err_ << std::string(all, '\b') << std::string(all, ' ') << std::string(all, '\b') << std::flush;
}

Ticker::~Ticker() {
  if (thread_.joinable()) {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    stop_cv_.notify_one();
    thread_.join();
  }
  if (style_ == ProgressStyle::Lines)
    err_ << what_ << (std::uncaught_exceptions() ? " stopped after " : " done in ") << progress_duration(since(start_))
         << "\n";
}

}  // namespace gdnv
