#pragma once
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace gdnv {

// IoError naming the path when it exists and is not a regular file (a directory; a FIFO or a device,
// whose read would block or never end). Called before an input is opened.
void require_regular_input(const std::string& path);
// Whole-file read; IoError naming the path when it cannot be opened or read.
std::vector<std::uint8_t> read_file_bytes(const std::string& path);
std::string read_file_text(const std::string& path);
// Writes `path.tmp.<pid>` then renames it over `path`: readers never see a partial file, and a
// failed write leaves nothing behind; SIGTERM, SIGINT or SIGHUP during the write removes the temp file
// before the process ends. A symlink to a regular file is written through (the link stays, its target
// is replaced).
void write_file_atomic(const std::string& path, const std::function<bool(std::FILE*)>& write);
void write_file_atomic(const std::string& path, const std::vector<std::uint8_t>& bytes);
void write_file_atomic(const std::string& path, const std::string& text);
// Several files, all written or none: every temp file first, then the renames.
void write_files_atomic(const std::vector<std::pair<std::string, std::string>>& path_and_text);

// Bytes of memory at an offset of a file. read_spans reads every span with pread in pieces of at most
// `piece` bytes (64 MiB; tests pass a few KiB to cut a small tensor into several), shared out over every
// core (0.85 s instead of 1.04 s for the real-size layer's 0.8 GB; writes to one file are serialised by
// its inode lock, so they stay one stream). False on a short or failed read (errno says why: EIO for a
// short one).
struct FileSpan {
  std::uint8_t* data;
  std::uint64_t size, offset;
};
constexpr std::uint64_t kReadPiece = 64ull << 20;
bool read_spans(int fd, const std::vector<FileSpan>& spans, std::uint64_t piece = kReadPiece);

// A file a command will write, given by `option` ("--json").
struct OutputPath {
  std::string option, path;
};
// Every command's outputs, checked before its work starts so that a bad one fails with nothing done
//: ConfigError naming the option and the path when an output is one of `inputs` or an existing file of
// an input directory (by any spelling, `./x`, `d/../x`, and through any link), a directory, a device,
// FIFO or socket, a dangling symlink or a symlink loop, given twice, or cannot be created (missing or
// unwritable directory, read-only file system, name too long: probed by creating and removing the temp
// file write_file_atomic uses).
// Absent options (empty paths) are skipped.
void check_outputs(const std::vector<OutputPath>& outputs, const std::vector<std::string>& inputs = {});

// A directory a command will write into (created if missing), checked the same way before the work:
// ConfigError naming `option` when it is not a directory, or it (or, when missing, its nearest existing
// ancestor) cannot be written.
void check_output_directory(const std::string& option, const std::string& dir);

}  // namespace gdnv
