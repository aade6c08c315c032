#pragma once
// Room for `capacity` doubles that are written once and read back in blocks: in memory up to
// kScratchInMemoryBytes, else an unnamed temporary file in $TMPDIR (else /tmp), removed from the directory
// as soon as it is created and gone when closed, whose pages sit in the page cache, not in the process's
// resident set.
#include <cstdint>
#include <memory>
#include <string>

namespace gdnv {

// Below this the copies cost more time than the memory is worth (the real-scale layer of docs/DESIGN.md §7
// keeps 0.54 GB here at T = 4096 and spills 4.3 GB at T = 32768).
inline constexpr std::int64_t kScratchInMemoryBytes = std::int64_t{1} << 30;

class ScratchFile {
 public:
  explicit ScratchFile(std::int64_t capacity);
  ~ScratchFile();
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;

  // `n` doubles at element offset `at`. A failed or short write or read throws Error naming the fix.
  void write(std::int64_t at, const double* data, std::int64_t n);
  void read(std::int64_t at, double* data, std::int64_t n) const;

 private:
  std::unique_ptr<double[]> memory_;  // in memory: the doubles; else null
  std::string dir_;
  int fd_ = -1;
};

}  // namespace gdnv
