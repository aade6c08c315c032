#pragma once
// An unnamed temporary file of doubles in $TMPDIR (else /tmp), removed from the directory as soon as it
// is created and gone when closed, for intermediates too large to keep in memory that are written once
// and read back in blocks. Its pages sit in the page cache, not in the process's resident set.
#include <cstdint>
#include <string>

namespace gdnv {

class ScratchFile {
 public:
  ScratchFile();
  ~ScratchFile();
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;

  // `n` doubles at element offset `at`. A failed or short write or read throws Error naming the fix.
  void write(std::int64_t at, const double* data, std::int64_t n);
  void read(std::int64_t at, double* data, std::int64_t n) const;

 private:
  std::string dir_;
  int fd_ = -1;
};

}  // namespace gdnv
