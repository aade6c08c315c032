#pragma once
// Error kinds. Every user-facing failure is one of these; the CLI prints its message on one line and
// exits with code 3 (usage, configuration or I/O error).
#include <stdexcept>
#include <string>

namespace gdnv {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A file that is not valid in its format (safetensors, JSON, manifest). The message names the file
// and, where one is involved, the tensor.
struct FormatError : Error {
  using Error::Error;
};

// An invalid option, geometry or combination. The message names the bad value and the fix.
struct ConfigError : Error {
  using Error::Error;
};

// Reading or writing the file system failed.
struct IoError : Error {
  using Error::Error;
};

}  // namespace gdnv
