// main() of the bench_* programs: the memory policy of the CLI, then Google Benchmark.
#include <benchmark/benchmark.h>

#include "core/memory.hpp"

int main(int argc, char** argv) {
  gdnv::keep_freed_memory();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
