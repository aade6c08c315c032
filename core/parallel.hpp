#pragma once
// A deterministic parallel loop over independent pieces of work (GEMM blocks, heads, sequences).
#include <cstdint>
#include <functional>

namespace gdnv {

// Runs f(i) for every i in [0, n) on up to `threads` threads (0: one per hardware thread), then
// rethrows the first exception a task threw. Tasks must write disjoint outputs and each must do the
// same arithmetic whichever thread runs it, so the result is bit-identical for any thread count.
// The number of hardware threads, at least 1: what `threads` = 0 means.
int hardware_threads();

void parallel_for(std::int64_t n, int threads, const std::function<void(std::int64_t)>& f);

}  // namespace gdnv
