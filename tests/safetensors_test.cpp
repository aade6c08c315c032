// Every malformed safetensors file is a FormatError naming the file and (where one is involved) the
// tensor; writes are atomic.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "core/file.hpp"
#include "core/safetensors.hpp"
#include "core/vectors.hpp"

namespace gdnv {
namespace {

std::vector<std::uint8_t> image(const std::string& header, std::size_t data_bytes, std::uint64_t len_override = 0) {
  const std::uint64_t len = len_override ? len_override : header.size();
  std::vector<std::uint8_t> out(8);
  for (int i = 0; i < 8; ++i) out[i] = static_cast<std::uint8_t>(len >> (8 * i));
  out.insert(out.end(), header.begin(), header.end());
  out.resize(out.size() + data_bytes, 0);
  return out;
}

std::string parse_error(const std::vector<std::uint8_t>& bytes) {
  try {
    parse_safetensors(bytes.data(), bytes.size(), "bad.safetensors");
  } catch (const FormatError& e) {
    return e.what();
  }
  return "(no error)";
}

#define EXPECT_ERROR(bytes, ...)                                                                \
  do {                                                                                          \
    const std::string msg = parse_error(bytes);                                                 \
    EXPECT_EQ(msg.rfind("bad.safetensors: ", 0), 0u) << msg;                                    \
    for (const char* part : {__VA_ARGS__}) EXPECT_NE(msg.find(part), std::string::npos) << msg; \
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;                        \
  } while (0)

const std::string kOne = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";

TEST(SafetensorsReader, AcceptsWellFormedFile) {
  const auto f = parse_safetensors(image(kOne, 8).data(), 8 + kOne.size() + 8, "ok");
  EXPECT_EQ(f.at("a", "ok").shape(), (Shape{2}));
}

TEST(SafetensorsReader, RejectsTruncatedLength) { EXPECT_ERROR(std::vector<std::uint8_t>(5), "truncated"); }

TEST(SafetensorsReader, RejectsHeaderLongerThanFile) {
  EXPECT_ERROR(image(kOne, 0, kOne.size() + 100), "header length", "larger than");
}

TEST(SafetensorsReader, RejectsHeaderOver100MB) { EXPECT_ERROR(image(kOne, 8, 200ull << 20), "100 MB"); }

TEST(SafetensorsReader, RejectsInvalidJson) { EXPECT_ERROR(image("{\"a\": [1,", 0), "not valid JSON"); }

TEST(SafetensorsReader, RejectsNonObjectHeader) { EXPECT_ERROR(image("[1, 2]", 0), "not a JSON object"); }

TEST(SafetensorsReader, RejectsUnknownDtype) {
  EXPECT_ERROR(image(R"({"w":{"dtype":"F8","shape":[1],"data_offsets":[0,1]}})", 1), "tensor 'w'",
               "unknown dtype 'F8'");
}

TEST(SafetensorsReader, RejectsOffsetsPastEnd) {
  EXPECT_ERROR(image(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8), "tensor 'w'", "past the end");
}

TEST(SafetensorsReader, RejectsOverlap) {
  EXPECT_ERROR(image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},
                        "b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                     12),
               "tensor 'b'", "overlaps");
}

TEST(SafetensorsReader, RejectsHole) {
  EXPECT_ERROR(image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},
                        "b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                     12),
               "tensor 'b'", "hole");
}

TEST(SafetensorsReader, RejectsTrailingBytes) { EXPECT_ERROR(image(kOne, 12), "trailing bytes"); }

TEST(SafetensorsReader, RejectsByteCountMismatch) {
  EXPECT_ERROR(image(R"({"w":{"dtype":"F64","shape":[2],"data_offsets":[0,8]}})", 8), "tensor 'w'", "byte count 8",
               "numel 2");
}

TEST(SafetensorsReader, RejectsDuplicateNames) {
  EXPECT_ERROR(image(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},
                        "w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                     8),
               "tensor 'w'", "twice");
}

TEST(SafetensorsReader, RejectsMissingFieldsAndBadTypes) {
  EXPECT_ERROR(image(R"({"w":{"dtype":"F32","shape":[1]}})", 0), "tensor 'w'", "missing 'data_offsets'");
  EXPECT_ERROR(image(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", 0), "tensor 'w'", "shape");
  EXPECT_ERROR(image(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", 0), "tensor 'w'", "end < begin");
  EXPECT_ERROR(image(R"({"__metadata__":{"k":1}})", 0), "__metadata__", "'k'");
}

TEST(SafetensorsReader, RejectsShapeOverflow) {
  EXPECT_ERROR(image(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", 0), "tensor 'w'",
               "overflow");
}

TEST(SafetensorsReader, ReadsFileAndNamesMissingPath) {
  try {
    read_safetensors("/nonexistent/x.safetensors");
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/x.safetensors"), std::string::npos);
  }
}

TEST(SafetensorsWriter, WritesAtomicallyAndNeverLeavesPartialFiles) {
  const auto dir = std::filesystem::temp_directory_path() / ("gdnv_st_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  TensorFile file;
  file.tensors.emplace("x", Tensor::from(std::vector<float>{1, 2, 3}, {3}));
  const std::string path = (dir / "x.safetensors").string();
  write_safetensors(path, file);
  EXPECT_TRUE(read_safetensors(path).at("x", path).bitwise_equal(file.tensors.at("x")));

  EXPECT_THROW(write_safetensors((dir / "missing_dir" / "y.safetensors").string(), file), IoError);
  file.tensors.emplace("__metadata__", Tensor(DType::F32, {1}));
  EXPECT_THROW(write_safetensors(path, file), FormatError);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator()), 1)
      << "a failed write left a file behind";
  std::filesystem::remove_all(dir);
}

// Spans of one file read in pieces (4 KiB here; 64 MiB by default) over every core: a span of several
// pieces, spans out of order and an empty span come back whole from their offsets; past the end is a
// short read, EIO. A safetensors file read in pieces smaller than its tensor gives its bytes.
TEST(FileSpans, ReadEverySpanFromItsOffset) {
  constexpr std::uint64_t kPiece = 4096;
  const std::string path =
      (std::filesystem::temp_directory_path() / ("gdnv_spans_" + std::to_string(::getpid()))).string();
  std::vector<std::uint8_t> file(3 * kPiece + 8);
  for (std::size_t i = 0; i < file.size(); ++i) file[i] = static_cast<std::uint8_t>(i * 2654435761u >> 24);
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(file.data()), static_cast<std::streamsize>(file.size()));
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  std::vector<std::uint8_t> big(file.size() - 3), small(3), none;
  ASSERT_TRUE(
      read_spans(fd, {{big.data(), big.size(), 3}, {none.data(), 0, 1}, {small.data(), small.size(), 0}}, kPiece));
  EXPECT_TRUE(std::equal(big.begin(), big.end(), file.begin() + 3));
  EXPECT_TRUE(std::equal(small.begin(), small.end(), file.begin()));
  std::vector<std::uint8_t> past(16);
  EXPECT_FALSE(read_spans(fd, {{past.data(), past.size(), file.size() - 8}}, kPiece));
  EXPECT_EQ(errno, EIO);
  try {
    read_spans(fd, {{small.data(), small.size(), 0}}, 0);
    ADD_FAILURE() << "a piece of 0 bytes was accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "read_spans: the piece size must be positive");
  }
  ::close(fd);
  TensorFile st;
  Tensor x(DType::F32, {3000});  // 12000 bytes: three whole pieces and part of a fourth
  for (std::int64_t i = 0; i < x.numel(); ++i) x.set(i, static_cast<double>(i) - 1500.5);
  st.tensors.emplace("x", x);
  st.tensors.emplace("y", Tensor::from(std::vector<double>{1.5, -2.25}, {2}));
  write_safetensors(path, st);
  const TensorFile back = read_safetensors(path, kPiece);
  EXPECT_TRUE(back.at("x", path).bitwise_equal(x));
  EXPECT_TRUE(back.at("y", path).bitwise_equal(st.tensors.at("y")));
  std::filesystem::remove(path);
}

// The reference vectors' reader lists the data files of tests/data/vectors, not its README.
TEST(ReferenceVectors, ListsEveryJsonAndSafetensorsFileSorted) {
  EXPECT_EQ(vector_files(), (std::vector<std::string>{"conv1d_silu_bias.safetensors", "fla_cp_context.json",
                                                      "gdr_batched_h0.safetensors", "gdr_varlen_gva_scale.safetensors",
                                                      "layouts_megatron.json"}));
}

TEST(SafetensorsReader, LoadsEveryReferenceVector) {
  for (const char* name : {"gdr_batched_h0", "gdr_varlen_gva_scale", "conv1d_silu_bias"}) {
    const auto f = read_vector(std::string(name) + ".safetensors");
    EXPECT_GT(f.tensors.size(), 3u) << name;
    EXPECT_TRUE(f.metadata.count("source")) << name;
  }
}

}  // namespace
}  // namespace gdnv
