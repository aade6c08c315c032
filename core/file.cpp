#include "core/file.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>

#include "core/error.hpp"
#include "core/parallel.hpp"

namespace gdnv {
namespace fs = std::filesystem;
namespace {

// The temp files being written now, removed by a terminating signal's handler: fixed slots, so the
// handler touches no allocator and no lock (async-signal-safe).
struct TempSlot {
  std::atomic<int> state{0};  // 0 free, 1 being filled, 2 live
  std::array<char, 4096> path{};
};
std::array<TempSlot, 64> g_temp_files;
constexpr int kCleanupSignals[] = {SIGTERM, SIGINT, SIGHUP};

void remove_temp_files_and_die(int sig) {
  for (auto& slot : g_temp_files)
    if (slot.state.load() == 2) ::unlink(slot.path.data());
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

// Installs the handler for the signals whose disposition is still the default (a program's own
// handler is kept).
void install_cleanup_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (const int sig : kCleanupSignals) {
      struct sigaction old {};
      if (::sigaction(sig, nullptr, &old) != 0 || old.sa_handler != SIG_DFL) continue;
      struct sigaction action {};
      action.sa_handler = remove_temp_files_and_die;
      sigemptyset(&action.sa_mask);
      ::sigaction(sig, &action, nullptr);
    }
  });
}

// Registers a temp file for removal on a terminating signal while alive (best effort: a path too long
// for a slot, or all slots taken, goes unregistered).
class TempFile {
 public:
  explicit TempFile(const std::string& path) {
    install_cleanup_handler();
    if (path.size() >= TempSlot{}.path.size()) return;
    for (auto& s : g_temp_files) {
      int expected = 0;
      if (!s.state.compare_exchange_strong(expected, 1)) continue;
      std::memcpy(s.path.data(), path.c_str(), path.size() + 1);
      s.state = 2;
      slot_ = &s;
      return;
    }
  }
  ~TempFile() {
    if (slot_) slot_->state = 0;
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

 private:
  TempSlot* slot_ = nullptr;
};

std::string temp_path(const std::string& path) { return path + ".tmp." + std::to_string(::getpid()); }

// A symlink is written through: the path its target has.
std::string write_target(const std::string& path) {
  std::error_code ec;
  if (!fs::is_symlink(path, ec)) return path;
  const fs::path target = fs::canonical(path, ec);
  if (ec) throw IoError(path + ": a symlink whose target cannot be resolved (" + ec.message() + ")");
  return target.string();
}

// Writes the temp file of `path`; IoError (temp file removed) on failure.
void write_temp(const std::string& path, const std::string& tmp, const std::function<bool(std::FILE*)>& write) {
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw IoError(path + ": cannot open for writing (" + std::strerror(errno) + ")");
  const bool written = write(f);
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    throw IoError(path + ": write failed (" + why + "); nothing was written");
  }
}

std::string file_kind(const fs::file_status& s) {
  switch (s.type()) {
    case fs::file_type::directory:
      return "a directory";
    case fs::file_type::character:
      return "a character device";
    case fs::file_type::block:
      return "a block device";
    case fs::file_type::fifo:
      return "a FIFO";
    case fs::file_type::socket:
      return "a socket";
    default:
      return "not a regular file";
  }
}

}  // namespace

void require_regular_input(const std::string& path) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (fs::exists(status) && !fs::is_regular_file(status))
    throw IoError(path + ": is " + file_kind(status) + ", expected a file");
}

std::vector<std::uint8_t> read_file_bytes(const std::string& path) {
  require_regular_input(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(path + ": cannot open for reading (" + std::strerror(errno) + ")");
  std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw IoError(path + ": read failed");
  return bytes;
}

std::string read_file_text(const std::string& path) {
  const auto bytes = read_file_bytes(path);
  return std::string(bytes.begin(), bytes.end());
}

void write_file_atomic(const std::string& path, const std::function<bool(std::FILE*)>& write) {
  const std::string target = write_target(path), tmp = temp_path(target);
  const TempFile registered(tmp);
  write_temp(path, tmp, write);
  if (std::rename(tmp.c_str(), target.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    throw IoError(path + ": write failed (" + why + "); nothing was written");
  }
}

void write_file_atomic(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  write_file_atomic(path, [&](std::FILE* f) { return std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size(); });
}

void write_file_atomic(const std::string& path, const std::string& text) {
  write_file_atomic(path, std::vector<std::uint8_t>(text.begin(), text.end()));
}

namespace {

// pread of one piece, repeated until all of it has arrived.
bool read_all(int fd, std::uint8_t* data, std::uint64_t size, std::uint64_t offset) {
  while (size > 0) {
    const ssize_t n = ::pread(fd, data, size, static_cast<off_t>(offset));
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      if (n == 0) errno = EIO;
      return false;
    }
    data += n;
    size -= static_cast<std::uint64_t>(n);
    offset += static_cast<std::uint64_t>(n);
  }
  return true;
}

}  // namespace

bool read_spans(int fd, const std::vector<FileSpan>& spans, std::uint64_t piece) {
  if (piece == 0) throw Error("read_spans: the piece size must be positive");
  std::vector<FileSpan> pieces;
  for (const FileSpan& s : spans)
    for (std::uint64_t at = 0; at < s.size; at += piece)
      pieces.push_back({s.data + at, std::min(piece, s.size - at), s.offset + at});
  std::atomic<bool> ok{true};
  std::atomic<int> error{0};
  parallel_for(static_cast<std::int64_t>(pieces.size()), 0, [&](std::int64_t i) {
    const FileSpan& p = pieces[static_cast<std::size_t>(i)];
    if (ok && !read_all(fd, p.data, p.size, p.offset)) {
      error = errno;
      ok = false;
    }
  });
  if (!ok) errno = error;
  return ok;
}

void write_files_atomic(const std::vector<std::pair<std::string, std::string>>& path_and_text) {
  std::vector<std::string> targets, temps;
  std::vector<std::unique_ptr<TempFile>> registered;
  const auto remove_temps = [&] {
    for (const auto& t : temps) std::remove(t.c_str());
  };
  try {
    for (const auto& [path, text] : path_and_text) {
      targets.push_back(write_target(path));
      temps.push_back(temp_path(targets.back()));
      registered.push_back(std::make_unique<TempFile>(temps.back()));
      write_temp(path, temps.back(),
                 [&](std::FILE* f) { return std::fwrite(text.data(), 1, text.size(), f) == text.size(); });
    }
  } catch (...) {
    remove_temps();
    throw;
  }
  for (std::size_t i = 0; i < temps.size(); ++i)
    if (std::rename(temps[i].c_str(), targets[i].c_str()) != 0) {
      const std::string why = std::strerror(errno);
      remove_temps();
      throw IoError(path_and_text[i].first + ": write failed (" + why + ")" +
                    (i ? "after " + std::to_string(i) + " of the outputs were written" : "; nothing was written"));
    }
}

namespace {

// Creates and removes `file`; ConfigError naming `named` when that fails.
void probe_writable(const std::string& named, const std::string& file) {
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0)
    throw ConfigError(named + ": cannot be written (" + std::strerror(errno) +
                      "): give a path in an existing, writable directory");
  ::close(fd);
  ::unlink(file.c_str());
}

}  // namespace

void check_output_directory(const std::string& option, const std::string& dir) {
  const std::string named = option + " " + dir;
  std::error_code ec;
  fs::path existing = dir.empty() ? fs::path(".") : fs::path(dir);
  // The nearest existing ancestor: a loop, a name too long or a file on the way fails here.
  for (;;) {
    (void)fs::symlink_status(existing, ec);
    if (!ec) break;
    if (ec != std::errc::no_such_file_or_directory || !existing.has_relative_path() ||
        existing == existing.parent_path())
      throw ConfigError(named + ": " + ec.message() + ": give a directory path");
    existing = existing.has_parent_path() ? existing.parent_path() : fs::path(".");
  }
  const fs::file_status status = fs::status(existing, ec);
  if (ec) throw ConfigError(named + ": " + existing.string() + " cannot be resolved (" + ec.message() + ")");
  if (!fs::is_directory(status))
    throw ConfigError(named + ": " + existing.string() + " is " +
                      (fs::is_regular_file(status) ? std::string("a file") : file_kind(status)) +
                      ": give a directory path");
  probe_writable(named, (existing / (".gdnv-probe." + std::to_string(::getpid()))).string());
}

void check_outputs(const std::vector<OutputPath>& outputs, const std::vector<std::string>& inputs) {
  std::vector<fs::path> seen;
  for (const auto& [option, path] : outputs) {
    if (path.empty()) continue;
    const std::string named = option + " " + path;
    std::error_code ec;
    const fs::file_status link = fs::symlink_status(path, ec);
    if (ec && ec != std::errc::no_such_file_or_directory)
      throw ConfigError(named + ": " + ec.message() + ": give a path in an existing, writable directory");
    const fs::file_status status = fs::status(path, ec);
    if (fs::is_symlink(link) && !fs::exists(status))
      throw ConfigError(named + ": a symlink to a missing file (" + ec.message() + "): give a regular file's path");
    if (fs::exists(status) && !fs::is_regular_file(status))
      throw ConfigError(named + ": is " + file_kind(status) + ": give a regular file's path");
    // An existing file that is an input, or a file of an input directory (a probe image's rank file),
    // by any spelling and through any link: the file the write would replace, links resolved.
    for (const auto& input : inputs) {
      if (!fs::exists(status)) break;
      if (fs::equivalent(path, input, ec))
        throw ConfigError(named + ": is the input " + input + ": write the output to another file");
      const fs::path parent = fs::canonical(path, ec).parent_path();
      if (!ec && fs::is_directory(input, ec) && fs::equivalent(parent, input, ec))
        throw ConfigError(named + ": is a file of the input directory " + input + ": write the output elsewhere");
    }
    const fs::path absolute = fs::weakly_canonical(path, ec);
    for (const auto& other : seen)
      if (!ec && other == absolute) throw ConfigError(named + ": given for two outputs: give each its own file");
    seen.push_back(absolute);
    // The very temp file the write will use: created and removed, so a missing or read-only directory,
    // a full name too long or a path under a regular file fails now.
    probe_writable(named, temp_path(write_target(path)));
  }
}

}  // namespace gdnv
