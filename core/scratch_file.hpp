#pragma once
// An unnamed temporary file of doubles (tmpfile(3): in $TMPDIR or /tmp, gone when closed or when the
// process ends), for intermediates too large to keep in memory that are written once and read back in
// blocks. Its pages sit in the page cache, not in the process's resident set.
#include <cstdint>
#include <cstdio>
#include <memory>

namespace gdnv {

class ScratchFile {
 public:
  ScratchFile();

  // `n` doubles at element offset `at`. A failed or short write or read throws Error naming the fix.
  void write(std::int64_t at, const double* data, std::int64_t n);
  void read(std::int64_t at, double* data, std::int64_t n) const;

 private:
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file_;
};

}  // namespace gdnv
