#include "core/scratch_file.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/error.hpp"

namespace gdnv {
namespace {

std::string scratch_dir() {
  const char* dir = std::getenv("TMPDIR");
  return dir && *dir ? dir : "/tmp";
}

[[noreturn]] void fail(const std::string& dir, const std::string& what) {
  throw Error("scratch file in " + dir + ": " + what + " failed (" + std::strerror(errno) +
              "): point TMPDIR at a writable directory with room for it");
}

}  // namespace

ScratchFile::ScratchFile(std::int64_t capacity) {
  if (capacity * static_cast<std::int64_t>(sizeof(double)) <= kScratchInMemoryBytes) {
    memory_.reset(new double[static_cast<std::size_t>(capacity)]);  // written before read: no zero fill
    return;
  }
  dir_ = scratch_dir();
  std::string name = dir_ + "/gdnv_scratch_XXXXXX";
  std::vector<char> path(name.begin(), name.end());
  path.push_back('\0');
  fd_ = ::mkstemp(path.data());
  if (fd_ < 0) fail(dir_, "creating it");
  ::unlink(path.data());
}

ScratchFile::~ScratchFile() {
  if (fd_ >= 0) ::close(fd_);
}

void ScratchFile::write(std::int64_t at, const double* data, std::int64_t n) {
  if (memory_) {
    std::copy_n(data, n, memory_.get() + at);
    return;
  }
  const auto* p = reinterpret_cast<const char*>(data);
  const std::int64_t bytes = n * static_cast<std::int64_t>(sizeof(double)), base = at * 8;
  for (std::int64_t done = 0; done < bytes;) {
    const ssize_t k = ::pwrite(fd_, p + done, static_cast<std::size_t>(bytes - done), static_cast<off_t>(base + done));
    if (k <= 0) fail(dir_, "writing " + std::to_string(bytes) + " bytes");
    done += k;
  }
}

void ScratchFile::read(std::int64_t at, double* data, std::int64_t n) const {
  if (memory_) {
    std::copy_n(memory_.get() + at, n, data);
    return;
  }
  auto* p = reinterpret_cast<char*>(data);
  const std::int64_t bytes = n * static_cast<std::int64_t>(sizeof(double)), base = at * 8;
  for (std::int64_t done = 0; done < bytes;) {
    const ssize_t k = ::pread(fd_, p + done, static_cast<std::size_t>(bytes - done), static_cast<off_t>(base + done));
    if (k < 0) fail(dir_, "reading " + std::to_string(bytes) + " bytes");
    if (k == 0) throw Error("scratch file in " + dir_ + ": read past its end at byte " + std::to_string(base + done));
    done += k;
  }
}

}  // namespace gdnv
