#pragma once
// Progress of a long command, on stderr only: stdout (the report a pipe or file keeps) is never touched,
// so a piped report stays byte-identical with or without it. On a terminal one line is rewritten in place;
// asked for (--progress) where stderr is no terminal, one line per item; otherwise nothing.
#include <chrono>
#include <condition_variable>
#include <iosfwd>
#include <mutex>
#include <string>
#include <thread>

namespace gdnv {

enum class ProgressStyle { Off, Terminal, Lines };
// Terminal when stderr is a terminal, else Lines when `asked`, else Off.
ProgressStyle progress_style(bool asked);

// "1:05", "12 s": a duration as the progress lines print it.
std::string progress_duration(double seconds);

// Items of one command done out of a known total, with the elapsed time and an ETA from the mean item.
class Progress {
 public:
  Progress(std::string label, int total, std::string unit, ProgressStyle style, std::ostream& err);
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  // `done` items finished, `now` names the one starting (with `detail`, e.g. steps done so far).
  void update(int done, const std::string& now, const std::string& detail = "");
  // The last line: every item done, the total time; a terminal's line ends there.
  void finish(const std::string& detail = "");

 private:
  void show(const std::string& line);
  std::string label_, unit_;
  int total_;
  ProgressStyle style_;
  std::ostream& err_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// One long operation without items. On a terminal "<what> ..." (nothing when `what` is empty: after a
// line such as the gate's "[7/18] step ..." on stdout), then " 12 s" rewritten every `interval`, all of it
// erased when the operation ends; Lines: "<what> ..." at the start and "<what> done in 12 s" at the end;
// Off: nothing.
class Ticker {
 public:
  Ticker(std::string what, ProgressStyle style, std::ostream& err,
         std::chrono::milliseconds interval = std::chrono::milliseconds(1000));
  Ticker(const Ticker&) = delete;
  Ticker& operator=(const Ticker&) = delete;
  ~Ticker();

 private:
  void tick();
  std::string what_;
  ProgressStyle style_;
  std::ostream& err_;
  std::chrono::milliseconds interval_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::size_t prefix_ = 0;  // characters of "<what> ..." on the terminal
  std::mutex mutex_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace gdnv
