#include "core/scratch_file.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "core/error.hpp"

namespace gdnv {
namespace {

[[noreturn]] void fail(const char* what, std::int64_t bytes) {
  throw Error(std::string("scratch file: ") + what + " of " + std::to_string(bytes) +
              " bytes failed: " + std::strerror(errno) + ": point TMPDIR at a file system with room for it");
}

}  // namespace

ScratchFile::ScratchFile() : file_(std::tmpfile(), &std::fclose) {
  if (!file_) fail("creating a temporary file", 0);
}

void ScratchFile::write(std::int64_t at, const double* data, std::int64_t n) {
  const auto* p = reinterpret_cast<const char*>(data);
  std::int64_t done = 0, bytes = n * static_cast<std::int64_t>(sizeof(double));
  while (done < bytes) {
    const ssize_t k = ::pwrite(::fileno(file_.get()), p + done, static_cast<std::size_t>(bytes - done),
                               static_cast<off_t>(at * static_cast<std::int64_t>(sizeof(double)) + done));
    if (k <= 0) fail("a write", bytes);
    done += k;
  }
}

void ScratchFile::read(std::int64_t at, double* data, std::int64_t n) const {
  auto* p = reinterpret_cast<char*>(data);
  std::int64_t done = 0, bytes = n * static_cast<std::int64_t>(sizeof(double));
  while (done < bytes) {
    const ssize_t k = ::pread(::fileno(file_.get()), p + done, static_cast<std::size_t>(bytes - done),
                              static_cast<off_t>(at * static_cast<std::int64_t>(sizeof(double)) + done));
    if (k <= 0) fail("a read", bytes);
    done += k;
  }
}

}  // namespace gdnv
