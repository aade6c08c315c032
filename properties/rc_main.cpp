// main() of every RapidCheck suite: fixes the default seed so a run is reproducible, lets RC_PARAMS
// override it, and prints the seed first so any run can be repeated.
#include <cstdlib>
#include <iostream>
#include <string>

#include <gtest/gtest.h>

namespace {
#define GDNV_STR2(x) #x
#define GDNV_STR(x) GDNV_STR2(x)
constexpr const char* kDefaultParams = "seed=20261202 max_success=" GDNV_STR(GDNV_RC_MAX_SUCCESS);
}  // namespace

int main(int argc, char** argv) {
  const char* given = std::getenv("RC_PARAMS");
  const std::string params = given && *given ? std::string(given) : std::string(kDefaultParams);
  if (!(given && *given)) setenv("RC_PARAMS", kDefaultParams, 1);
  std::cout << "RC_PARAMS=\"" << params << "\" (override with RC_PARAMS=\"seed=N ...\"; a failure prints "
            << "its reproduce string)\n";
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
