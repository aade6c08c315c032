// Files written here load with Python's `safetensors` package and files it saves load here. Skipped,
// visibly, when the package is not installed.
#include <cstdlib>

#include <gtest/gtest.h>

#include "cli_testing.hpp"
#include "core/half.hpp"
#include "core/safetensors.hpp"

namespace gdnv {
namespace {

bool python_safetensors_available() {
  return std::system("python3 -c 'import safetensors.numpy, numpy' >/dev/null 2>&1") == 0;
}

TEST(SafetensorsInterop, PythonReadsOursAndWeReadPythons) {
  if (!python_safetensors_available())
    GTEST_SKIP() << "python3 package 'safetensors' (with numpy) is not installed; ./run test installs it when PyPI "
                    "is reachable";
  const auto dir = testing::temp_dir("interop");
  TensorFile ours;
  ours.metadata = {{"scale", "0.37"}, {"use_qk_l2norm", "true"}};
  ours.tensors.emplace("q", Tensor::from(std::vector<double>{1.5, -2.25, 0.0, 3.0}, {2, 2}));
  ours.tensors.emplace("cu_seqlens", Tensor::from(std::vector<std::int64_t>{0, 3, 7}, {3}));
  ours.tensors.emplace("grad::in_proj.weight", Tensor::from_f64({0.5, 1.0, -1.0}, {3}, DType::F16));
  write_safetensors((dir / "ours.safetensors").string(), ours);

  const std::string script = GDNV_TEST_DATA "/interop.py";
  const std::string cmd = "python3 " + script + " " + dir.string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "python side failed: " << cmd;

  const TensorFile theirs = read_safetensors((dir / "theirs.safetensors").string());
  EXPECT_EQ(theirs.metadata.at("producer"), "python-safetensors");
  const Tensor& k = theirs.at("k", "theirs");
  EXPECT_EQ(k.dtype(), DType::F32);
  EXPECT_EQ(k.shape(), (Shape{2, 3}));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(k.get(i), 0.25 * i);
  const Tensor& ids = theirs.at("ids", "theirs");
  EXPECT_EQ(ids.to_i64(), (std::vector<std::int64_t>{7, -1}));
  EXPECT_EQ(ids.dtype(), DType::I32);
  std::filesystem::remove_all(dir);
}

// A probe dump as a PyTorch user opens it: names, shapes, dtypes and metadata of the inputs, the rank
// shards and meta.json.
TEST(SafetensorsInterop, PythonReadsAProbeDump) {
  if (!python_safetensors_available())
    GTEST_SKIP() << "python3 package 'safetensors' (with numpy) is not installed; ./run test installs it when PyPI "
                    "is reachable";
  const auto dir = testing::temp_dir("interop_probe");
  const auto r = testing::run_cli("probe dump --mode headwise --image py --world inproc:2 --out " + dir.string());
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const std::string cmd = "python3 " GDNV_TEST_DATA "/probe_interop.py " + dir.string();
  EXPECT_EQ(std::system(cmd.c_str()), 0) << "python side failed: " << cmd;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gdnv
